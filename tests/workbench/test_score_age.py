"""How old a stored score is (``workbench.runs.score_age``): a real store with a run of ``adder`` scored
with its old files, the files edited, then a re-score applied with the new ones."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.helpers import ADDER_ENV, write_file
from workbench.authoring import discovery
from workbench.authoring.discovery import EnvRef
from workbench.authoring.rubric import Scores
from workbench.records.rollout import ModelCall, Usage
from workbench.records.task import Task
from workbench.runs.score_age import (
    ScoreAge,
    current_versions,
    rollout_score_age,
    run_score_ages,
    stale_stored,
)
from workbench.store import RolloutRecord, Store

EDITED = ADDER_ENV.replace("return float(bool(nums) and nums[-1] == answer)", "return float(answer in completion)")


def _store(tmp_path: Path, version: str) -> Store:
    store = Store(tmp_path / "workbench.db")
    store.create_run("run-old", kind="eval", env_name="adder", env_version=version, env_source="test", model="m",
                     n_tasks=2, rollouts_per_task=1, status="completed")
    recs = []
    for i in range(2):
        task = Task(prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1), info={"i": i})
        reward = float(i == 0)
        recs.append(RolloutRecord(
            id=f"run-old.{i}.0", run_id="run-old", env_name="adder", model="m", task=task, task_index=i,
            sample_index=0, status="ok", error_kind=None, reward=reward, usage=Usage(10, 2, 0.0), duration_s=0.1,
            turns=1, completion=f"{2 * i + 1}{9 if i else ''}",
            messages=[{"role": "user", "content": task.prompt}, {"role": "assistant", "content": "x"}], state={},
            scores=Scores(rewards={"correct": reward}, metrics={}, total=reward), calls=[ModelCall(0, 1, None, "stop",
                                                                                                  10, 2, 0.01)],
            errors=[], created_at=1.0 + i))
    w = store.writer()
    w.submit(recs)
    w.close()
    return store


def test_a_score_is_stale_once_the_files_change_and_a_rescore_catches_up(tmp_path: Path) -> None:
    path = write_file(tmp_path / "envs" / "adder.py", ADDER_ENV)
    ref = EnvRef("adder", "path", path)
    old = ref.version()
    store = _store(tmp_path, old)
    try:
        now = current_versions([ref])
        assert now == {"adder": old}
        age = rollout_score_age(store.conn, "run-old.0.0", now)
        assert age == ScoreAge("adder", old, old) and not age.stale and age.describe() == ""
        assert stale_stored(store.conn, "adder", old) == (0, 2)

        write_file(path, EDITED)
        now = current_versions([ref])
        new = now["adder"]
        assert new != old
        age = rollout_score_age(store.conn, "run-old.1.0", now)
        assert age is not None and age.stale and not age.rescored_now
        assert f"scored with adder {old}; its files are now {new}: an older rubric's score" in age.describe()
        assert run_score_ages(store.conn, ["run-old", "run-old", "nope"], now) == {"run-old": ScoreAge("adder", old, new)}
        assert stale_stored(store.conn, "adder", new) == (2, 2)

        from workbench.analysis.rescore import rescore

        asyncio.run(rescore(store, discovery.load_ref(ref), apply=True))
        age = rollout_score_age(store.conn, "run-old.1.0", now)
        assert age is not None and age.stale and age.rescored_now and age.rescored_with == new
        assert "(a re-score with them is stored)" in age.describe()
    finally:
        store.close()


@pytest.mark.parametrize(("current", "stale"), [(None, False), ("abc", False), ("def", True)])
def test_stale_only_against_a_known_other_version(current: str | None, stale: bool) -> None:
    assert ScoreAge("adder", "abc", current).stale is stale


def test_an_unknown_rollout_has_no_age(tmp_path: Path) -> None:
    store = Store(tmp_path / "workbench.db")
    try:
        assert rollout_score_age(store.conn, "nope", {}) is None
    finally:
        store.close()
