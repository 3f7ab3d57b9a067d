"""The batch hand-off between an orchestrator and a trainer that does not share its store: real
stores, real directory logs, and the key-value log over a plain dict (the interface a
``modal.Dict`` gives it); the trainer's side is the feed the training loop reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.handoff import HandoffBridge, LogFeed, decode_rollout, encode_rollout, open_handoff
from workbench_cloud.stream import DirLog, KeyValueLog
from workbench_local.training.feed import StoreFeed

from workbench.authoring.rubric import Scores
from workbench.records.rollout import Usage
from workbench.records.task import Task
from workbench.records.trace import Trace
from workbench.store import RolloutRecord, Store
from workbench.training.algorithms import Branch, TrainRollout


def _record(run: str, task_index: int, sample: int, reward: float = 1.0) -> RolloutRecord:
    trace = Trace()
    trace.record([{"role": "user", "content": f"q{task_index}"}], {"role": "assistant", "content": "a"},
                 prompt_ids=[1, 2, 3], completion_ids=[10 + sample, 11], completion_logprobs=[-0.5, -0.25],
                 policy_version=task_index)
    return RolloutRecord(
        id=f"{run}.{task_index}.{sample}", run_id=run, env_name="e", model="m", task=Task(prompt="q", answer="a"),
        task_index=task_index, sample_index=sample, status="ok", error_kind=None, reward=reward, usage=Usage(),
        duration_s=0.1, turns=1, completion="a", messages=[], state={}, scores=Scores(total=reward), calls=[],
        errors=[], trace=trace)


def _write(store: Store, run: str, groups: range, size: int = 2) -> None:
    w = store.writer()
    w.submit([_record(run, g, s, float(s)) for g in groups for s in range(size)])
    w.close()


def test_a_rollout_survives_the_wire_form_exactly() -> None:
    r = TrainRollout("r.1", "run:1", 0.75, [Branch([1, 2, 70000], [0.0, -0.5, -1.25], [0, 1, 1], 3, [0.0, -0.4, -1.0]),
                                            Branch([5], [0.0], [0], None)], status="ok", gold=True)
    ev = encode_rollout(r, pk=42)
    assert ev["pk"] == 42 and isinstance(ev["branches"][0]["ids"], str)  # compact: base64 arrays
    back = decode_rollout({**ev, "seq": 9})
    assert back.id == "r.1" and back.group_id == "run:1" and back.reward == 0.75 and back.gold and back.pk == 9
    assert back.branches[0].token_ids == [1, 2, 70000] and back.branches[0].mask == [0, 1, 1]
    assert back.branches[0].logprobs == [0.0, -0.5, -1.25] and back.branches[0].policy_version == 3
    assert back.branches[0].teacher_logprobs == pytest.approx([0.0, -0.4, -1.0])
    assert back.branches[1].policy_version is None and back.branches[1].teacher_logprobs is None


@pytest.mark.parametrize("kind", ["dir", "kv"])
def test_rollouts_and_records_cross_exactly_once(tmp_path: Path, kind: str) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    shared: dict[str, Any] = {}
    logs = open_handoff({"kind": "dir", "path": str(tmp_path / "handoff")}) if kind == "dir" else \
        (KeyValueLog(shared, "b:"), KeyValueLog(shared, "r:"))
    _write(store, "run1", range(2))
    bridge = HandoffBridge(store.path, "run1", *logs, heartbeat_s=3600)
    bridge.pump()
    feed = LogFeed(*logs)
    got, cursor = feed.read(0)
    assert [r.id for r in got] == ["run1.0.0", "run1.0.1", "run1.1.0", "run1.1.1"] and cursor == 4
    assert got[0].branches[0].token_ids == [1, 2, 3, 10, 11] and got[2].policy_version == 1
    store_view, _ = StoreFeed(store, "run1").read(0)
    assert [(r.id, r.reward, r.branches) for r in store_view] == [(r.id, r.reward, r.branches) for r in got]

    # The trainer's records reach the orchestrator's store once, even through a restarted bridge.
    feed.record(1, "step", {"loss": 0.5, "last_pk": float(cursor)}, "step-1")
    feed.record(1, "event", {}, "checkpoint saved at step 1")
    bridge.pump()
    bridge.stop()
    again = HandoffBridge(store.path, "run1", *logs, heartbeat_s=3600)
    again.pump()
    assert [(r["kind"], r["message"]) for r in store.train_records("run1")] == \
        [("step", "step-1"), ("event", "checkpoint saved at step 1")]
    assert feed.records("step")[0]["metrics"]["last_pk"] == 4.0  # what a resumed trainer starts from

    # A restarted bridge continues where the log ends: new rollouts only, nothing shipped twice.
    _write(store, "run1", range(2, 3))
    again.pump()
    more, cursor2 = feed.read(cursor)
    assert [r.id for r in more] == ["run1.2.0", "run1.2.1"]
    assert [r.id for r in LogFeed(*logs).read(0)[0]].count("run1.0.0") == 1
    # A duplicate delivery (the same rollout appended again) is skipped by the feed.
    logs[0].append([encode_rollout(more[0], 5)])
    assert feed.read(cursor2)[0] == []
    again.stop()
    store.close()


def test_the_bridge_beats_while_idle_and_the_feed_notices_silence(tmp_path: Path) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    batches, records = DirLog(tmp_path / "b"), DirLog(tmp_path / "r")
    bridge = HandoffBridge(store.path, "run1", batches, records, heartbeat_s=0.0)
    bridge.pump()
    assert [e["kind"] for e in batches.read(0)] == ["heartbeat"]
    feed = LogFeed(batches, records, orphan_after_s=0.2)
    assert feed.read(0) == ([], 1) and feed.gone() is None
    import time

    time.sleep(0.3)
    assert "no word from the orchestrator" in (feed.gone() or "")
    bridge.pump()  # a heartbeat is news
    feed.read(1)
    assert feed.gone() is None
    bridge.stop()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert f"pid {dead.pid}) is gone" in (LogFeed(batches, records, parent_pid=dead.pid).gone() or "")
    store.close()


def test_the_trainer_hears_which_evals_are_recorded(tmp_path: Path) -> None:
    """A trainer away from the store keeps an eval step's adapter loaded until that eval is recorded:
    the bridge says so in the batch log, once per bridge, and the feed answers ``records("eval")``."""
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    batches, records = DirLog(tmp_path / "b"), DirLog(tmp_path / "r")
    bridge = HandoffBridge(store.path, "run1", batches, records, heartbeat_s=3600)
    feed = LogFeed(batches, records)
    store.record_train("run1", 0, "eval", {"reward_mean": 0.1}, "run1-eval0")
    _write(store, "run1", range(1))
    bridge.pump()
    got, cursor = feed.read(0)
    assert len(got) == 2 and [r["step"] for r in feed.records("eval")] == [0]
    store.record_train("run1", 10, "eval", {"reward_mean": 0.3}, "run1-eval10")
    bridge.pump()
    bridge.pump()  # said once
    assert [e["kind"] for e in batches.read(cursor)] == ["evaluated"]
    assert feed.read(cursor)[0] == [] and [r["step"] for r in feed.records("eval")] == [0, 10]
    bridge.stop()
    again = HandoffBridge(store.path, "run1", batches, records, heartbeat_s=3600)
    assert again.shipped_pk == bridge.shipped_pk  # an eval marker keeps the store position
    again.pump()  # a resumed trainer reads from its checkpoint's position: it hears them all again
    fresh = LogFeed(batches, records)
    fresh.read(batches.head() - 2)
    assert [r["step"] for r in fresh.records("eval")] == [0, 10]
    again.stop()
    store.close()


def test_open_handoff_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown hand-off kind"):
        open_handoff({"kind": "s3"})
