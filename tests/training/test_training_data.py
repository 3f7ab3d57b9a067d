"""Rollouts written by the store's BatchWriter come back as algorithm input, grouped by task."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.authoring.rubric import Scores
from workbench.records.rollout import Usage
from workbench.records.task import Task
from workbench.records.trace import Trace
from workbench.store import RolloutRecord, Store
from workbench.training.algorithms import Branch, TrainRollout, make_algorithm
from workbench.training.data import complete_groups, groups_trained_on, load_rollouts


def record(run: str, task_index: int, sample: int, reward: float | None, tokens: bool = True) -> RolloutRecord:
    task = Task(prompt=f"q{task_index}", answer="a")
    trace = Trace()
    if tokens:
        trace.record([{"role": "user", "content": f"q{task_index}"}], {"role": "assistant", "content": "a"},
                     prompt_ids=[1, 2, 3], completion_ids=[10 + sample, 11], completion_logprobs=[-0.5, -0.25],
                     policy_version=2)
    return RolloutRecord(
        id=f"{run}.{task_index}.{sample}", run_id=run, env_name="e", model="m", task=task, task_index=task_index,
        sample_index=sample, status="ok" if reward is not None else "error", error_kind=None if reward is not None
        else "timeout", reward=reward, usage=Usage(), duration_s=0.1, turns=1, completion="a", messages=[],
        state={}, scores=Scores(total=reward or 0.0), calls=[], errors=[], trace=trace)


def test_load_rollouts_round_trip_and_poll(tmp_path: Path) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    w = store.writer()
    w.submit([record("run1", 0, 0, 1.0), record("run1", 0, 1, 0.0), record("run1", 1, 0, None)])
    w.flush()
    rollouts, last = load_rollouts(store.conn, "run1")
    assert [r.id for r in rollouts] == ["run1.0.0", "run1.0.1", "run1.1.0"] and last == 3
    first = rollouts[0]
    assert first.group_id == "run1:0" and first.reward == 1.0 and len(first.branches) == 1
    b = first.branches[0]
    assert b.token_ids == [1, 2, 3, 10, 11] and b.mask == [0, 0, 0, 1, 1] and b.policy_version == 2
    assert rollouts[2].status == "error" and not rollouts[2].ok

    w.submit([record("run1", 1, 1, 1.0, tokens=False)])
    w.close()
    more, last2 = load_rollouts(store.conn, "run1", after_pk=last)
    assert [r.id for r in more] == ["run1.1.1"] and last2 == 4 and more[0].branches == []
    assert load_rollouts(store.conn, "run1", after_pk=last2) == ([], last2)
    assert [r.id for r in load_rollouts(store.conn, "run1", task_indices=[1])[0]] == ["run1.1.0", "run1.1.1"]

    groups = complete_groups(rollouts + more, 2)
    out = make_algorithm("grpo", scale_by_std=False).process(groups)
    assert out.stats["groups"] == 2 and out.stats["skipped_errors"] == 1 and out.stats["skipped_no_tokens"] == 1
    assert [s.advantages[-1] for s in out.samples] == [0.5, -0.5]
    store.close()


def _group(version: int | None) -> list[TrainRollout]:
    return [TrainRollout(f"g{version}.{i}", f"g{version}", 1.0, [Branch([1, 2], [0.0, -1.0], [0, 1], version)])
            for i in range(2)]


@pytest.mark.parametrize(("versions", "trained"), [
    ([], 0),
    ([10, 10], 2),  # one fresh batch
    ([9, 10, 10], 3),  # a partial last batch counts: it joins the next groups
    ([7, 7, 10, 10], 2),  # a whole stale batch is dropped without a step
    ([7, 10, 10, 10], 3),  # a stale group beside a fresh one: the batch steps on the fresh one
    ([8, 8, 8, 8], 2),  # fresh at 10, stale once the first batch made it 11
    ([12, 12], 2),  # sampled by a policy past the checkpoint (a lost attempt's): not stale
    ([None, None], 2),  # no version known: fresh
])
def test_groups_trained_on_follows_the_trainer_batch_by_batch(versions: list[int | None], trained: int) -> None:
    assert groups_trained_on([_group(v) for v in versions], 10, 2, 2) == trained
