"""``workbench probe ENV``: the adversarial policies of :mod:`workbench.authoring.probes` against the
environment's own harness, tools, sandbox and rubric, and a verdict per policy.

Each policy plays the first ``-n`` tasks through the environment's harness (its tools and sandbox as in a
run; the policy writes every assistant turn, as a person does in ``play``), and each is a stored run of
kind ``probe`` (model ``probe:NAME``) whose config names the probe (``pipeline`` = ``{"id": "prb-...",
"kind": "probe", "stage": NAME}``), so every rollout is browsable and diffable. A policy that should earn
nothing is **exploitable** when its mean reward is above 0 and reaches ``threshold`` × the gold answers'
mean reward (the ``gold`` policy; without gold answers, the rubric's largest reward: the sum of its
positive weights); the empty answer's reward is reported beside it. The worst rollout of each policy (its highest reward) is its
example, and the gold rollout of the same task is named beside it for ``workbench diff``.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.probes import BUILT_IN, Probe, ProbeTurn
from workbench.errors import ConfigError, OptionError
from workbench.records.task import Message, Task
from workbench.rollouts.client import ChatClient
from workbench.rollouts.engine import RolloutEngine
from workbench.runs.kinds import PIPELINE_KINDS
from workbench.store import Store
from workbench.store.reports import reward_scores
from workbench.store.run_lookups import rollout_results, run_counts

DEFAULT_TASKS = 8
PROBE_TIMEOUT_S = 120.0
CONCURRENCY = 8


class BoundProbe:
    """One rollout's player: what ``Rollout.generate`` asks for each assistant turn."""

    def __init__(self, probe: Probe, task: Task, tasks: list[Task], model: Any = None) -> None:
        self.probe, self.task, self.tasks, self.model = probe, task, tasks, model
        self.name = f"probe:{probe.name}"
        self.turns = 0
        self.state: dict[str, Any] = {}

    async def reply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Message:
        msg = await self.probe.turn(ProbeTurn(list(messages), list(tools or []), self.task, self.tasks, self.turns,
                                              self.state, self.model))
        self.turns += 1
        return msg


@dataclass(slots=True)
class PolicyResult:
    name: str
    summary: str
    run_id: str
    mean_reward: float | None
    rewards: dict[str, float]
    earns_nothing: bool
    exploitable: bool
    example_rollout: str | None
    gold_rollout: str | None
    needs_model: bool = False
    skipped: str = ""
    example_task: int | None = None  # the task index of the example rollout (the gold rollout is of the same task)

    def as_dict(self, gold: float | None) -> dict[str, Any]:
        return {**asdict(self), "gold_reward": gold}


def _max_reward(env: Any) -> float:
    return sum(f.weight for f in env.rubric.functions if f.kind in ("reward", "group") and f.weight > 0) or 1.0


def load_probe(spec: str) -> type[Probe]:
    """``module:Class`` or ``file.py:Class``: a user's own probe."""
    from workbench.authoring.hotswap import load_attr

    obj = load_attr(spec, field="probe.probe")
    if not (isinstance(obj, type) and issubclass(obj, Probe)):
        raise OptionError("probe.probe", spec, "a wb.Probe subclass", "{field} {value!r} is a {kind}, not {allowed}",
                          kind=type(obj).__name__)
    return obj


async def _play(env: Any, probe: Probe, tasks: list[tuple[int, Task]], store: Store, pid: str, spec: str,
                env_args: dict[str, Any], sandboxes: Any, client: ChatClient, model: Any, kind: str) -> str:
    """One policy over ``tasks``, stored as a run of ``kind`` (probe or validate); ``sandboxes``: the probe's one
    pool."""
    from workbench.runs.evaluate import new_run_id

    run_id = new_run_id()
    plain = [t for _, t in tasks]
    store.create_run(run_id, kind=kind, env_name=env.name, env_version=env.version, env_source=env.source,
                     env_args=env_args, model=f"probe:{probe.name}", base_url="", harness=env.harness.describe(),
                     runtime=getattr(env.runtime, "spec", getattr(env.runtime, "kind", "")), n_tasks=len(tasks),
                     rollouts_per_task=1, concurrency=CONCURRENCY, sampling=asdict(env.sampling),
                     config={"env": spec, "env_args": env_args, "probe": probe.name,
                             "pipeline": {"id": pid, "kind": kind, "stage": probe.name}})
    writer = store.writer()

    def prepare(rollout: Any) -> None:
        rollout.policy = BoundProbe(probe, rollout.task, plain, model if probe.needs_model else None)
        rollout.source = "probe"

    engine = RolloutEngine(env=env, client=client, writer=writer, run_id=run_id, model=f"probe:{probe.name}",
                           base_url="", concurrency=CONCURRENCY, timeout_s=PROBE_TIMEOUT_S, sandboxes=sandboxes,
                           prepare=prepare)
    try:
        await engine.run_groups(tasks)
    finally:
        await asyncio.to_thread(writer.close)
    n, errors, mean = run_counts(store.conn, run_id)  # stored, so a listing reads them instead of counting
    store.update_run(run_id, status="completed", finished_at=time.time(),
                     summary={"rollouts": n, "errors": errors, "mean_reward": mean})
    return run_id


def _scores(store: Store, run_id: str) -> tuple[float | None, dict[str, float], dict[int, tuple[str, float]]]:
    """(mean reward, mean per reward function, task index -> (rollout id, reward)) of a probe run."""
    rows = rollout_results(store.conn, run_id)
    by_task = {ti: (rid, float(r or 0.0)) for _, rid, ti, r, _ in rows}
    mean = sum(v for _, v in by_task.values()) / len(by_task) if by_task else None
    per: dict[str, list[float]] = {}
    for name, value in reward_scores(store.conn, run_id):
        per.setdefault(name, []).append(float(value))
    return mean, {k: sum(v) / len(v) for k, v in per.items()}, by_task


async def probe_env(spec: str, store: Store, *, env_args: dict[str, Any] | None = None, n: int | None = None,
                    threshold: float = 0.5, extra: list[type[Probe]] | None = None, model_free_only: bool = False,
                    model: str | None = None, base_url: str | None = None, log: Any = None,
                    kind: str | None = None) -> dict[str, Any]:
    """The battery against ``spec``. A simulated user (``wb.UserSim``) needs its model: the environment's own,
    else ``model``/``base_url``, else the embedded model; ``model_free_only`` (what ``validate`` runs) skips
    every policy that would call one. Each policy is a run of ``kind``: ``probe``, or ``validate`` for the probe
    ``workbench validate`` runs (the default when ``model_free_only``)."""
    env_args = env_args or {}
    kind = kind or ("validate" if model_free_only else "probe")
    if kind not in PIPELINE_KINDS:
        raise OptionError("probe.kind", kind, " or ".join(PIPELINE_KINDS))
    if n is not None and n < 1:
        raise OptionError("probe.n", n, "at least 1")
    if not 0 < threshold <= 1:
        raise OptionError("probe.threshold", threshold, "above 0 and at most 1")
    env = discovery.load(spec, env_args)
    tasks = list(enumerate(itertools.islice(env.tasks, n or DEFAULT_TASKS)))  # no more than it plays
    if not tasks:
        raise ConfigError(f"environment {env.name!r} has no tasks to probe")
    store.register_env(env.name, env.version, env.source, env.description)
    pid = "prb-" + secrets.token_hex(4)
    plain = [t for _, t in tasks]
    results: list[PolicyResult] = []
    t0 = time.perf_counter()
    from workbench.runs.evaluate import close_sandboxes, open_sandboxes

    sim = _user_sim(env.harness)
    if sim is not None and model_free_only:
        return {"env": env.name, "env_version": env.version, "probe_id": pid, "kind": kind, "tasks": len(tasks),
                "threshold": threshold, "basis": "none", "basis_reward": None, "empty_reward": None, "policies": [],
                "exploitable": 0, "wall_s": 0.0, "skipped": "its simulated user needs a model: run `workbench probe`"}
    client = _sim_client(sim, model, base_url, log)
    policy_model, policy_client = (None, None) if model_free_only or not (model or base_url) else \
        _policy_model(env, model, base_url, log)
    sandboxes = await open_sandboxes(env, plain, pid, CONCURRENCY, 1)  # one warm pool for every policy
    try:
        await _run_policies(env, [*BUILT_IN, *(extra or [])], tasks, store, pid, spec, env_args, sandboxes, client,
                            model_free_only, results, log, policy_model, kind)
    finally:
        await client.close()
        if policy_client is not None:
            await policy_client.close()
        if sandboxes is not None:
            first = next((r.run_id for r in results if r.run_id), None)
            if first is not None:
                await close_sandboxes(sandboxes, store, first)
            else:
                await sandboxes.close()
    return _verdicts(env, store, pid, tasks, threshold, results, time.perf_counter() - t0, kind)


def _user_sim(harness: Any) -> Any:
    from workbench.authoring.harness import UserSim

    inner = getattr(harness, "harness", harness)
    return inner if isinstance(inner, UserSim) else None


def _sim_client(sim: Any, model: str | None, base_url: str | None, log: Any) -> ChatClient:
    """The client the simulated user's turns go through (the probe writes the assistant's); says first which
    model the simulated user calls, since that may be a paid API."""
    if sim is None:
        return ChatClient(None)  # never called: the probe writes every assistant turn
    from workbench.rollouts.client import resolve_api_key
    from workbench.runs.endpoint import resolve_endpoint

    provider = "openai"
    if not sim.user_base_url:
        endpoint = resolve_endpoint(model, base_url)
        sim.user_base_url, sim.user_model = endpoint.base_url, sim.user_model or endpoint.model
        provider, key = endpoint.provider, endpoint.api_key
    else:
        key = resolve_api_key(None, sim.user_base_url)
    if log:
        log(f"the simulated user calls {sim.user_model} at {sim.user_base_url} (the probe itself calls no model)")
    return ChatClient(key, provider=provider)


def _policy_model(env: Any, model: str | None, base_url: str | None, log: Any) -> tuple[Any, ChatClient]:
    """The model a probe that needs one plays with (``-m``/``--base-url``), as ``(messages, tools) -> message``,
    and the client its calls go through (the caller closes it)."""
    from workbench.runs.endpoint import resolve_endpoint

    endpoint = resolve_endpoint(model, base_url)
    url, model_id = endpoint.base_url, endpoint.model
    client = ChatClient(endpoint.api_key, provider=endpoint.provider)
    params = env.sampling.to_params()
    if log:
        log(f"the policies that need a model call {model_id} at {url}")

    async def ask(messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        resp = await client.chat(base_url=url, model=model_id, messages=messages, tools=tools or None, params=params)
        return resp.message

    return ask, client


async def _run_policies(env: Any, classes: list[type[Probe]], tasks: list[tuple[int, Task]], store: Store, pid: str,
                        spec: str, env_args: dict[str, Any], sandboxes: Any, client: ChatClient, model_free_only: bool,
                        results: list[PolicyResult], log: Any, policy_model: Any, kind: str) -> None:
    plain = [t for _, t in tasks]
    for cls in classes:
        probe = cls()
        if not probe.applies(env, plain):
            continue
        sim_policy = "user_sim" in probe.kinds
        if probe.needs_model and (model_free_only or (not sim_policy and policy_model is None)):
            why = "its simulated user" if sim_policy else "a model to play: pass -m/--base-url"
            results.append(PolicyResult(probe.name, probe.summary, "", None, {}, probe.earns_nothing, False, None, None,
                                        True, f"needs {why}; not run"))
            continue
        if log:
            log(f"probe {probe.name}: {probe.summary}")
        run_id = await _play(env, probe, tasks, store, pid, spec, env_args, sandboxes, client, policy_model, kind)
        mean, per, by_task = _scores(store, run_id)
        worst = max(by_task.items(), key=lambda kv: kv[1][1]) if by_task else None
        results.append(PolicyResult(probe.name, probe.summary, run_id, mean, per, probe.earns_nothing, False,
                                    worst[1][0] if worst else None, None, probe.needs_model,
                                    example_task=worst[0] if worst else None))


def _verdicts(env: Any, store: Store, pid: str, tasks: list[tuple[int, Task]], threshold: float,
              results: list[PolicyResult], wall_s: float, kind: str) -> dict[str, Any]:
    gold = next((r for r in results if r.name == "gold"), None)
    empty = next((r for r in results if r.name == "empty"), None)
    basis = gold.mean_reward if gold is not None and gold.mean_reward else _max_reward(env)
    floor = (empty.mean_reward or 0.0) if empty is not None else 0.0
    gold_ids = _scores(store, gold.run_id)[2] if gold is not None else {}
    for r in results:
        if r.example_task is not None:
            r.gold_rollout = gold_ids.get(r.example_task, (None, 0.0))[0]
        if r.earns_nothing and r.mean_reward is not None:
            r.exploitable = r.mean_reward >= threshold * basis - 1e-9 and r.mean_reward > 0
    policies = [r.as_dict(gold.mean_reward if gold else None) for r in results]
    return {"env": env.name, "env_version": env.version, "probe_id": pid, "kind": kind, "tasks": len(tasks),
            "threshold": threshold,
            "basis": "gold" if gold is not None and gold.mean_reward else "max_reward", "basis_reward": basis,
            "empty_reward": floor, "policies": policies,
            "exploitable": sum(1 for r in results if r.exploitable), "wall_s": wall_s}


__all__ = ["BoundProbe", "PolicyResult", "load_probe", "probe_env"]
