"""``workbench validate``: load an environment and check its tasks and rubric without a model."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.environment import Environment
from workbench.authoring.rubric import Scores
from workbench.errors import WorkbenchError
from workbench.records.rollout import Rollout, RolloutFailed, Usage
from workbench.records.task import Task


@dataclass(slots=True)
class ValidationReport:
    env: str
    version: str
    tasks_checked: int = 0
    total_tasks: int | None = None
    problems: list[str] = field(default_factory=list)  # errors: the env is broken
    warnings: list[str] = field(default_factory=list)  # suspicious, not fatal
    tokens: dict[str, Any] = field(default_factory=dict)  # the --model check: run id, calls, mismatches
    gold: dict[str, float] = field(default_factory=dict)  # mean score of the gold answer per reward
    empty: dict[str, float] = field(default_factory=dict)  # mean score of an empty completion per reward

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env, "env_version": self.version, "ok": self.ok, "tasks_checked": self.tasks_checked,
                "total_tasks": self.total_tasks, "problems": self.problems, "warnings": self.warnings,
                "gold": self.gold, "empty": self.empty, "tokens": self.tokens}


def _ctx(task: Task, completion: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    msgs = [*messages, {"role": "assistant", "content": completion}]
    return {"prompt": task.prompt, "completion": completion, "messages": msgs, "answer": task.answer,
            "info": task.info, "task": task, "state": {}, "trace": None, "sandbox": None, "usage": Usage(),
            "mcp": None}


async def validate_env(spec: str, env_args: dict[str, Any] | None = None, sample: int = 20) -> ValidationReport:
    env: Environment = discovery.load(spec, env_args)
    rep = ValidationReport(env.name, env.version)
    rubric = env.rubric
    if not rubric.rewards and not rubric.group_rewards:
        rep.problems.append("the rubric has no reward function: training would have nothing to learn from")
    tasks = []
    try:
        for i, t in enumerate(env.tasks):
            if i < sample:
                tasks.append(t)
            else:
                break
    except Exception as e:
        rep.problems.append(f"reading the task set failed: {type(e).__name__}: {e}")
        return rep
    if not tasks:
        rep.problems.append("the task set is empty")
        return rep
    try:
        rep.total_tasks = len(env.tasks)
    except Exception as e:
        rep.problems.append(f"counting the task set failed: {type(e).__name__}: {e}")
    rep.tasks_checked = len(tasks)
    ids = Counter(t.id for t in env.tasks.take(5000))
    dup = [i for i, c in ids.items() if c > 1]
    if dup:
        rep.warnings.append(f"{len(dup)} task ids occur more than once (e.g. {dup[0]}); give tasks distinct ids")
    for t in tasks:
        if (isinstance(t.prompt, str) and not t.prompt.strip()) or (isinstance(t.prompt, list) and not t.prompt):
            rep.problems.append(f"task {t.id} has an empty prompt")
            break
    missing = sum(1 for t in tasks if t.answer is None)
    if missing:
        rep.warnings.append(f"{missing} of {len(tasks)} checked tasks have no gold answer; gold scoring skipped for them")

    gold_scores: list[Scores] = []
    empty_scores: list[Scores] = []
    errors: Counter[str] = Counter()
    known = len(rep.problems)
    pool = await _sandboxes(env, tasks, rep)
    if len(rep.problems) > known:  # no sandbox to score in: scoring would only repeat why
        return rep
    toolsets = await _toolsets(env, pool, rep)
    try:
        for t in tasks:
            msgs = t.messages(getattr(env.harness, "system_prompt", None))
            ctxs = []
            pair = []
            if t.answer is not None:
                ctxs.append(_ctx(t, str(t.answer), msgs))
            ctxs.append(_ctx(t, "", msgs))
            try:
                for c in ctxs:
                    if pool is not None:  # each scoring gets a fresh sandbox seeded from the task, as in a run
                        c["sandbox"] = await pool.acquire(f"validate.{t.id}", t)
                    if toolsets is not None:  # and its own MCP servers (the shared ones are the run's)
                        c["mcp"] = await toolsets.for_rollout(_scoring_rollout(t, c))
                    pair.append(await rubric.score_rollout(c))
                await rubric.score_group(ctxs, pair)
            except WorkbenchError as e:
                rep.problems.append(f"task {t.id}: its sandbox could not be prepared: {e}")
                break
            except RolloutFailed as e:
                rep.problems.append(f"task {t.id}: its MCP servers could not start: {e.message}")
                break
            finally:
                for c in ctxs:
                    if c["mcp"] is not None:
                        await c["mcp"].close()
                    if c["sandbox"] is not None:
                        await c["sandbox"].close()
            if t.answer is not None:
                gold_scores.append(pair[0])
            empty_scores.append(pair[-1])
            for sc in pair:
                for name, msg in sc.errors:
                    errors[f"{name}: {msg}"] += 1
    finally:
        if toolsets is not None:
            await toolsets.close()
        if pool is not None:
            await pool.close()
    for msg, count in errors.most_common(5):
        rep.problems.append(f"reward function raised on {count} scorings: {msg}")

    names = [f.name for f in rubric.functions if f.kind in ("reward", "group")]
    for scores, target in ((gold_scores, rep.gold), (empty_scores, rep.empty)):
        for name in names:
            vals = [v for sc in scores for k, v in sc.rewards.items() if k == name or k.startswith(name + ".")]
            if vals:
                target[name] = sum(vals) / len(vals)
        if scores:
            target["total"] = sum(sc.total for sc in scores) / len(scores)
    for name, v in rep.empty.items():
        if name != "total" and v > 0:
            rep.warnings.append(f"reward {name!r} gives an empty completion {v:.3f} on average: a trivial answer earns it")
    if rep.gold and rep.empty and rep.gold.get("total", 0) <= rep.empty.get("total", 0):
        rep.warnings.append("gold answers score no higher than an empty completion: check the rubric (or the gold answers)")
    for name, v in rep.gold.items():
        if name != "total" and v == 0 and any(f.name == name and f.kind == "reward" for f in rubric.functions):
            rep.warnings.append(f"reward {name!r} gives the gold answer 0: either the gold answer is not a complete "
                                "completion for it or the reward is broken")
    return rep


async def _toolsets(env: Environment, pool: Any, rep: ValidationReport) -> Any:
    """The harness's MCP toolsets, started as a run starts them (None when it has none, or they fail:
    then a problem says why)."""
    specs = getattr(env.harness, "toolsets", None)
    if not specs:
        return None
    from workbench.rollouts.mcp_sessions import RunToolsets

    try:
        return await RunToolsets.for_env(env, pool, concurrency=1, prepare=False)
    except WorkbenchError as e:
        rep.problems.append(f"the MCP toolsets cannot start: {e}")
        return None


def _scoring_rollout(task: Task, ctx: dict[str, Any]) -> Rollout:
    """A rollout that only scores (no model): what an MCP session records its calls on."""
    return Rollout(id=f"validate.{task.id}", task=task, sample_index=0, client=None, base_url="", model="",  # type: ignore[arg-type]
                   params={}, state=ctx["state"], sandbox=ctx["sandbox"])


async def _sandboxes(env: Environment, tasks: list[Task], rep: ValidationReport) -> Any:
    """The environment's sandbox pool when its rubric or tasks need sandboxes (None otherwise, or on failure)."""
    from workbench.authoring.environment import needs_sandbox

    if not needs_sandbox(env) and not any(t.sandbox is not None for t in tasks):
        return None
    from workbench.runs.evaluate import run_runtime

    pool = None
    try:
        pool = await run_runtime(env).pool(run_id="validate", size=2, env_dir=env.folder).start()
        prepare = getattr(pool, "prepare", None)  # a pool of a runtime's own making may have none
        if prepare is not None:
            await prepare(tasks)
        return pool
    except WorkbenchError as e:
        if pool is not None:
            await pool.close()
        rep.problems.append(f"the environment's sandboxes cannot start: {e}")
    except AttributeError:
        rep.problems.append(f"the environment's runtime {env.runtime!r} cannot open sandboxes")
    return None


async def check_token_consistency(rep: ValidationReport, store: Any, spec: str, env_args: dict[str, Any],
                                  model: str | None, base_url: str | None, api_key: str | None, rollouts: int,
                                  tokenizer: str | None) -> None:
    """Run a few rollouts and check that every turn's prompt tokens extend the previous turn's."""
    from workbench.records.trace import Trace
    from workbench.runs.evaluate import EvalOptions, evaluate
    from workbench.store.reports import traced_rollouts

    opts = EvalOptions(env=spec, env_args=env_args, n=rollouts, model=model, base_url=base_url, api_key=api_key,
                       concurrency=min(rollouts, 8), tokens=True, kind="validate")
    out = await evaluate(opts, store)
    rows = traced_rollouts(store.conn, out.run_id)
    rep.tokens = {"run_id": out.run_id, "rollouts": out.summary["rollouts"], "traced": len(rows), "mismatches": 0,
                  "render_mismatches": 0}
    if not rows:
        rep.warnings.append("the endpoint returned no token ids, so multi-turn token consistency was not checked "
                            "(the embedded server and vLLM return them)")
        return
    tok = None
    if tokenizer:
        from workbench.rollouts.render import load_tokenizer

        tok = load_tokenizer(tokenizer)
    for rid, nodes, ids, lps, mask in rows:
        trace = Trace.unpack(nodes, ids, lps, mask)
        for m in trace.mismatches:
            rep.tokens["mismatches"] += 1
            if len(rep.problems) < 5:
                rep.problems.append(
                    f"rollout {rid}: turn {m.call + 1}'s prompt tokens do not extend turn {m.call}'s tokens "
                    f"(first difference at token {m.position}: sampled {m.expected}, re-tokenized {m.got}); "
                    f"see `workbench show {rid} --tokens`")
        if tok is not None:
            from workbench.rollouts.render import check_trace

            for rm in check_trace(trace, tok):
                rep.tokens["render_mismatches"] += 1
                if len(rep.problems) < 5:
                    rep.problems.append(f"rollout {rid}: re-rendering with the chat template differs: {rm.describe()}")
