"""The batch hand-off between the orchestrator and a trainer that does not share its store.

On Modal the orchestrator's SQLite store is on its own container's disk; the trainer nodes are
other containers. So the two meet in two append-only event logs (``workbench_cloud.stream``: a
``modal.Dict`` there, a directory for ``workbench launch --backend local``, which runs exactly this
code path on one machine) and a bulk directory (``workbench_cloud.bulk``: a folder of the run's
Volume there, a directory next to the logs locally):

* the **batch log**, written by :class:`HandoffBridge` in the orchestrator: every finished rollout
  of the run, in store order, as a small control record (id, group, reward, status, policy
  versions, and where its arrays are: a bulk file's relative path, byte size and sha256, and each
  branch's offset and length in it), the steps whose held-out eval is recorded (the trainer may then
  unload their adapters), plus a heartbeat while there is nothing new;
* the **bulk files**: the per-token arrays (token ids, logprobs, loss mask, teacher logprobs) of
  each shipment — the rollouts one bridge pass ships, at most ``bulk.FILE_TOKENS`` tokens — in one
  safetensors file, written (and on Modal committed) before the events that name it are appended.
  The trainer reads a file once for all its rollouts, reloading the Volume until it is visible,
  and refuses a file whose size or checksum differs or a path outside the directory
  (:class:`~workbench_cloud.bulk.HandoffError`). A 256-rollout step at 131K tokens (≈ 34M tokens,
  ≈ 300 MB of arrays) thus puts ≈ 0.1 MB of control records in the Dict (docs/cloud.md);
* the **record log**, written by the trainer's rank 0 through :class:`LogFeed`: its step, skipped
  and event records, which the bridge copies into the orchestrator's store — where
  :class:`workbench.training.loop.Orchestrator` and the stream exporter already look for them.

:class:`LogFeed` is the trainer's ``workbench_local.training.feed.TrainFeed``; its cursor is the batch
log's sequence number, recorded as ``last_pk`` with every step, so a resumed trainer re-reads from
the checkpointed step's position. Rank 0 still broadcasts each batch to the other ranks.

Exactly-once: the bridge resumes its batch position from the log itself (every event carries the
store pk it had shipped up to), copies records and advances its record cursor in one SQLite
transaction, and the feed skips a rollout id it has already seen. A bulk file is named after the
sequence numbers of its first and last rollout, so a bridge restarted between writing a file and
appending its events writes the same name again (or a wider one, removed with the rest below).

Bounded files: when the trainer reports a saved checkpoint, the bridge removes the bulk files whose
rollouts all lie at or below the cursor of the checkpoint before it (a resumed trainer reads from
its checkpoint's cursor; the one checkpoint of slack covers a newest checkpoint that never reached
the Volume, and a trainer that reports resuming from an older checkpoint voids the ones after it).
So the directory holds at most the rollouts of two checkpoint intervals, and none once
the run completed. Without a bulk directory (a spec that names none) the arrays travel inline in the
events as base64 (:func:`encode_rollout`); :func:`decode_rollout` reads both forms.

    python -m workbench_cloud.handoff --handoff JSON --run RUN --server URL --dir RUN_DIR

runs the training worker (``workbench_local.training.worker``) with a :class:`LogFeed` over the logs
that ``JSON`` names (see :func:`open_handoff`).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import threading
import time
from array import array
from typing import Any

import orjson
from workbench_cloud.bulk import FILE_TOKENS, BulkDir, HandoffError, file_name, pack, unpack_branches
from workbench_cloud.stream import DirLog, Event, EventLog, KeyValueLog

from workbench.store import train_records
from workbench.store.meta import read_meta
from workbench.training.algorithms import Branch, TrainRollout
from workbench.training.data import load_rollouts
from workbench.training.roles import RESUMED_FROM

#: A trainer that hears nothing (not even a heartbeat) for this long takes its orchestrator for gone.
ORPHAN_AFTER_S = 600.0
HEARTBEAT_S = 30.0
#: How the training worker's record of a saved checkpoint begins (an ``event`` record at the checkpoint's step).
CHECKPOINT_SAVED = "checkpoint saved at step"
_PAGE = 500


# -- the wire form of a rollout ----------------------------------------------------------------------
def _b64(a: array[Any] | bytes) -> str:
    return base64.b64encode(a if isinstance(a, bytes) else a.tobytes()).decode()


def _unb64(kind: str, text: str) -> list[Any]:
    a = array(kind)
    a.frombytes(base64.b64decode(text))
    return a.tolist()


def encode_rollout(r: TrainRollout, pk: int) -> Event:
    """A rollout as a batch-log event: per-token arrays as base64 of int32 / float32 / uint8."""
    return {"kind": "rollout", "pk": pk, "id": r.id, "group": r.group_id, "reward": r.reward,
            "status": r.status, "gold": r.gold,
            "branches": [{"ids": _b64(array("i", b.token_ids)), "lps": _b64(array("f", b.logprobs)),
                          "mask": _b64(bytes(b.mask)), "version": b.policy_version,
                          **({"teacher": _b64(array("f", b.teacher_logprobs))} if b.teacher_logprobs is not None
                             else {})} for b in r.branches]}


def decode_rollout(ev: Event, bulk: BulkDir | None = None) -> TrainRollout:
    """A rollout back from its event: arrays inline (:func:`encode_rollout`) or in the bulk file the
    event names (:func:`rollout_events`; read through ``bulk``, which checks it)."""
    if "file" in ev:
        if bulk is None:
            raise HandoffError(f"hand-off: rollout {ev.get('id')} is in a bulk file but this feed has no bulk directory")
        branches = unpack_branches(bulk.read(ev["file"]), ev["branches"])
    else:
        branches = [Branch(_unb64("i", b["ids"]), _unb64("f", b["lps"]), list(base64.b64decode(b["mask"])),
                           b.get("version"), _unb64("f", b["teacher"]) if "teacher" in b else None)
                    for b in ev["branches"]]
    return TrainRollout(ev["id"], ev["group"], ev["reward"], branches, ev.get("status", "ok"), bool(ev.get("gold")),
                        int(ev["seq"]))


def rollout_events(rollouts: list[TrainRollout], bulk: BulkDir, first_seq: int) -> list[Event]:
    """The batch-log events of one shipment whose arrays go to one bulk file: ``first_seq`` is the
    sequence number the first of them gets (the log has one writer, so it is known beforehand)."""
    arrays, places = pack(rollouts)
    ref = bulk.write(file_name(first_seq, first_seq + len(rollouts) - 1), arrays,
                     {"rollouts": ",".join(r.id for r in rollouts)})
    return [{"kind": "rollout", "pk": r.pk, "id": r.id, "group": r.group_id, "reward": r.reward, "status": r.status,
             "gold": r.gold, "file": ref, "branches": spots} for r, spots in zip(rollouts, places, strict=True)]


def append_rollouts(batches: EventLog, bulk: BulkDir | None, rollouts: list[TrainRollout]) -> int:
    """Ship ``rollouts`` into the batch log (arrays in one bulk file when there is a bulk directory,
    inline otherwise); the log's new head."""
    if bulk is None:
        return batches.append([encode_rollout(r, r.pk) for r in rollouts])
    return batches.append(rollout_events(rollouts, bulk, batches.head() + 1))


# -- where the two logs live ---------------------------------------------------------------------------
def open_handoff(spec: dict[str, Any]) -> tuple[EventLog, EventLog, BulkDir | None]:
    """(batch log, record log, bulk directory) of a hand-off spec: ``{"kind": "dir", "path": DIR}``
    (three directories under DIR) or ``{"kind": "modal_dict", "name": NAME, "bulk": {"path": P,
    "volume": V}}`` (one ``modal.Dict``, two key prefixes, and the folder P of the Volume V; without
    ``bulk`` the arrays travel inline in the Dict) or ``{"kind": "ray_kv", "name": NAME}`` (the run's
    key-value actor on a Ray cluster, two key prefixes, the arrays inline)."""
    kind = spec.get("kind")
    if kind == "dir":
        return DirLog(f"{spec['path']}/batches"), DirLog(f"{spec['path']}/records"), BulkDir(f"{spec['path']}/bulk")
    if kind == "modal_dict":
        bulk = spec.get("bulk")
        return (KeyValueLog.modal(spec["name"], "b:"), KeyValueLog.modal(spec["name"], "r:"),
                BulkDir.modal(bulk["path"], bulk["volume"]) if bulk else None)
    if kind == "ray_kv":  # the run's key-value actor on a Ray cluster; the arrays travel inline
        from workbench_cloud.ray_kv import RayDict

        kv = RayDict(spec["name"], address=spec.get("address"))
        return KeyValueLog(kv, "b:"), KeyValueLog(kv, "r:"), None
    raise ValueError(f"unknown hand-off kind {kind!r}")


def _read_all(log: EventLog, after: int) -> list[Event]:
    out: list[Event] = []
    while True:
        page = log.read(after, _PAGE)
        out += page
        if len(page) < _PAGE:
            return out
        after = page[-1]["seq"]


# -- the trainer's side ------------------------------------------------------------------------------
class LogFeed:
    """The trainer's feed over the two logs (``workbench_local.training.feed.TrainFeed``)."""

    def __init__(self, batches: EventLog, records: EventLog, bulk: BulkDir | None = None, *,
                 orphan_after_s: float = ORPHAN_AFTER_S, parent_pid: int | None = None) -> None:
        self.batches, self.records_log, self.bulk, self.orphan_after_s = batches, records, bulk, orphan_after_s
        self.parent_pid = parent_pid  # the orchestrator's process, when it runs on this machine
        self.seen: set[str] = set()
        self.evaluated: set[int] = set()  # steps whose held-out eval the orchestrator has recorded
        self.last_news = time.monotonic()

    def read(self, after: int) -> tuple[list[TrainRollout], int]:
        events = _read_all(self.batches, after)
        if events:
            self.last_news = time.monotonic()
        out = []
        for ev in events:
            if ev["kind"] == "rollout" and ev["id"] not in self.seen:
                self.seen.add(ev["id"])
                out.append(decode_rollout(ev, self.bulk))
            elif ev["kind"] == "evaluated":
                self.evaluated.add(int(ev["step"]))
        return out, events[-1]["seq"] if events else after

    def record(self, step: int, kind: str, metrics: dict[str, Any], message: str) -> None:
        self.records_log.append([{"kind": "record", "row": {"step": step, "kind": kind, "metrics": metrics,
                                                             "message": message, "created_at": time.time()}}])

    def records(self, kind: str) -> list[dict[str, Any]]:
        if kind == "eval":  # the orchestrator's records, as far as the batch log has said
            return [{"step": s, "kind": "eval"} for s in sorted(self.evaluated)]
        return [ev["row"] for ev in _read_all(self.records_log, 0) if ev["row"]["kind"] == kind]

    def gone(self) -> str | None:
        if self.parent_pid is not None:
            try:
                os.kill(self.parent_pid, 0)
            except ProcessLookupError:
                return f"the orchestrator (pid {self.parent_pid}) is gone"
        quiet = time.monotonic() - self.last_news
        if quiet > self.orphan_after_s:
            return f"no word from the orchestrator (not even a heartbeat) for {quiet:.0f}s"
        return None


# -- the orchestrator's side -----------------------------------------------------------------------------
def records_cursor_key(run_id: str) -> str:
    return f"handoff_records:{run_id}"


class HandoffBridge(threading.Thread):
    """Ships the run's finished rollouts from the store to the batch log and copies the trainer's
    records from the record log into the store, every ``every_s`` (see the module doc)."""

    def __init__(self, db: Any, run_id: str, batches: EventLog, records: EventLog, bulk: BulkDir | None = None, *,
                 every_s: float = 0.2, heartbeat_s: float = HEARTBEAT_S) -> None:
        super().__init__(daemon=True, name="handoff-bridge")
        self.conn = train_records.open_bridge(db)
        self.run_id, self.batches, self.records, self.bulk = run_id, batches, records, bulk
        self.every_s, self.heartbeat_s = every_s, heartbeat_s
        self.page = _PAGE  # rollouts per shipment: fewer when they are long (a file holds FILE_TOKENS)
        self.step_cursor: dict[int, int] = {}  # the batch-log cursor each step record says it consumed up to
        self.checkpoints: list[tuple[int, int]] = []  # (step, cursor) of the trainer's checkpoints, in order
        self.finished = False  # set when the run completed: stop() then removes the bulk files left
        self.shipped_pk = self._shipped_pk()
        self.evals_shipped: set[int] = set()  # a restarted bridge says them all again: the feed keeps a set
        self.last_append = 0.0
        self.done = threading.Event()
        self.error: BaseException | None = None

    def _shipped_pk(self) -> int:
        """Where the batch log ends, in store pks (every batch event carries the pk it shipped up to)."""
        head = self.batches.head()
        last = self.batches.read(head - 1, 1) if head else []
        return int(last[0].get("pk", 0)) if last else 0

    def ship(self) -> int:
        """Append the rollouts committed since the last call (or a heartbeat when due); how many."""
        rollouts, last = load_rollouts(self.conn, self.run_id, after_pk=self.shipped_pk, limit=self.page)
        evals = sorted(train_records.eval_steps(self.conn, self.run_id) - self.evals_shipped)
        now = time.monotonic()
        if evals:
            self.batches.append([{"kind": "evaluated", "pk": self.shipped_pk, "step": step} for step in evals])
            self.evals_shipped.update(evals)
        if rollouts:
            append_rollouts(self.batches, self.bulk, rollouts)
            tokens = sum(len(b.token_ids) for r in rollouts for b in r.branches)
            self.page = max(1, min(_PAGE, FILE_TOKENS * len(rollouts) // max(1, tokens)))
        elif evals:
            last = self.shipped_pk
        elif now - self.last_append >= self.heartbeat_s:
            self.batches.append([{"kind": "heartbeat", "pk": self.shipped_pk, "t": time.time()}])
        else:
            return 0
        self.shipped_pk, self.last_append = last, now
        return len(rollouts)

    def _release(self, rows: list[dict[str, Any]]) -> None:
        """Remove the bulk files no trainer can read again: those at or below the cursor of the
        checkpoint before the newest one (a resumed trainer reads from its checkpoint's cursor; one
        checkpoint of slack covers a newest checkpoint that never reached the volume)."""
        for r in rows:
            step, message = int(r["step"]), str(r["message"])
            if r["kind"] == "step" and "last_pk" in r["metrics"]:
                self.step_cursor[step] = int(r["metrics"]["last_pk"])
            elif r["kind"] == "event" and message.startswith(CHECKPOINT_SAVED) and step in self.step_cursor:
                self.checkpoints.append((step, self.step_cursor[step]))
            elif r["kind"] == "event" and message.startswith(RESUMED_FROM):
                # A restarted trainer: checkpoints after the one it resumed from never reached its disk.
                self.checkpoints = [(s, c) for s, c in self.checkpoints if s <= step]
        if self.bulk is not None and len(self.checkpoints) >= 2:
            self.bulk.release(self.checkpoints[-2][1])

    def take_records(self) -> int:
        """Copy new trainer records into ``train_metric`` with the cursor, in one transaction."""
        key = records_cursor_key(self.run_id)
        value = read_meta(self.conn, key)
        cursor = int(value) if value is not None else 0
        events = self.records.read(cursor, _PAGE)
        if not events:
            return 0
        rows = [ev["row"] for ev in events]
        train_records.add_records(
            self.conn, self.run_id,
            [(int(r["step"]), r["kind"], orjson.dumps(r["metrics"]).decode(), r["message"], float(r["created_at"]))
             for r in rows],
            key, str(events[-1]["seq"]))
        self._release(rows)
        return len(events)

    def pump(self) -> None:
        while self.ship() >= self.page:
            pass
        while self.take_records() >= _PAGE:
            pass

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            try:
                self.pump()
                self.error = None
            except Exception as e:  # a busy store or an unreachable Dict: say so once, retry next tick
                if self.error is None:
                    print(f"hand-off bridge: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                self.error = e

    def stop(self) -> None:
        """Stop the thread after a last pass (the trainer's final records reach the store)."""
        self.done.set()
        if self.is_alive():
            self.join()
        try:
            self.pump()
            if self.finished and self.bulk is not None:
                self.bulk.release()  # a completed run resumes no more
        finally:
            self.conn.close()


# -- the trainer's command line ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``workbench_local.training.worker``'s command line with ``--handoff JSON`` instead of ``--db``."""
    import argparse

    from workbench_local.training import worker as train_worker

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--handoff", required=True, help="JSON: the hand-off logs (see open_handoff)")
    ap.add_argument("--parent-pid", type=int, default=None)
    args, rest = ap.parse_known_args(argv)
    spec = json.loads(args.handoff)
    return train_worker.main(rest, prog="python -m workbench_cloud.handoff",
                             open_feed=lambda: LogFeed(*open_handoff(spec), parent_pid=args.parent_pid))


if __name__ == "__main__":
    sys.exit(main())
