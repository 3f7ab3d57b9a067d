"""Per-rollout timeouts in the engine (one watchdog for all workers): a rollout past its limit is cut
and recorded as a timeout, even when its harness swallows the cancellation; an outside cancellation
is never mistaken for a timeout; a worker whose rollout timed out runs its next rollout normally."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from tests.helpers import query
from workbench.rollouts.engine import RolloutEngine
from workbench.store import Store


class Scripted(wb.Harness):
    """Acts on the task's prompt: ``sleep``, ``swallow`` (sleep, eat the cancellation, return),
    ``own-timeout`` (its own shorter asyncio.timeout fires), ``nested`` (a short inner timeout that does
    not fire, then sleeps past the rollout's), anything else answers at once."""

    async def run(self, rollout: wb.Rollout) -> None:
        self.start(rollout)
        mode = rollout.task.prompt
        if mode == "sleep":
            await asyncio.sleep(30)
        elif mode == "swallow":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                rollout.state["swallowed"] = True
        elif mode == "own-timeout":
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        elif mode == "nested":
            async with asyncio.timeout(5):
                await asyncio.sleep(0.01)
            await asyncio.sleep(30)
        rollout.messages.append({"role": "assistant", "content": "done"})


def make_env(modes: list[str]) -> wb.Environment:
    rubric = wb.Rubric()

    @rubric.reward
    def finished(completion: str) -> float:
        return float(completion == "done")

    return wb.Environment(name="timeouts", tasks=wb.TaskSet.from_records([{"prompt": m} for m in modes]),
                          harness=Scripted(), rubric=rubric)


async def run(tmp_path: Path, modes: list[str], *, timeout: float, concurrency: int = 1,
              cancel_after: float | None = None) -> tuple[RolloutEngine, list[tuple[Any, ...]], float]:
    store = Store(tmp_path / "db.sqlite")
    store.create_run("t", env_name="timeouts")
    writer = store.writer()
    env = make_env(modes)
    engine = RolloutEngine(env=env, client=None, writer=writer, run_id="t", model="m",  # type: ignore[arg-type]
                           base_url="http://unused/v1", concurrency=concurrency, timeout_s=timeout)
    t0 = time.perf_counter()
    try:
        job = asyncio.ensure_future(engine.run(list(env.tasks)))
        if cancel_after is not None:
            await asyncio.sleep(cancel_after)
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job
        else:
            await job
    finally:
        writer.close()
    wall = time.perf_counter() - t0
    rows = query(tmp_path / "db.sqlite", "SELECT task_index, status, error_kind, reward, duration_s, state "
                                         "FROM rollout ORDER BY task_index")
    store.close()
    return engine, rows, wall


async def test_a_rollout_past_its_limit_is_cut_at_it_and_the_worker_goes_on(tmp_path: Path) -> None:
    _, rows, wall = await run(tmp_path, ["sleep", "quick", "sleep", "quick"], timeout=0.3)
    assert [(i, st, kind) for i, st, kind, *_ in rows] == [
        (0, "error", "timeout"), (1, "ok", None), (2, "error", "timeout"), (3, "ok", None)]
    assert [r[3] for r in rows] == [None, 1.0, None, 1.0]
    for i in (0, 2):  # cut at the limit, not when the harness's 30 s sleep ends (the upper bound: a hang guard)
        assert 0.3 <= rows[i][4] < 3, rows[i]
    assert wall < 20  # a hang guard: far under the 60 s the two sleeps would hold the worker


async def test_a_harness_that_swallows_its_cancellation_still_times_out(tmp_path: Path) -> None:
    _, rows, _ = await run(tmp_path, ["swallow", "quick"], timeout=0.3)
    assert [(st, kind) for _, st, kind, *_ in rows] == [("error", "timeout"), ("ok", None)]
    assert '"swallowed":true' in rows[0][5]
    # the worker's task was left un-cancelled: its next rollout ran and was scored


async def test_a_timeout_the_harness_sets_itself_is_the_rollouts_timeout(tmp_path: Path) -> None:
    _, own, _ = await run(tmp_path / "own", ["own-timeout"], timeout=10)
    assert [(st, kind) for _, st, kind, *_ in own] == [("error", "timeout")]
    assert own[0][4] < 5, "the harness's own 50 ms timeout, not the rollout's 10 s"
    _, nested, _ = await run(tmp_path / "nested", ["nested"], timeout=0.4)
    assert [(st, kind) for _, st, kind, *_ in nested] == [("error", "timeout")]
    assert nested[0][4] >= 0.4  # the inner timeout did not fire: the rollout's did


async def test_an_outside_cancellation_is_not_a_timeout(tmp_path: Path) -> None:
    engine, rows, wall = await run(tmp_path, ["quick", "sleep", "sleep"], timeout=20, concurrency=3,
                                   cancel_after=0.3)
    assert wall < 10  # a hang guard: the cancellation ends it at once, not at the 20 s timeout
    assert engine.counters.failed == 0
    # the finished rollout is kept; the two cut by the cancellation are not written at all (not as timeouts)
    assert [(i, st, kind) for i, st, kind, *_ in rows] == [(0, "ok", None)]
