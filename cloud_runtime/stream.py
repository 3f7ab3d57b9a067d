"""Streaming a remote run back to the laptop: an append-only, replayable event log with a cursor.

The remote side (a Modal function, or a local process for ``--backend local``) writes its run into
its own store and an :class:`Exporter` turns every new row into an event with a sequence number
(``seq``, 1, 2, ...) appended to the log. The laptop reads the log from its cursor and
:func:`ingest` applies events to the local store in one transaction together with the new cursor,
so a dropped connection resumes from the cursor with nothing lost, and a duplicate delivery (an
event at or below the cursor) is skipped: exactly-once into SQLite.

Logs: :class:`DirLog` (JSON lines in a directory: the local backend; on Modal the same files can
live on a Volume) and :class:`KeyValueLog` over any dict-like store with ``get``/``put`` — a
``modal.Dict`` in the cloud (``KeyValueLog.modal(name)``). Both carry the stop flag that
``workbench stop`` and the budget guard raise and the remote loop checks between steps.

Event kinds: ``run`` (the run row: status, summary...), ``rollout`` (a rollout row with its
scores, model calls, errors and trace), ``train`` (a train_metric row), ``cost`` (a cost_event row).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

import orjson

from workbench.cost.budgets import spent_usd
from workbench.errors import StreamGone
from workbench.fsutil import atomic_write
from workbench.store import stream_rows as rows

Event = dict[str, Any]
FINISHED = frozenset({"completed", "failed", "interrupted", "stopped"})


class EventLog(Protocol):
    def head(self) -> int: ...
    def append(self, events: list[Event]) -> int: ...
    def read(self, after: int, limit: int = 500) -> list[Event]: ...
    def request_stop(self, reason: str) -> None: ...
    def stop_requested(self) -> str | None: ...


class DirLog:
    """Events as JSON lines in ``DIR/events.jsonl`` (one writer), the stop flag in ``DIR/stop``."""

    def __init__(self, path: Path | str) -> None:
        self.dir = Path(path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file = self.dir / "events.jsonl"
        self.file.touch(exist_ok=True)
        self._head: int | None = None
        self._offset = (0, 0)  # (seq, byte offset just after it): where the last read ended

    def head(self) -> int:
        if self._head is None:
            last = 0
            for ev in self._scan(0):
                last = ev["seq"]
            self._head = last
        return self._head

    def append(self, events: list[Event]) -> int:
        seq = self.head()
        lines = []
        for ev in events:
            seq += 1
            lines.append(orjson.dumps({**ev, "seq": seq}) + b"\n")
        with open(self.file, "ab") as f:
            f.write(b"".join(lines))
            f.flush()
            os.fsync(f.fileno())
        self._head = seq
        return seq

    def _scan(self, start: int) -> Iterable[Event]:
        with open(self.file, "rb") as f:
            f.seek(start)
            for line in f:
                if not line.endswith(b"\n"):
                    return  # a line still being written
                yield orjson.loads(line)

    def read(self, after: int, limit: int = 500) -> list[Event]:
        seq, offset = self._offset
        start = offset if seq <= after else 0
        out: list[Event] = []
        pos = start
        with open(self.file, "rb") as f:
            f.seek(start)
            for line in f:
                if not line.endswith(b"\n"):
                    break
                pos += len(line)
                ev = orjson.loads(line)
                if ev["seq"] <= after:
                    self._offset = (ev["seq"], pos)
                    continue
                out.append(ev)
                self._offset = (ev["seq"], pos)
                if len(out) >= limit:
                    break
        return out

    def request_stop(self, reason: str) -> None:
        atomic_write(self.dir / "stop", reason)

    def stop_requested(self) -> str | None:
        with contextlib.suppress(FileNotFoundError):
            return (self.dir / "stop").read_text() or "stop requested"
        return None


class KeyValueLog:
    """Events in a dict-like store: ``head`` → last seq, ``e:SEQ`` → event, ``stop`` → reason
    (each key after ``prefix``, so several logs can share one store). One writer; readers fetch by
    key, so reading never consumes anything (unlike a queue)."""

    def __init__(self, kv: Any, prefix: str = "") -> None:
        self.kv, self.prefix = kv, prefix

    @classmethod
    def modal(cls, name: str, prefix: str = "") -> KeyValueLog:
        import modal

        return cls(modal.Dict.from_name(name, create_if_missing=True), prefix)

    def head(self) -> int:
        return int(self.kv.get(f"{self.prefix}head", 0) or 0)

    def append(self, events: list[Event]) -> int:
        seq = self.head()
        for ev in events:
            seq += 1
            self.kv[f"{self.prefix}e:{seq}"] = {**ev, "seq": seq}
        self.kv[f"{self.prefix}head"] = seq  # after the events: a reader never sees a head without its events
        return seq

    def read(self, after: int, limit: int = 500) -> list[Event]:
        head = self.head()
        return [self.kv.get(f"{self.prefix}e:{s}") for s in range(after + 1, min(head, after + limit) + 1)]

    def request_stop(self, reason: str) -> None:
        self.kv[f"{self.prefix}stop"] = reason

    def stop_requested(self) -> str | None:
        return self.kv.get(f"{self.prefix}stop") or None


def open_log(spec: dict[str, Any]) -> EventLog:
    """The log a run's ``config["stream"]`` names: ``{"kind": "dir", "path": ...}``,
    ``{"kind": "modal_dict", "name": ..., "prefix": ""}`` or ``{"kind": "ray_kv", "name": ..., "address": ...}``
    (the run's key-value actor on a Ray cluster, ``workbench_cloud.ray_kv``)."""
    if spec.get("kind") == "dir":
        return DirLog(spec["path"])
    if spec.get("kind") == "modal_dict":
        return KeyValueLog.modal(spec["name"], spec.get("prefix", ""))
    if spec.get("kind") == "ray_kv":
        from workbench_cloud.ray_kv import RayDict

        return KeyValueLog(RayDict(spec["name"], address=spec.get("address")), spec.get("prefix", ""))
    raise ValueError(f"unknown stream kind {spec.get('kind')!r}")


# -- the remote side -------------------------------------------------------------------------------
class Exporter:
    """Turns the new rows of a run (and of its held-out eval runs ``RUN-eval*``) into events."""

    def __init__(self, db: Path | str, run_id: str, log: EventLog) -> None:
        # Read-only; used by one thread at a time (the pump thread, then the final pump after it).
        self.conn = rows.open_export(db)
        self.run_id, self.log = run_id, log
        self.rollout_pk = 0
        self.last_id = {table: 0 for table in rows.ID_TABLES}
        self.runs: dict[str, tuple[Any, ...]] = {}

    def close(self) -> None:
        self.conn.close()

    def skip_existing(self) -> None:
        """Start after every row already in the store (a resumed job whose rows were streamed)."""
        self.rollout_pk, self.last_id = rows.last_exported(self.conn, self.run_id)

    def pump(self) -> int:
        """Append every row written since the last call; returns how many events."""
        c = self.conn
        events: list[Event] = []
        run_cols = rows.columns(c, "run")
        for values in rows.run_rows(c, self.run_id):
            row = rows.encode_row(run_cols, values)
            key = tuple(values)
            if self.runs.get(row["id"]) != key:
                self.runs[row["id"]] = key
                events.append({"kind": "run", "row": row})
        cols = rows.columns(c, "rollout")
        child_cols = {t: rows.columns(c, t) for t in rows.CHILD_TABLES}
        for values in rows.rollouts_after(c, self.run_id, self.rollout_pk):
            row = rows.encode_row(cols, values)
            pk = row.pop("pk")
            children = {t: [rows.encode_row(child_cols[t], v) for v in rows.child_rows(c, t, pk)]
                        for t in rows.CHILD_TABLES}
            events.append({"kind": "rollout", "row": row, "children": children})
            self.rollout_pk = pk
        for table, kind in (("train_metric", "train"), ("cost_event", "cost")):
            tcols = rows.columns(c, table)
            for values in rows.rows_after(c, table, self.run_id, self.last_id[table]):
                row = rows.encode_row(tcols, values)
                self.last_id[table] = row.pop("id")
                events.append({"kind": kind, "row": row})
        if events:
            self.log.append(events)
        return len(events)


# -- the laptop side -------------------------------------------------------------------------------
def cursor_key(run_id: str) -> str:
    return f"stream_cursor:{run_id}"


def read_cursor(conn: sqlite3.Connection, run_id: str) -> int:
    value = rows.read_meta(conn, cursor_key(run_id))
    return int(value) if value is not None else 0


def ingest(conn: sqlite3.Connection, run_id: str, events: list[Event]) -> list[Event]:
    """Apply ``events`` (in seq order) past the run's cursor, in one transaction with the new
    cursor; returns the events applied (duplicates and replays are skipped)."""
    from workbench.records.rollout import searchable_text

    applied: list[Event] = []
    with rows.immediate(conn):
        cursor = read_cursor(conn, run_id)
        for ev in sorted(events, key=lambda e: e["seq"]):
            if ev["seq"] <= cursor:
                continue
            if ev["seq"] != cursor + 1:
                break  # a gap: stop here, the next read resumes from the cursor
            kind, row = ev["kind"], ev["row"]
            if kind == "run" and row["id"] == run_id:
                # The launch wrote this run's row (with where its stream lives): take the remote's progress.
                rows.update_run_progress(conn, run_id, row)
            elif kind == "run":
                rows.insert_row(conn, "run", row, upsert_key="id")
            elif kind == "rollout":
                # Keyed by the rollout id too: a re-exported stream (a restarted remote) adds nothing twice.
                if not rows.has_rollout(conn, row["id"]):
                    pk = rows.insert_row(conn, "rollout", row)
                    for table, children in ev["children"].items():
                        for r in children:
                            rows.insert_row(conn, table, {**r, "rollout_pk": pk, **({"id": None} if "id" in r else {})})
                    msgs = orjson.loads(row.get("messages") or "[]")
                    rows.index_rollout_text(conn, pk, searchable_text(msgs))
            elif kind in ("train", "cost"):
                table = "train_metric" if kind == "train" else "cost_event"
                if not rows.has_event(conn, table, row["run_id"], row["kind"], row["created_at"]):
                    rows.insert_row(conn, table, row)
            cursor = ev["seq"]
            applied.append(ev)
        rows.write_meta(conn, cursor_key(run_id), str(cursor))
    return applied


def follow(conn: sqlite3.Connection, run_id: str, log: EventLog, *, budget_usd: float | None = None,
           on_event: Callable[[Event], None] | None = None, poll_s: float = 0.2, retry_max_s: float = 10.0,
           until_finished: bool = True, timeout_s: float | None = None,
           exited: Callable[[], bool] | None = None) -> str:
    """Ingest the run's stream until it finishes (returns its final status). A failing read
    (a dropped connection) is retried with backoff from the cursor. When the accrued spend reaches
    ``budget_usd`` the run is asked to stop (it stops within one step). A stream whose store is gone
    (:class:`StreamGone`: another process, the launch, ended the run) ends the follow with the status the
    store holds."""
    delay = poll_s
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    status = rows.run_status(conn, run_id)  # what the store already knows (a finished run needs no new event)
    stop_sent = False
    while True:
        try:
            events = log.read(read_cursor(conn, run_id))
            delay = poll_s
        except StreamGone:
            return rows.run_status(conn, run_id)
        except (OSError, ConnectionError, TimeoutError):
            time.sleep(delay)
            delay = min(retry_max_s, delay * 2)
            continue
        new = ingest(conn, run_id, events)
        for ev in new:
            if ev["kind"] == "run" and ev["row"]["id"] == run_id:
                status = ev["row"]["status"]
            if on_event:
                on_event(ev)
        if budget_usd is not None and not stop_sent:
            spent = spent_usd(conn, run_id)
            if spent >= budget_usd:
                log.request_stop(f"budget reached: ${spent:.4f} spent of ${budget_usd:.4f}")
                stop_sent = True
        if not new and ((until_finished and status in FINISHED) or (exited is not None and exited())):
            return status
        if deadline is not None and time.monotonic() > deadline:
            return status
        if not new:
            time.sleep(poll_s)
