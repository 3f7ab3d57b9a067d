"""Runs longer than one Modal call (24 h): the hand-over decision, the store snapshot, the re-spawn
decision, the trainer call driven as a process — and, end to end with real local processes, a run
handed over after a checkpoint that a second job continues to the end, streamed to the laptop once.
Nothing here ran on Modal."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.resume import (
    HandoverWatch,
    check_resumable,
    handover_decision,
    respawn_decision,
    restore_store,
    snapshot_store,
)
from workbench_cloud.roles import CallProcess, ModalRoles, handoff_argv

from workbench.errors import ConfigError
from workbench.store import Store
from workbench.training.loop import HANDOVER


def test_handover_waits_for_a_checkpoint_then_goes_regardless() -> None:
    d = dict(step_s=60.0, checkpoint_every=10, shutdown_s=1200.0)
    # Far from the limit: nothing, whatever the checkpoints.
    assert handover_decision(20_000, current_step=50, checkpoint_step=50, **d) is None
    # Within reach of the next checkpoint (1200 + 11 x 60 = 1860 s): only right after one.
    assert handover_decision(1800, current_step=51, checkpoint_step=50, **d) is None
    why = handover_decision(1800, current_step=60, checkpoint_step=60, **d)
    assert why is not None and why.startswith(HANDOVER) and "checkpoint of step 60" in why
    # The shutdown time is all that is left: go now (the steps since the checkpoint are lost).
    assert (handover_decision(1200, current_step=61, checkpoint_step=60, **d) or "").startswith(HANDOVER)
    # Step time unknown yet (fewer than two steps): only the hard limit applies.
    assert handover_decision(1500, step_s=None, checkpoint_every=10, current_step=0, checkpoint_step=0) is None


def test_the_watch_reads_step_times_and_checkpoints_from_the_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "wb.db")
    store.create_run("r", kind="train", env_name="e")
    now = [0.0]
    watch = HandoverWatch(lambda after: store.train_records("r", after_id=after), deadline=2000.0, checkpoint_every=2,
                          shutdown_s=1000.0, clock=lambda: now[0], every_s=0.0)
    store.record_train("r", 1, "step", {}, "step-1")
    assert watch() is None and watch.step_s is None  # 2000 s left, nothing known
    time.sleep(0.02)
    store.record_train("r", 2, "step", {}, "step-2")
    now[0] = 1500.0  # 500 s left: within the hard limit
    assert (watch() or "").startswith(HANDOVER) and watch.step == 2 and 0 < (watch.step_s or 0) < 5
    store.close()
    # With more time left, it waits for the checkpoint of the current step (100 s per step here).
    recs = [{"id": 1, "step": 1, "kind": "step", "message": "step-1", "created_at": 0.0},
            {"id": 2, "step": 2, "kind": "step", "message": "step-2", "created_at": 100.0}]
    slow = HandoverWatch(lambda after: [r for r in recs if r["id"] > after], deadline=2000.0, checkpoint_every=2,
                         shutdown_s=1000.0, clock=lambda: 0.0, every_s=0.0)  # window: 1000 + 3 x 100 s
    assert slow() is None and slow.step == 2 and slow.step_s == 100.0  # 2000 s left: not yet
    slow.clock = lambda: 800.0  # 1200 s left: within the window, but step 2 has no checkpoint
    assert slow() is None
    recs.append({"id": 3, "step": 2, "kind": "event", "message": "checkpoint saved at step 2", "created_at": 101.0})
    assert "checkpoint of step 2" in (slow() or "")
    recs.append({"id": 4, "step": 3, "kind": "step", "message": "step-3", "created_at": 200.0})
    assert slow() is None  # step 3 is past the checkpoint: wait for the next one


def test_respawn_only_after_progress_and_within_the_limit() -> None:
    assert respawn_decision("completed", steps_before=0, steps_after=9, handovers=0, max_handovers=3).action == "done"
    assert respawn_decision("stopped", steps_before=0, steps_after=9, handovers=0, max_handovers=3).action == "done"
    go = respawn_decision("resuming", steps_before=10, steps_after=30, handovers=1, max_handovers=3)
    assert go.action == "respawn" and "step 30" in go.reason
    stuck = respawn_decision("resuming", steps_before=30, steps_after=30, handovers=1, max_handovers=3)
    assert stuck.action == "fail" and "without a new step" in stuck.reason
    assert respawn_decision("resuming", steps_before=1, steps_after=2, handovers=3, max_handovers=3).action == "fail"


def test_a_modal_run_must_checkpoint() -> None:
    check_resumable({"loop": {"checkpoint_every": 10}})
    with pytest.raises(ConfigError, match="loop.checkpoint_every"):
        check_resumable({"loop": {"checkpoint_every": 0}})


def test_a_snapshot_of_a_live_store_is_whole_and_restores(tmp_path: Path) -> None:
    store = Store(tmp_path / "live.db")
    store.create_run("r", kind="train", env_name="e")
    for i in range(50):
        store.record_train("r", i, "step", {"loss": float(i)}, f"step-{i}")
    snap = snapshot_store(store.path, tmp_path / "vol" / "orchestrator" / "remote.db")
    store.record_train("r", 50, "step", {}, "after the snapshot")  # the live store goes on
    assert not (tmp_path / "vol" / "orchestrator" / "remote.db.tmp").exists()
    restore_store(snap, tmp_path / "job" / "remote.db")
    back = Store(tmp_path / "job" / "remote.db")
    assert [r["step"] for r in back.train_records("r")] == list(range(50))
    assert back.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    back.close()
    store.close()
    with pytest.raises(ConfigError, match="no store snapshot"):
        restore_store(tmp_path / "missing.db", tmp_path / "job2" / "remote.db")


class FakeCall:
    """modal.FunctionCall's get/cancel contract: get(timeout=0) raises modal's TimeoutError while running."""

    def __init__(self) -> None:
        self.result: Any = None
        self.raises: Exception | None = None
        self.running = True
        self.cancelled = False
        self.object_id = "fc-1"

    def get(self, timeout: float | None = None) -> Any:
        from modal.exception import TimeoutError as StillRunning

        if self.running:
            raise StillRunning("still running")
        if self.raises:
            raise self.raises
        return self.result

    def cancel(self) -> None:
        self.cancelled = True


def test_a_trainer_call_is_driven_like_a_process() -> None:
    pytest.importorskip("modal")
    import subprocess

    call = FakeCall()
    proc = CallProcess(call)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0)
    proc.terminate()
    assert call.cancelled
    call.running, call.result = False, 3
    assert proc.poll() == 3 and proc.wait() == 3
    failed = FakeCall()
    failed.running, failed.raises = False, RuntimeError("node 1 lost")
    p2 = CallProcess(failed)
    assert p2.poll() == 1 and "node 1 lost" in p2.error


def test_modal_roles_use_the_inference_url_and_spawn_the_handoff_trainer(tmp_path: Path) -> None:
    from workbench_cloud.modal.orchestrator import CloudRun
    from workbench_cloud.modal.spec import ModalSpec

    spawned: list[tuple[Any, ...]] = []
    synced: list[int] = []

    class FakeFunction:
        def spawn(self, *args: Any) -> FakeCall:
            spawned.append(args)
            return FakeCall()

    spec = ModalSpec(run_id="r1", base_model="Qwen/Qwen3-8B", bundle_dir=str(tmp_path), bundle_hash="h")
    roles = ModalRoles(CloudRun(spec, "http://[fdaa::1]:8000/", FakeFunction()), {"kind": "modal_dict", "name": "d"},
                       sync=lambda: synced.append(1))
    inf = roles.start_inference("Qwen/Qwen3-8B", tmp_path, max_batch=8, threads=None)
    assert inf.root == "http://[fdaa::1]:8000" and inf.model == "Qwen/Qwen3-8B"
    with pytest.raises(ConfigError, match="inference function serves"):
        roles.start_inference("other/model", tmp_path, max_batch=8, threads=None)
    proc, log = roles.start_trainer(tmp_path / "db", "r1", inf.root, Path(spec.run_dir), None)
    assert isinstance(proc, CallProcess) and log is None and synced == [1]  # committed before the spawn
    _, argv = spawned[0]
    assert argv == handoff_argv({"kind": "modal_dict", "name": "d"}, "r1", inf.root, spec.run_dir)
    assert argv[0] == "workbench_cloud.handoff" and json.loads(argv[2]) == {"kind": "modal_dict", "name": "d"}


# -- end to end on this machine: a hand-over after a checkpoint, and the fresh job that continues ------------
@pytest.mark.slow
def test_a_handed_over_run_continues_from_its_checkpoint(tiny_dir: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from workbench_cloud.job import run_remote
    from workbench_cloud.resume import read_records
    from workbench_cloud.stream import DirLog, follow

    from workbench.bundles.bundle import build_bundle
    from workbench.training.run_config import resolve

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the run folder: the "volume"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = resolve(None, {"trainer.model": str(tiny_dir), "loop.max_steps": 6, "loop.checkpoint_every": 2,
                         "loop.groups_per_step": 2, "loop.rollouts_per_task": 4, "loop.max_tokens": 12,
                         "loop.concurrency": 8, "loop.eval_tasks": 0}, "arithmetic")
    bundle = build_bundle("arithmetic", tmp_path / "bundles")
    log = DirLog(tmp_path / "events")  # the laptop's stream (a modal.Dict on Modal)
    handoff = {"kind": "dir", "path": str(tmp_path / "handoff")}  # outlives the job, like the hand-off Dict
    cost = {"gpus": 1, "usd_per_gpu_s": 0.0, "gpu": "cpu", "provider": "local"}
    first = tmp_path / "job1"
    # A call with 5000 s left and 4999 s needed to shut down: the window to the next checkpoint
    # (planned as 1000 steps away) covers any step time, so it hands over at the first checkpoint.
    watch = HandoverWatch(lambda after: read_records(first / "remote.db", "r1", after), 10_000.0,
                          checkpoint_every=1000, shutdown_s=4999, clock=lambda: 5000.0, every_s=0.0)
    status = run_remote(bundle.path, bundle.hash, cfg.raw, log, run_id="r1", workdir=first, cost=cost,
                        threads=1, handoff=handoff, should_stop=watch)
    assert status == "resuming"
    handed_at = watch.checkpoint_step
    assert handed_at in (2, 4)
    snap = snapshot_store(first / "remote.db", tmp_path / "data" / "snapshot.db")
    restore_store(snap, tmp_path / "job2" / "remote.db")
    status = run_remote(bundle.path, bundle.hash, {}, log, run_id="r1", workdir=tmp_path / "job2", cost=cost,
                        threads=1, handoff=handoff, resume=True)
    assert status == "completed"
    # The laptop follows one stream across both jobs and ends with the whole run, once.
    laptop = Store(tmp_path / "laptop.db")
    laptop.create_run("r1", kind="train", env_name="arithmetic")
    assert follow(laptop.conn, "r1", log, timeout_s=30) == "completed"
    steps = [r["step"] for r in laptop.train_records("r1", "step")]
    assert steps[-1] == 6 and set(range(1, 7)) <= set(steps)
    resumed = [r for r in laptop.train_records("r1", "event") if r["message"].startswith("resumed from the checkpoint")]
    assert len(resumed) == 1 and resumed[0]["step"] in (handed_at, handed_at + 2)
    ids = laptop.conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM rollout WHERE run_id = 'r1'").fetchone()
    assert ids[0] == ids[1] >= 6 * 8
    con = sqlite3.connect(tmp_path / "job2" / "remote.db")
    assert con.execute("SELECT status FROM run WHERE id = 'r1'").fetchone()[0] == "completed"
    laptop.close()


def test_a_resumed_exporter_streams_only_what_is_new(tmp_path: Path) -> None:
    from workbench_cloud.stream import DirLog, Exporter

    store = Store(tmp_path / "remote.db")
    store.create_run("r", kind="train", env_name="e")
    store.record_train("r", 1, "step", {}, "streamed by the previous call")
    log = DirLog(tmp_path / "events")
    exporter = Exporter(store.path, "r", log)
    exporter.skip_existing()
    store.record_train("r", 2, "step", {}, "new in this call")
    exporter.pump()
    exporter.close()
    kinds = [(e["kind"], e["row"].get("message")) for e in log.read(0)]
    assert ("train", "new in this call") in kinds and ("train", "streamed by the previous call") not in kinds
    store.close()
