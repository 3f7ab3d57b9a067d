"""The rows a streamed run carries between two stores: what the remote side's exporter reads of a run
(and of its held-out eval runs ``RUN-eval*``) and what the laptop's ingest writes, with the cursor
that makes it exactly-once. ``workbench_cloud.stream`` turns them into events and back."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from workbench.store.meta import immediate, read_meta, write_meta

#: Rows keyed by ``rollout_pk``, sent with their rollout.
CHILD_TABLES = ("score", "model_call", "rollout_error", "trace")
#: Tables streamed by their own ``id`` (rows after the last id sent).
ID_TABLES = ("train_metric", "cost_event")
_RUN_IDS = "(run_id = ? OR run_id LIKE ? ESCAPE '\\')"


def eval_runs_like(run_id: str) -> str:
    """The LIKE pattern of ``run_id``'s held-out eval runs (``RUN-eval*``), its wildcards escaped."""
    return run_id.replace("_", "\\_").replace("%", "\\%") + "-eval%"


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def encode_row(cols: list[str], values: Iterable[Any]) -> dict[str, Any]:
    """A row as JSON-able data (bytes as ``{"b64": ...}``)."""
    out = {}
    for c, v in zip(cols, values, strict=True):
        out[c] = {"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v
    return out


def decode_row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: base64.b64decode(v["b64"]) if isinstance(v, dict) and "b64" in v else v for k, v in row.items()}


# -- the remote side: reading a run ---------------------------------------------------------------------
def open_export(db: Path | str) -> sqlite3.Connection:
    """A read-only connection on a job's store, usable from one thread at a time (any thread)."""
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30.0, check_same_thread=False)


def last_exported(conn: sqlite3.Connection, run_id: str) -> tuple[int, dict[str, int]]:
    """(the highest rollout pk, the highest id of each of :data:`ID_TABLES`) of the run and its evals."""
    args = (run_id, eval_runs_like(run_id))
    pk = conn.execute(f"SELECT COALESCE(MAX(pk), 0) FROM rollout WHERE {_RUN_IDS}", args).fetchone()[0]
    ids = {t: conn.execute(f"SELECT COALESCE(MAX(id), 0) FROM {t} WHERE {_RUN_IDS}", args).fetchone()[0]
           for t in ID_TABLES}
    return pk, ids


def run_rows(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[Any, ...]]:
    """The run's row and its evals' rows (values in ``columns(conn, "run")`` order), oldest first."""
    return conn.execute("SELECT * FROM run WHERE (id = ? OR id LIKE ? ESCAPE '\\') ORDER BY created_at",
                        (run_id, eval_runs_like(run_id)))


def rollouts_after(conn: sqlite3.Connection, run_id: str, after_pk: int, limit: int = 2000) -> list[tuple[Any, ...]]:
    """The run's (and its evals') rollout rows with ``pk > after_pk``, in pk order."""
    return conn.execute(f"SELECT * FROM rollout WHERE pk > ? AND {_RUN_IDS} ORDER BY pk LIMIT ?",
                        (after_pk, run_id, eval_runs_like(run_id), limit)).fetchall()


def child_rows(conn: sqlite3.Connection, table: str, rollout_pk: int) -> Iterator[tuple[Any, ...]]:
    """The rows of ``table`` (one of :data:`CHILD_TABLES`) that belong to a rollout."""
    return conn.execute(f"SELECT * FROM {table} WHERE rollout_pk = ?", (rollout_pk,))


def rows_after(conn: sqlite3.Connection, table: str, run_id: str, after_id: int) -> Iterator[tuple[Any, ...]]:
    """The run's (and its evals') rows of ``table`` (one of :data:`ID_TABLES`) with ``id > after_id``."""
    return conn.execute(f"SELECT * FROM {table} WHERE id > ? AND {_RUN_IDS} ORDER BY id",
                        (after_id, run_id, eval_runs_like(run_id)))


# -- the laptop side: writing what arrives ----------------------------------------------------------------
def insert_row(conn: sqlite3.Connection, table: str, row: dict[str, Any], upsert_key: str | None = None) -> int:
    """Insert a streamed row (decoded; the columns ``table`` has), or update it on ``upsert_key``; its rowid."""
    row = decode_row(row)
    cols = [c for c in columns(conn, table) if c in row]
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    if upsert_key:
        sets = ", ".join(f"{c} = excluded.{c}" for c in cols if c != upsert_key)
        sql += f" ON CONFLICT({upsert_key}) DO UPDATE SET {sets}"
    return conn.execute(sql, [row[c] for c in cols]).lastrowid or 0


def update_run_progress(conn: sqlite3.Connection, run_id: str, row: dict[str, Any]) -> None:
    """Take the remote's progress (status, error, end, summary, model) into the run's own row."""
    conn.execute("UPDATE run SET status = ?, error = ?, finished_at = ?, summary = ?, model = ? WHERE id = ?",
                 (row["status"], row["error"], row["finished_at"], row["summary"], row["model"], run_id))


def has_rollout(conn: sqlite3.Connection, rollout_id: str) -> bool:
    return conn.execute("SELECT 1 FROM rollout WHERE id = ?", (rollout_id,)).fetchone() is not None


def index_rollout_text(conn: sqlite3.Connection, rollout_pk: int, text: str) -> None:
    """Add a rollout's searchable text to the full-text index."""
    conn.execute("INSERT INTO rollout_fts (rowid, text) VALUES (?, ?)", (rollout_pk, text))


def has_event(conn: sqlite3.Connection, table: str, run_id: str, kind: str, created_at: float) -> bool:
    """Whether ``table`` (one of :data:`ID_TABLES`) holds the run's row of ``kind`` made at ``created_at``."""
    return conn.execute(f"SELECT 1 FROM {table} WHERE run_id = ? AND kind = ? AND created_at = ?",
                        (run_id, kind, created_at)).fetchone() is not None


def run_status(conn: sqlite3.Connection, run_id: str) -> str:
    """The run's status as stored, or "" when the store has no such run."""
    row = conn.execute("SELECT status FROM run WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else ""


__all__ = ["CHILD_TABLES", "ID_TABLES", "child_rows", "columns", "decode_row", "encode_row", "eval_runs_like",
           "has_event", "has_rollout", "immediate", "index_rollout_text", "insert_row", "last_exported",
           "open_export", "read_meta", "rollouts_after", "rows_after", "run_rows", "run_status",
           "update_run_progress", "write_meta"]
