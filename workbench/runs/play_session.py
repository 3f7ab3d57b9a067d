"""``workbench play`` and the app's play mode: one rollout of an environment in which a person is the
policy (:class:`~workbench.authoring.human.Human`). The environment's harness, tools, sandbox and rubric run
through the same engine and store writer as ``eval``; no model endpoint is reached. The rollout is stored
as the one rollout of a ``play`` run, with ``source = "human"`` and the person's name."""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import asdict, dataclass
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.human import Human
from workbench.errors import TASK_OUT_OF_RANGE, OptionError
from workbench.records.task import Task
from workbench.rollouts.client import ChatClient
from workbench.rollouts.engine import RolloutEngine
from workbench.rollouts.human import HumanPolicy, PlayStopped
from workbench.runs.evaluate import close_sandboxes, new_run_id, open_sandboxes
from workbench.store import Store
from workbench.store.run_lookups import first_rollout

#: A person takes their time: the rollout itself has no limit (tools and sandboxes keep theirs).
_NO_ROLLOUT_LIMIT_S = 30 * 24 * 3600.0


@dataclass(slots=True)
class PlayResult:
    run_id: str
    rollout_id: str
    status: str
    reward: float | None
    rewards: dict[str, float]
    metrics: dict[str, float]
    errors: list[dict[str, Any]]


def person_name() -> str:
    """Who is playing: the ``user_name`` setting (``WORKBENCH_USER_NAME``), else the login name."""
    import getpass

    from workbench.config.settings import load_settings

    try:
        name = load_settings().user_name
    except Exception:  # an unreadable settings file is reported where settings are edited, not here
        name = ""
    if name:
        return name
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def _user_sim(harness: Any) -> Any:
    """The simulated user a (human-wrapped) harness holds, if any."""
    from workbench.authoring.harness import UserSim

    inner = getattr(harness, "harness", harness)
    return inner if isinstance(inner, UserSim) else None


async def play(env_spec: str, task_index: int, store: Store, policy: HumanPolicy,
               env_args: dict[str, Any] | None = None, base_url: str | None = None,
               model: str | None = None) -> PlayResult:
    """Run task ``task_index`` of ``env_spec`` with ``policy`` writing the assistant's turns; the stored result.
    When the policy raises :class:`PlayStopped` (the person stopped, their input ended) nothing is stored
    and it propagates. A simulated user (``wb.UserSim``) still needs a model: ``base_url``/``model`` (else the
    embedded model, started on demand)."""
    env = discovery.load(env_spec, env_args or {})
    if task_index < 0:
        raise OptionError("play.task", task_index, "0 or more")
    head = list(itertools.islice(env.tasks, task_index + 1))  # no more than the task played
    if not 0 <= task_index < len(head):
        n = len(head)
        raise OptionError("play.task", task_index, f"from 0 to {n - 1}", TASK_OUT_OF_RANGE, env=env.name, n=n,
                          last=n - 1)
    task = head[task_index]
    assert isinstance(task, Task)
    if not isinstance(env.harness, Human):
        env.harness = Human(env.harness)
    run_id = new_run_id()
    name = person_name()
    store.register_env(env.name, env.version, env.source, env.description)
    sandboxes = await open_sandboxes(env, [task], run_id, 1, 1)
    store.create_run(run_id, kind="play", env_name=env.name, env_version=env.version, env_source=env.source,
                     env_args=env_args or {}, model=f"human:{name}", base_url="", harness=env.harness.describe(),
                     runtime=getattr(env.runtime, "spec", getattr(env.runtime, "kind", "")), n_tasks=1,
                     rollouts_per_task=1, concurrency=1, sampling=asdict(env.sampling),
                     config={"env": env_spec, "env_args": env_args or {}, "task_index": task_index, "human": name})
    writer = store.writer()
    user_sim = _user_sim(env.harness)
    if user_sim is not None and not user_sim.user_base_url:
        from workbench.runs.endpoint import resolve_endpoint

        sim = resolve_endpoint(model, base_url)  # a registered name gives its endpoint, key and API too
        user_sim.user_base_url, user_sim.user_model = sim.base_url, user_sim.user_model or sim.model
        # the simulated user's client; the person answers every turn
        client = ChatClient(sim.api_key, provider=sim.provider)
    else:
        client = ChatClient(None)  # never called: the person answers every turn
    failure: BaseException | None = None

    def prepare(rollout: Any) -> None:
        rollout.policy = policy

    engine = RolloutEngine(env=env, client=client, writer=writer, run_id=run_id, model=f"human:{name}",
                           base_url="", concurrency=1, timeout_s=_NO_ROLLOUT_LIMIT_S, sandboxes=sandboxes,
                           prepare=prepare)
    try:
        await engine.run_groups([(task_index, task)])
    except BaseException as e:
        failure = e
    finally:
        try:
            if sandboxes is not None:
                await close_sandboxes(sandboxes, store, run_id)
        finally:
            await asyncio.to_thread(writer.close)
            await client.close()
    from workbench.store.queries import get_rollout

    stored = first_rollout(store.conn, run_id)
    if stored is None:
        store.delete_run(run_id)
        raise failure or PlayStopped("the rollout ended before it could be stored")
    if failure is not None:
        raise failure
    store.update_run(run_id, status="completed", finished_at=time.time())
    r = get_rollout(store.conn, stored)
    from workbench.analysis.report import run_summary

    store.update_run(run_id, summary={**run_summary(store, run_id), "unpriced": True})
    return PlayResult(run_id, r["id"], r["status"], r["reward"], r["rewards"], r["metrics"], r["errors"])
