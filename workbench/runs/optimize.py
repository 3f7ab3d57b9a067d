"""``workbench optimize ENV -m MODEL --reflection-model R``: the harness's system prompt improved by
GEPA (reflective evolution with a Pareto front), the environment's rubric the metric.

The tasks split in two: the last ``--heldout`` are never shown to the search; GEPA evaluates and
reflects on the others (the training split). The seed prompt (the harness's own, or the override in
effect) and the best prompt found are each evaluated on the held-out split; those two runs form a
comparison (``workbench compare PIPELINE``: the paired per-task difference with its bootstrap CI).
Every evaluation is a normal eval run whose config names the pipeline and the candidate; the
optimisation itself is a run of kind ``optimize`` whose summary holds the candidates and their scores,
updated as the search goes, so the app shows it live. ``--apply`` keeps the best prompt as an override
of the environment (``workbench.authoring.overrides``), which ``eval``, ``train`` and ``package`` load.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.authoring import discovery, overrides
from workbench.errors import ConfigError, OptionError
from workbench.runs.endpoint import resolve_endpoint
from workbench.runs.evaluate import EvalOptions, evaluate
from workbench.runs.prompt_search import (
    COMPONENT,
    Bridge,
    BudgetStopper,
    ProgressLog,
    ReflectionModel,
    RunAdapter,
    SearchState,
    SearchStopped,
)
from workbench.store import Store
from workbench.store.prices import match_price

if TYPE_CHECKING:
    from gepa import GEPAAdapter, GEPAResult
from workbench.store.costs import add_cost_event

KIND = "optimize"


@dataclass(slots=True)
class OptimizeOptions:
    env: str
    model: str | None = None
    reflection_model: str = ""
    env_args: dict[str, Any] = field(default_factory=dict)
    base_url: str | None = None
    reflection_base_url: str | None = None
    budget_usd: float | None = None
    max_evals: int | None = None  # GEPA's metric calls: rollouts the search may run on the training split
    n: int | None = None  # training tasks: the first N of those not held out
    heldout: int | None = None  # the last N tasks (default: a fifth, at least 1)
    rollouts_per_task: int = 1  # of the held-out evaluations
    concurrency: int = 32
    minibatch: int = 3  # tasks GEPA reflects on per proposal
    seed: int = 0
    apply: bool = False

    def validate(self) -> None:
        if not self.reflection_model:
            raise OptionError("OptimizeOptions.reflection_model", self.reflection_model, template="optimize needs a "
                              "reflection model: {field} NAME (a registered model, or {url} URL with its id)",
                              names={"url": "OptimizeOptions.reflection_base_url"})
        if self.budget_usd is not None and not (math.isfinite(self.budget_usd) and self.budget_usd > 0):
            raise OptionError("OptimizeOptions.budget_usd", self.budget_usd, "a positive number of US dollars")
        for name in ("max_evals", "n", "heldout", "rollouts_per_task", "concurrency", "minibatch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OptionError(f"OptimizeOptions.{name}", value, "at least 1")


@dataclass(slots=True)
class OptimizeOutcome:
    pipeline_id: str
    summary: dict[str, Any]


def new_pipeline_id() -> str:
    return "opt-" + secrets.token_hex(4)


def split(n_tasks: int, opts: OptimizeOptions) -> tuple[list[int], list[int]]:
    """(training task indices, held-out task indices)."""
    held = opts.heldout if opts.heldout is not None else max(1, n_tasks // 5)
    if held >= n_tasks:
        raise ConfigError(f"--heldout {held} leaves no training tasks: the environment has {n_tasks}; hold out fewer")
    train = list(range(n_tasks - held))[: opts.n]
    return train, list(range(n_tasks - held, n_tasks))


def estimate_rollout_usd(env: Any, price: Any) -> tuple[float, int]:
    """(a rollout's cost at most, its tokens): the first task's prompt (four characters a token) and the
    full generation budget, at ``price``."""
    task = next(iter(env.tasks))
    messages = task.messages(getattr(env.harness, "system_prompt", None))
    prompt_tokens = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 8 * len(messages)
    completion_tokens = int(env.sampling.max_tokens or 512)
    return (price.cost(prompt_tokens, completion_tokens) if price else 0.0), prompt_tokens + completion_tokens


async def optimize(opts: OptimizeOptions | None, store: Store, *, log: Callable[[str], None] | None = None,
                   on_start: Callable[[str], None] | None = None, resume: str | None = None) -> OptimizeOutcome:
    """Run an optimisation, or (``resume``, with ``opts`` None) continue a stored one that did not finish:
    its held-out evaluation before is kept where it completed, GEPA continues from its saved state and
    the search's record from its summary. Runs of optimisations whose process died are marked
    interrupted first."""
    from workbench.runs import optimize_resume
    from workbench.store.run_lock import run_lock

    optimize_resume.mark_abandoned(store)
    run = optimize_resume.resumable(store, resume) if resume else None
    if run is not None:
        opts = OptimizeOptions(**optimize_resume.options_of(run))
    assert opts is not None
    pid = run["id"] if run is not None else new_pipeline_id()
    with run_lock(store.path, pid):  # others can tell a live optimisation from one whose process died
        return await _optimize(opts, store, pid, run, log, on_start)


async def _optimize(opts: OptimizeOptions, store: Store, pid: str, run: dict[str, Any] | None,
                    log: Callable[[str], None] | None, on_start: Callable[[str], None] | None) -> OptimizeOutcome:
    import gepa

    from workbench.runs import optimize_resume

    opts.validate()
    ref = discovery.resolve(opts.env)
    env = discovery.load(opts.env, opts.env_args)
    if not hasattr(env.harness, "system_prompt"):
        raise ConfigError(f"the harness of {env.name!r} ({env.harness.describe()}) has no system prompt to optimise")
    seed_prompt = env.harness.system_prompt or ""
    train, held = split(len(list(env.tasks)), opts)
    base = EvalOptions(env=opts.env, env_args=opts.env_args, model=opts.model, base_url=opts.base_url,
                       concurrency=opts.concurrency)
    endpoint = base.resolve()  # once: every run of the search uses it
    base_url, model = endpoint.base_url, endpoint.model
    price = endpoint.price or match_price(model, store.prices())
    reflect = resolve_endpoint(opts.reflection_model, opts.reflection_base_url,
                               model_field="OptimizeOptions.reflection_model",
                               url_field="OptimizeOptions.reflection_base_url")
    r_url, r_model = reflect.base_url, reflect.model
    r_price = reflect.price or match_price(r_model, store.prices())
    per_rollout, tokens = estimate_rollout_usd(env, price)
    first = len(train) + 2 * len(held) * opts.rollouts_per_task
    if opts.budget_usd is not None:
        if price is None:
            raise ConfigError(f"--budget needs a price for {model}: register it with `workbench models add ... "
                              "--input-price P --output-price P` or `workbench prices set`")
        if opts.budget_usd < per_rollout * first:
            raise ConfigError(
                f"--budget ${opts.budget_usd:g} is below one evaluation: the seed prompt on the {len(train)} training "
                f"tasks and the {len(held)} held-out tasks before and after is {first} rollouts of up to ~{tokens} "
                f"tokens at ${price.input_usd_per_mtok:g}/${price.output_usd_per_mtok:g} per Mtok, about "
                f"${per_rollout * first:.4f}; raise --budget or use fewer tasks (-n, --heldout)")
    max_evals = opts.max_evals if opts.max_evals is not None else 10 * len(train)
    if max_evals < len(train):
        raise ConfigError(f"--max-evals {max_evals} is below one evaluation of the training split ({len(train)} "
                          "tasks, one rollout each): raise it or use fewer tasks with -n")

    pipeline = {"id": pid, "kind": KIND, "stage": KIND}
    state = SearchState()
    record: dict[str, Any] = {
        "pipeline_id": pid, "env": env.name, "env_version": env.version, "model": model,
        "reflection_model": r_model, "seed_prompt": seed_prompt, "train_tasks": len(train),
        "heldout_tasks": len(held), "max_evals": max_evals, "budget_usd": opts.budget_usd, "status": "running"}
    if run is None:
        options = {k: getattr(opts, k) for k in optimize_resume.OPTION_FIELDS}
        store.create_run(pid, kind=KIND, env_name=env.name, env_version=env.version, env_source=env.source,
                         env_args=opts.env_args, model=model, base_url=base_url, harness=env.harness.describe(),
                         runtime=getattr(env.runtime, "kind", ""), n_tasks=len(train), rollouts_per_task=1,
                         concurrency=opts.concurrency, sampling=dataclasses.asdict(env.sampling),
                         config={"env": opts.env, "env_args": opts.env_args, "model": model, "base_url": base_url,
                                 "reflection_model": r_model, "reflection_base_url": r_url, "pipeline": pipeline,
                                 "max_evals": max_evals, "budget_usd": opts.budget_usd, "heldout": held,
                                 "train": train, "options": options})
    else:
        optimize_resume.restore(state, run["summary"])
        record.update({k: v for k, v in run["summary"].items() if k in ("heldout_before", "best_prompt")})
        store.update_run(pid, status="running", error="", finished_at=None)
    if on_start:
        on_start(pid)

    def publish(**extra: Any) -> None:
        record.update(extra)
        record.update(candidates=[c.as_dict() for c in state.candidates], evals=state.evals,
                      cost_usd=round(state.spent_usd, 6), reflection_calls=state.reflection_calls,
                      reflection_cost_usd=round(state.reflection_usd, 6))
        store.update_run(pid, summary=record)

    def record_reflection(prompt_tokens: int, completion_tokens: int, usd: float) -> None:
        add_cost_event(store.conn, pid, "tokens", provider=reflect.provider, model=r_model,
                       quantity=prompt_tokens + completion_tokens, unit="tokens", usd=usd)

    status, error = "failed", ""
    try:
        heldout = dataclasses.replace(base, task_indices=held, rollouts_per_task=opts.rollouts_per_task,
                                      comparison_id=pid)
        before = await _heldout(store, pid, "heldout-before", dataclasses.replace(
            heldout, system_prompt=seed_prompt or None, pipeline={**pipeline, "stage": "heldout-before"}))
        state.spent_usd += float(before.summary.get("cost_usd") or 0.0)
        publish(heldout_before={"run_id": before.run_id, "mean_reward": before.summary.get("mean_reward")})
        if log:
            log(f"held-out before: {before.summary.get('mean_reward', 0):.3f} (run {before.run_id})")
        per_heldout = float(before.summary.get("cost_usd") or 0.0)

        bridge = Bridge(asyncio.get_running_loop())
        adapter = RunAdapter(bridge, store, dataclasses.replace(base, pipeline=pipeline), state, on_update=publish)
        reflection = ReflectionModel(bridge, state, base_url=r_url, model=r_model, api_key=reflect.api_key,
                                     provider=reflect.provider, price=r_price, record=record_reflection)
        stopper = BudgetStopper(state, opts.budget_usd, per_heldout, bridge)
        task_adapter: GEPAAdapter[int, Any, Any] = adapter  # a data instance is a task index

        def search() -> GEPAResult[Any, Any]:
            return gepa.optimize(
                seed_candidate={COMPONENT: seed_prompt}, trainset=train, valset=train, adapter=task_adapter,
                reflection_lm=reflection, candidate_selection_strategy="pareto", reflection_minibatch_size=opts.minibatch,
                max_metric_calls=max_evals, stop_callbacks=[stopper], logger=ProgressLog(log), seed=opts.seed,
                raise_on_exception=True, display_progress_bar=False,
                run_dir=str(optimize_resume.gepa_dir(store, pid)))

        result: GEPAResult[Any, Any] | None
        try:
            result = await asyncio.to_thread(search)
        except (asyncio.CancelledError, KeyboardInterrupt):
            bridge.stop.set()
            raise
        except SearchStopped:
            result = None
        best_prompt = seed_prompt
        if result is not None:
            for i, text in enumerate(result.candidates):
                cand = state.candidate(text[COMPONENT])
                cand.score = float(result.val_aggregate_scores[i])
                parents = [p for p in result.parents[i] if p is not None]
                cand.parent = (state.candidate(result.candidates[parents[0]][COMPONENT]).index if parents else None)
            best = result.best_candidate  # a dict, as the seed candidate is one
            best_prompt = best[COMPONENT] if isinstance(best, dict) else best
        publish(best_prompt=best_prompt, stopped_by=stopper.reason or "max_evals")
        if best_prompt == seed_prompt:
            after = before
        else:
            after = await _heldout(store, pid, "heldout-after", dataclasses.replace(
                heldout, system_prompt=best_prompt or None, pipeline={**pipeline, "stage": "heldout-after"}))
            state.spent_usd += float(after.summary.get("cost_usd") or 0.0)
        comparison = _comparison(store, before.run_id, after.run_id)
        publish(heldout_after={"run_id": after.run_id, "mean_reward": after.summary.get("mean_reward")},
                comparison=comparison)
        if opts.apply and best_prompt != seed_prompt:
            path = overrides.save(ref.name, overrides.Override(best_prompt, origin=f"optimize {pid}",
                                                               base_version=env.version))
            publish(applied=str(path))
        status = "completed"
        optimize_resume.forget_search(store, pid)  # GEPA's saved state: only a resume needs it
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    except BaseException as e:
        error = str(e) or type(e).__name__
        raise
    finally:
        publish(status=status, **({"error": error} if error else {}))
        store.update_run(pid, status=status, error=error, finished_at=time.time())
    return OptimizeOutcome(pid, record)


async def _heldout(store: Store, pid: str, stage: str, opts: EvalOptions) -> Any:
    """A held-out evaluation of the optimisation: run, or where a resumed optimisation has one of the
    same prompt already, kept (completed) or finished (``eval --resume``)."""
    from workbench.runs import optimize_resume
    from workbench.runs.evaluate import EvalOutcome

    done = optimize_resume.stage_run(store, pid, stage)
    if done is not None and done["config"].get("system_prompt") == opts.system_prompt:
        if done["status"] == "completed":
            return EvalOutcome(done["id"], done["summary"], None, 0.0)  # type: ignore[arg-type]
        opts = dataclasses.replace(opts, resume=done["id"])
    outcome = await evaluate(opts, store)
    if outcome.interrupted:  # Ctrl-C or SIGTERM: the optimisation stops here, resumable
        raise asyncio.CancelledError
    return outcome


def _comparison(store: Store, before: str, after: str) -> dict[str, Any]:
    """Held-out before against after: each one's mean with its CI, and the paired difference."""
    from workbench.analysis.compare import compare_runs, load_run, load_runs

    if before == after:  # the seed prompt stays: one run, nothing to pair it with
        stats = load_run(store.conn, before, 1.0)
        one = {**stats.as_dict(set(stats.task_means), 1.0), "baseline": True}
        return {"before": one, "after": one, "delta": 0.0, "ci95": [0.0, 0.0], "significant": False,
                "seed_kept": True}
    cmp = compare_runs(load_runs(store.conn, [before, after]))
    b, a = cmp["models"]
    return {"before": b, "after": a, "delta": a.get("delta"), "ci95": a.get("ci95"), "significant": a.get("significant")}


__all__ = ["KIND", "OptimizeOptions", "OptimizeOutcome", "optimize", "split"]
