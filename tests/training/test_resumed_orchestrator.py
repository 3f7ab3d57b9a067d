"""A resumed run's orchestrator samples nothing until its restarted trainer says which checkpoint it resumes
from. Before that, the policy is unknown (a group would come from the base model and be dropped as stale)
and the records that arrive are a lost attempt's last words (a step it took after the checkpoint)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from workbench.errors import WorkbenchError
from workbench.store import Store
from workbench.store.train_records import resume_point
from workbench.training.loop import Orchestrator
from workbench.training.roles import RESUMED_FROM
from workbench.training.run_config import resolve


async def _settle() -> None:
    for _ in range(20):  # the gate wakes only when a poll sets its event: a few loop turns are enough
        await asyncio.sleep(0)


def _store(tmp_path: Path, steps: int) -> Store:
    store = Store(tmp_path / "wb.db")
    store.create_run("lost", kind="train", env_name="arithmetic", created_at=0.0)
    for step in range(1, steps + 1):
        store.record_train("lost", step, "step", {}, f"step-{step}")
    return store


def _orchestrator(store: Store) -> Orchestrator:
    cfg = resolve(None, {"loop.groups_per_step": 2, "loop.async_level": 1, "loop.max_steps": 40}, "arithmetic")
    orch = Orchestrator(cfg, store, "lost", env=None)  # type: ignore[arg-type]
    orch.group0, orch.seen_id, orch.awaiting_trainer = resume_point(store.conn, "lost")
    return orch


def test_the_gate_stays_shut_until_the_trainer_says_where_it_resumed(tmp_path: Path) -> None:
    store = _store(tmp_path, 10)
    orch = _orchestrator(store)
    assert orch.awaiting_trainer and orch.seen_id > 0

    async def scenario() -> None:
        g0 = orch.group0
        first = asyncio.create_task(orch.gate(g0))
        await _settle()
        assert not first.done(), "a group started before the trainer said which policy it resumes from"
        store.record_train("lost", 11, "step", {}, "step-11")  # the lost attempt's last step, copied late
        orch.poll()
        await _settle()
        assert not first.done() and orch.step == 0, "a lost attempt's step opened the gate"
        store.record_train("lost", 10, "event", {}, f"{RESUMED_FROM} 10")
        orch.poll()
        await _settle()
        assert first.done() and (orch.step, orch.step0) == (10, 10)
        # async_level 1: the groups of the next two batches start; the one after waits for step 11
        opened = [asyncio.create_task(orch.gate(g)) for g in range(g0 + 1, g0 + 4)]
        later = asyncio.create_task(orch.gate(g0 + 4))
        await _settle()
        assert all(t.done() for t in opened) and not later.done()
        store.record_train("lost", 11, "step", {}, "step-11")
        orch.poll()
        await _settle()
        assert later.done()

    asyncio.run(scenario())
    store.close()


def test_groups_the_trainer_takes_first_count_before_the_orchestrators_own(tmp_path: Path) -> None:
    """Two groups sampled before the resume (a lost attempt's, past the checkpoint's cursor) make step 11: the
    orchestrator's first two groups are the batch of step 12, the next two wait for step 11."""
    store = _store(tmp_path, 10)
    orch = _orchestrator(store)
    store.record_train("lost", 10, "event", {"groups_ahead": 2.0}, f"{RESUMED_FROM} 10")
    orch.poll()

    async def scenario() -> None:
        g0 = orch.group0
        opened = [asyncio.create_task(orch.gate(g)) for g in (g0, g0 + 1)]
        waiting = [asyncio.create_task(orch.gate(g)) for g in (g0 + 2, g0 + 3)]
        await _settle()
        assert all(t.done() for t in opened) and not any(t.done() for t in waiting)
        store.record_train("lost", 11, "step", {}, "step-11")
        orch.poll()
        await _settle()
        assert all(t.done() for t in waiting)

    asyncio.run(scenario())
    store.close()


def test_a_run_that_never_stepped_resumes_without_waiting(tmp_path: Path) -> None:
    store = _store(tmp_path, 0)
    orch = _orchestrator(store)
    assert not orch.awaiting_trainer

    async def scenario() -> None:
        gate = asyncio.create_task(orch.gate(orch.group0))
        await _settle()
        assert gate.done()

    asyncio.run(scenario())
    store.close()


def test_the_restarted_trainers_failure_before_it_resumes_fails_the_run(tmp_path: Path) -> None:
    store = _store(tmp_path, 4)
    orch = _orchestrator(store)
    store.record_train("lost", 0, "event", {}, "trainer failed: no GPU on this node")
    with pytest.raises(WorkbenchError, match="no GPU on this node"):
        orch.poll()
    store.close()
