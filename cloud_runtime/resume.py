"""Runs longer than one Modal call: hand the run over to a fresh call before the 24 h limit.

A Modal function execution ends at its timeout (24 h at most). A run that needs longer hands itself
over, at a step boundary right after a checkpoint, so nothing trained is lost:

1. :class:`HandoverWatch` (the orchestrator's extra ``should_stop``) watches the trainer's records.
   Once the time left is within reach of the next checkpoint (``checkpoint_every`` steps at the
   recent step time, plus ``shutdown_s`` for stopping and committing), it stops the run just after a
   ``checkpoint saved`` event; with only ``shutdown_s`` left it stops regardless. The stop reason
   starts with ``workbench.training.loop.HANDOVER``, so the run is left ``resuming`` (the laptop keeps
   following it) instead of ``stopped``.
2. The orchestrator snapshots its SQLite store onto the run volume (:func:`snapshot_store`: SQLite's
   online backup, renamed into place), commits the volume, and spawns itself again with
   ``resume``; :func:`respawn_decision` refuses to loop when a call made no progress.
3. The new call restores the snapshot (:func:`restore_store`) and runs ``job.run_remote(...,
   resume=True)``: ``workbench.training.loop.train(resume=RUN)`` continues from the store, the trainer from
   its checkpoint on the volume and from the hand-off log position that checkpoint recorded.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError
from workbench.store import train_records
from workbench.training.loop import HANDOVER
from workbench.training.roles import RESUMED_FROM

#: Time kept for stopping the run, snapshotting the store, committing the volume and spawning.
SHUTDOWN_S = 1200.0
CHECKPOINT_EVENT = "checkpoint saved at step "


def handover_decision(seconds_left: float, *, step_s: float | None, checkpoint_every: int, current_step: int,
                      checkpoint_step: int | None, shutdown_s: float = SHUTDOWN_S) -> str | None:
    """Why the run must hand over now, or None. ``checkpoint_step`` is the step of the newest
    checkpoint; ``step_s`` the recent seconds per step (None before two steps were seen)."""
    if seconds_left <= shutdown_s:
        return f"{HANDOVER}: {seconds_left:.0f}s left of this call's time limit"
    if step_s is None or checkpoint_every <= 0:
        return None
    window = shutdown_s + (checkpoint_every + 1) * step_s  # long enough to reach one more checkpoint
    if seconds_left <= window and checkpoint_step is not None and checkpoint_step == current_step:
        return (f"{HANDOVER}: checkpoint of step {checkpoint_step} saved with {seconds_left:.0f}s left of this "
                f"call's time limit (next checkpoint in about {checkpoint_every * step_s:.0f}s)")
    return None


class HandoverWatch:
    """A ``should_stop`` for ``train``: reads the trainer's records (``records(after_id)``, e.g.
    ``Store.train_records``) and applies :func:`handover_decision` against ``deadline``
    (wall-clock seconds, ``clock``'s scale)."""

    def __init__(self, records: Callable[[int], list[dict[str, Any]]], deadline: float, checkpoint_every: int, *,
                 shutdown_s: float = SHUTDOWN_S, clock: Callable[[], float] = time.time,
                 every_s: float = 5.0) -> None:
        self.records, self.deadline, self.every_s = records, deadline, every_s
        self.checked_at: float | None = None  # the orchestrator asks every 50 ms; the store is read every every_s
        self.checkpoint_every, self.shutdown_s, self.clock = checkpoint_every, shutdown_s, clock
        self.seen_id = 0
        self.step = 0
        self.checkpoint_step: int | None = None
        self.step_times: list[float] = []  # created_at of recent step records

    def _read(self) -> None:
        for rec in self.records(self.seen_id):
            self.seen_id = rec["id"]
            if rec["kind"] == "step":
                self.step = max(self.step, rec["step"])
                self.step_times = [*self.step_times[-9:], float(rec["created_at"])]
            elif rec["kind"] == "event" and rec["message"].startswith(CHECKPOINT_EVENT):
                self.checkpoint_step = rec["step"]
            elif rec["kind"] == "event" and rec["message"].startswith(RESUMED_FROM):
                self.step = self.checkpoint_step = rec["step"]

    @property
    def step_s(self) -> float | None:
        t = self.step_times
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) >= 2 else None

    def __call__(self) -> str | None:
        now = self.clock()
        if self.checked_at is not None and now - self.checked_at < self.every_s:
            return None
        self.checked_at = now
        self._read()
        return handover_decision(self.deadline - self.clock(), step_s=self.step_s,
                                 checkpoint_every=self.checkpoint_every, current_step=self.step,
                                 checkpoint_step=self.checkpoint_step, shutdown_s=self.shutdown_s)


@dataclass(frozen=True, slots=True)
class Respawn:
    action: str  # "respawn" | "done" | "fail"
    reason: str = ""


def respawn_decision(status: str, *, steps_before: int, steps_after: int, handovers: int,
                     max_handovers: int) -> Respawn:
    """What an orchestrator call does once ``run_remote`` returned ``status``: spawn the next call
    (a hand-over that made progress), finish, or fail (no step in a whole call, or too many calls)."""
    if status != "resuming":
        return Respawn("done")
    if steps_after <= steps_before:
        return Respawn("fail", f"a whole call ended at step {steps_after} without a new step; not re-spawning "
                               "(check the trainer's log and loop.checkpoint_every)")
    if handovers >= max_handovers:
        return Respawn("fail", f"the run was handed over {handovers} times (the limit); resume it by hand")
    return Respawn("respawn", f"continuing from step {steps_after} in a fresh call ({handovers + 1})")


def check_resumable(tables: dict[str, Any]) -> None:
    """A run on Modal must checkpoint, or a hand-over would start its training from scratch."""
    every = int(tables.get("loop", {}).get("checkpoint_every", 0) or 0)
    if every <= 0:
        raise ConfigError("a Modal run must checkpoint to be continued past a call's 24 h limit: "
                          "set loop.checkpoint_every (e.g. 10)")


def snapshot_store(db: Path | str, dest: Path | str) -> Path:
    """A consistent copy of the live store at ``dest`` (online backup to a temporary file, then an
    atomic rename): a reader never sees half a snapshot."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(db, timeout=30.0)
    out = sqlite3.connect(tmp)
    try:
        src.backup(out)
    finally:
        out.close()
        src.close()
    os.replace(tmp, dest)
    return dest


def restore_store(snapshot: Path | str, db: Path | str) -> None:
    """Put a snapshot back as the job's live store (refusing a missing snapshot in plain words)."""
    snapshot, db = Path(snapshot), Path(db)
    if not snapshot.exists():
        raise ConfigError(f"cannot resume: no store snapshot at {snapshot} (was the run volume committed?)")
    db.parent.mkdir(parents=True, exist_ok=True)
    for extra in ("-wal", "-shm"):
        Path(f"{db}{extra}").unlink(missing_ok=True)
    snapshot_store(snapshot, db)


def read_records(db: Path | str, run_id: str, after_id: int) -> list[dict[str, Any]]:
    """The run's training records after ``after_id``, read from a job's store (as ``Store.train_records``)."""
    import orjson

    rows = train_records.records_after(db, run_id, after_id)
    return [{"id": r[0], "step": r[1], "kind": r[2], "metrics": orjson.loads(r[3]), "message": r[4],
             "created_at": r[5]} for r in rows]


def last_step(db: Path | str, run_id: str) -> int:
    """The newest step the run's store records (0 before the first)."""
    return train_records.last_step(db, run_id)


__all__ = ["CHECKPOINT_EVENT", "last_step", "read_records", "SHUTDOWN_S", "HandoverWatch", "Respawn", "check_resumable", "handover_decision",
           "respawn_decision", "restore_store", "snapshot_store"]
