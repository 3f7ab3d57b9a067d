"""The hand-off's bulk path: rollout arrays in safetensors files next to the logs, control records in
the logs. Real stores, real directory logs, real files; the Modal Volume's commit/reload is played by
two directories and a copy (what a commit and a reload do to the other container's view)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from workbench_cloud import handoff
from workbench_cloud.bulk import BulkDir, HandoffError
from workbench_cloud.handoff import HandoffBridge, LogFeed, decode_rollout, open_handoff, rollout_events
from workbench_cloud.stream import DirLog, KeyValueLog
from workbench_local.training.feed import StoreFeed

from tests.cloud.test_handoff import _write
from workbench.store import Store
from workbench.training.algorithms import Branch, TrainRollout


def _rollouts() -> list[TrainRollout]:
    return [TrainRollout("r.1", "run:1", 0.75, [Branch([1, 2, 70000], [0.0, -0.5, -1.25], [0, 1, 1], 3,
                                                        [0.0, -0.375, -1.0]),
                                                 Branch([5], [0.0], [0], None)], status="ok", gold=True, pk=7),
            TrainRollout("r.2", "run:1", 0.0, [Branch([9, 8], [-0.25, -2.0], [1, 1], 4)], status="error", pk=8)]


def test_a_shipment_crosses_in_one_file_and_comes_back_exactly(tmp_path: Path) -> None:
    bulk = BulkDir(tmp_path / "bulk")
    events = rollout_events(_rollouts(), bulk, first_seq=1)
    assert [p.name for _f, _l, p in bulk.files()] == ["000000000001-000000000002.safetensors"]
    assert all("ids" not in b and "lps" not in b for ev in events for b in ev["branches"])  # control data only
    assert events[0]["file"] == events[1]["file"] and len(events[0]["file"]["sha256"]) == 64
    back = [decode_rollout({**ev, "seq": seq}, bulk) for seq, ev in enumerate(events, 1)]
    for sent, got in zip(_rollouts(), back, strict=True):
        assert (got.id, got.group_id, got.reward, got.status, got.gold) == \
            (sent.id, sent.group_id, sent.reward, sent.status, sent.gold)
        assert got.branches == sent.branches
    assert back[0].pk == 1  # the cursor is the batch log's sequence number


def test_the_bridge_ships_files_and_the_feed_reads_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    batches, records, bulk = open_handoff({"kind": "dir", "path": str(tmp_path / "handoff")})
    assert bulk is not None and bulk.root == tmp_path / "handoff" / "bulk"
    _write(store, "run1", range(2))
    bridge = HandoffBridge(store.path, "run1", batches, records, bulk, heartbeat_s=3600)
    bridge.pump()
    assert len(bulk.files()) == 1 and bulk.size_bytes() > 0
    line = (tmp_path / "handoff" / "batches" / "events.jsonl").read_bytes().splitlines()[0]
    assert orjson.loads(line)["file"]["path"] == "000000000001-000000000004.safetensors"
    got, cursor = LogFeed(batches, records, bulk).read(0)
    want, _ = StoreFeed(store, "run1").read(0)
    assert cursor == 4 and [(r.id, r.reward, r.branches) for r in got] == [(r.id, r.reward, r.branches) for r in want]
    bridge.stop()
    store.close()


class _Volume:
    """Two containers' views of one volume: the writer's directory, the reader's, and what is committed."""

    def __init__(self, root: Path) -> None:
        self.writer, self.committed, self.reader = root / "writer", root / "committed", root / "reader"
        self.reloads = 0

    def commit(self) -> None:
        shutil.rmtree(self.committed, ignore_errors=True)
        shutil.copytree(self.writer, self.committed)

    def reload(self) -> None:
        self.reloads += 1
        shutil.rmtree(self.reader, ignore_errors=True)
        shutil.copytree(self.committed, self.reader)


def test_over_a_key_value_log_the_reader_reloads_until_the_file_is_visible(tmp_path: Path) -> None:
    vol = _Volume(tmp_path)
    writer = BulkDir(vol.writer, commit=vol.commit)
    reader = BulkDir(vol.reader, reload=vol.reload, visible_wait_s=30, reload_interval_s=0.01)
    shared: dict[str, Any] = {}  # the interface a modal.Dict gives
    batches, records = KeyValueLog(shared, "b:"), KeyValueLog(shared, "r:")
    handoff.append_rollouts(batches, writer, _rollouts())
    assert all(len(orjson.dumps(v)) < 1000 for v in shared.values())  # only control records in the Dict
    got, cursor = LogFeed(batches, records, reader).read(0)
    assert [r.id for r in got] == ["r.1", "r.2"] and cursor == 2 and vol.reloads == 1
    assert got[0].branches == _rollouts()[0].branches


def _tamper(bulk: BulkDir, ref: dict[str, Any], how: str, outside: Path) -> dict[str, Any]:
    path = bulk.root / ref["path"]
    if how == "checksum":
        data = bytearray(path.read_bytes())
        data[-1] ^= 0xFF
        path.write_bytes(bytes(data))
    elif how == "size":
        return {**ref, "bytes": ref["bytes"] + 1}
    elif how == "missing":
        path.unlink()
    elif how == "parent":
        shutil.copy(path, outside / "x.safetensors")
        return {**ref, "path": f"../{outside.name}/x.safetensors"}
    elif how == "absolute":
        return {**ref, "path": str(path)}
    elif how == "symlink":
        shutil.copy(path, outside / "x.safetensors")
        (bulk.root / "link.safetensors").symlink_to(outside / "x.safetensors")
        return {**ref, "path": "link.safetensors"}
    elif how == "the directory":
        return {**ref, "path": "."}
    elif how == "no checksum":
        return {"path": ref["path"], "bytes": ref["bytes"]}
    return ref


@pytest.mark.parametrize(("how", "says"), [
    ("checksum", "does not match its sha256"),
    ("size", "its event says"),
    ("missing", "is not in"),
    ("parent", "leaves the bulk directory"),
    ("absolute", "is not a relative path"),
    ("symlink", "leaves the bulk directory"),
    ("the directory", "leaves the bulk directory"),
    ("no checksum", "lacks its byte size or sha256"),
])
def test_a_file_that_cannot_be_trusted_is_refused_in_one_line(tmp_path: Path, how: str, says: str) -> None:
    bulk = BulkDir(tmp_path / "bulk")
    outside = tmp_path / "outside"
    outside.mkdir()
    events = rollout_events(_rollouts(), bulk, first_seq=1)
    ref = _tamper(bulk, events[0]["file"], how, outside)
    with pytest.raises(HandoffError) as e:
        decode_rollout({**events[0], "file": ref, "seq": 1}, bulk)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_resume_reads_from_the_checkpoint_and_consumed_files_go(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Files hold two rollouts (one group); the trainer checkpoints every step. A file goes once the
    checkpoint after the one that covers it is reported; a restarted trainer and bridge continue from
    the right positions; a completed run leaves no file."""
    monkeypatch.setattr(handoff, "FILE_TOKENS", 10)  # rollouts of 5 tokens: two to a shipment
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    logs = open_handoff({"kind": "dir", "path": str(tmp_path / "handoff")})
    bulk = logs[2]
    assert bulk is not None
    bridge = HandoffBridge(store.path, "run1", *logs, heartbeat_s=3600)
    feed = LogFeed(*logs)
    cursor = 0
    for step in (1, 2, 3):
        _write(store, "run1", range(step - 1, step))
        bridge.pump()
        got, cursor = feed.read(cursor)
        assert [r.id for r in got] == [f"run1.{step - 1}.0", f"run1.{step - 1}.1"]
        feed.record(step, "step", {"loss": 0.5, "last_pk": float(cursor)}, f"step-{step}")
        feed.record(step, "event", {}, f"checkpoint saved at step {step}")
        bridge.pump()
    assert [(f, last) for f, last, _p in bulk.files()] == [(5, 6)]  # up to step 2's cursor (4) went

    # The trainer restarts from its checkpoint (step 3, cursor 6); the bridge restarts too.
    bridge.stop()
    _write(store, "run1", range(3, 4))
    again = HandoffBridge(store.path, "run1", *logs, heartbeat_s=3600)
    again.pump()
    fresh = LogFeed(*logs)
    resume_at = int(fresh.records("step")[-1]["metrics"]["last_pk"])
    got, cursor = fresh.read(resume_at)
    assert resume_at == 6 and [r.id for r in got] == ["run1.3.0", "run1.3.1"] and cursor == 8
    assert [(f, last) for f, last, _p in bulk.files()] == [(5, 6), (7, 8)]
    rollout_ids = [e["id"] for e in logs[0].read(0) if e["kind"] == "rollout"]
    assert len(rollout_ids) == 8 == len(set(rollout_ids))  # nothing shipped twice

    # The trainer checkpoints step 4, dies before that checkpoint reaches the volume, and comes back
    # from step 3's: the checkpoints after the one it resumed from are void, so nothing goes yet.
    for resumed_from in (None, 3):
        if resumed_from is not None:
            fresh.record(resumed_from, "event", {}, f"resumed from the checkpoint of step {resumed_from}")
        fresh.record(4, "step", {"loss": 0.5, "last_pk": 8.0}, "step-4")
        fresh.record(4, "event", {}, "checkpoint saved at step 4")
        again.pump()
    assert again.checkpoints == [(4, 8)]  # not two: the first checkpoint of step 4 is void
    assert [(f, last) for f, last, _p in bulk.files()] == [(5, 6), (7, 8)]  # what a resume from step 3 reads

    again.finished = True  # the run completed: no trainer resumes it
    again.stop()
    assert bulk.files() == []
    store.close()


def test_a_bridge_restarted_before_its_events_rewrites_the_same_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("run1", kind="train", env_name="e")
    batches, records, bulk = open_handoff({"kind": "dir", "path": str(tmp_path / "handoff")})
    assert bulk is not None
    _write(store, "run1", range(1))
    (bulk.root / "000000000001-000000000002.safetensors").write_bytes(b"a file whose events never got appended")
    bridge = HandoffBridge(store.path, "run1", batches, records, bulk, heartbeat_s=3600)
    bridge.pump()
    got, _ = LogFeed(batches, records, bulk).read(0)
    assert [r.id for r in got] == ["run1.0.0", "run1.0.1"]
    bridge.stop()
    store.close()


def test_a_feed_without_a_bulk_directory_says_so(tmp_path: Path) -> None:
    bulk = BulkDir(tmp_path / "bulk")
    ev = rollout_events(_rollouts(), bulk, first_seq=1)[0]
    log = DirLog(tmp_path / "b")
    log.append([ev])
    with pytest.raises(HandoffError, match="has no bulk directory"):
        LogFeed(log, DirLog(tmp_path / "r")).read(0)


@pytest.mark.slow
def test_the_bench_script_compares_both_paths_and_leaves_no_file() -> None:
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "scripts" / "bench_handoff.py"), "--rollouts", "5", "--tokens",
                          "64", "--json"], capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    bulk, inline = result["runs"]
    assert (bulk["path"], inline["path"]) == ("bulk", "inline") and result["tokens"] == 320
    assert bulk["files"] == 1 and bulk["files_left"] == 0 and bulk["log_bytes"] < inline["log_bytes"]
