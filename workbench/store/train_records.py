"""A training run's rows: its records (``train_metric``: steps, skipped steps, held-out evals, events),
where a resumed run picks up, and its finished rollouts with their traces as the trainer and SFT data
read them. The Python that turns these rows into batches lives in ``workbench/training``."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from workbench.store.meta import immediate, write_meta

_RECORD_COLUMNS = "id, step, kind, metrics, message, created_at"


def open_bridge(db: Path | str) -> sqlite3.Connection:
    """An autocommit connection on a job's store, for the handoff bridge's thread."""
    return sqlite3.connect(db, timeout=30.0, isolation_level=None, check_same_thread=False)


def records_after(db: Path | str, run_id: str, after_id: int) -> list[tuple[Any, ...]]:
    """The run's record rows (``id, step, kind, metrics, message, created_at``) after ``after_id``, in
    order, read from the store file ``db``."""
    con = sqlite3.connect(db, timeout=30.0)
    try:
        return con.execute(f"SELECT {_RECORD_COLUMNS} FROM train_metric WHERE run_id = ? AND id > ? ORDER BY id",
                           (run_id, after_id)).fetchall()
    finally:
        con.close()


def last_step(db: Path | str, run_id: str) -> int:
    """The newest optimizer step the store file ``db`` records for the run (0 before the first)."""
    con = sqlite3.connect(db, timeout=30.0)
    try:
        return int(con.execute("SELECT COALESCE(MAX(step), 0) FROM train_metric WHERE run_id = ? AND kind = 'step'",
                               (run_id,)).fetchone()[0])
    finally:
        con.close()


def eval_steps(conn: sqlite3.Connection, run_id: str) -> set[int]:
    """The steps the run's held-out evals were made at."""
    return {int(step) for (step,) in conn.execute(
        "SELECT step FROM train_metric WHERE run_id = ? AND kind = 'eval'", (run_id,))}


def add_records(conn: sqlite3.Connection, run_id: str, records: Iterable[tuple[int, str, str, str, float]],
                cursor_key: str, cursor: str) -> None:
    """Insert ``(step, kind, metrics JSON, message, created_at)`` records and set the meta ``cursor_key``
    to ``cursor``, in one transaction."""
    with immediate(conn):
        for step, kind, metrics, message, created_at in records:
            conn.execute("INSERT INTO train_metric (run_id, step, kind, metrics, message, created_at) "
                         "VALUES (?, ?, ?, ?, ?, ?)", (run_id, step, kind, metrics, message, created_at))
        write_meta(conn, cursor_key, cursor)


class ResumePoint(NamedTuple):
    """Where a resumed run's orchestrator starts: the next group's task index, the last record id, and
    whether the trainer had taken steps (then its restarted trainer says which checkpoint it resumes from)."""

    group0: int
    seen_id: int
    trained: bool


def resume_point(conn: sqlite3.Connection, run_id: str) -> ResumePoint:
    """The :class:`ResumePoint` of a run being resumed."""
    group0 = 1 + conn.execute("SELECT COALESCE(MAX(task_index), -1) FROM rollout WHERE run_id=?",
                              (run_id,)).fetchone()[0]
    seen_id, trained = conn.execute("SELECT COALESCE(MAX(id), 0), COUNT(*) FILTER (WHERE kind = 'step') "
                                    "FROM train_metric WHERE run_id=?", (run_id,)).fetchone()
    return ResumePoint(group0, seen_id, bool(trained))


def traced_rollouts(conn: sqlite3.Connection, run_id: str, *, after_pk: int = 0, limit: int | None = None,
                    task_indices: Iterable[int] | None = None) -> Iterator[tuple[Any, ...]]:
    """``(pk, id, task_index, reward, status, nodes, token_ids, logprobs, mask)`` of the run's rollouts with
    ``pk > after_pk`` in commit order (at most ``limit``; of ``task_indices`` only), the trace's columns
    None for a rollout stored without one."""
    sql = ("SELECT r.pk, r.id, r.task_index, r.reward, r.status, t.nodes, t.token_ids, t.logprobs, t.mask "
           "FROM rollout r LEFT JOIN trace t ON t.rollout_pk = r.pk WHERE r.run_id = ? AND r.pk > ?")
    args: list[object] = [run_id, after_pk]
    wanted = sorted(set(task_indices)) if task_indices is not None else None
    if wanted is not None:
        sql += f" AND r.task_index IN ({', '.join('?' * len(wanted)) or 'NULL'})"
        args += wanted
    sql += " ORDER BY r.pk"
    if limit is not None:
        sql += " LIMIT ?"
        args.append(int(limit))
    return conn.execute(sql, args)


def run_kind_and_env(conn: sqlite3.Connection, run_id: str) -> tuple[str, str] | None:
    """(kind, environment) of a stored run, or None when the store has no such run."""
    row = conn.execute("SELECT kind, env_name FROM run WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else (row[0], row[1])


def conversation_rollouts(conn: sqlite3.Connection, run_id: str) -> Iterator[tuple[Any, ...]]:
    """``(id, task_index, reward, status, source, messages, state, nodes, token_ids, logprobs, mask)`` of the
    run's rollouts in commit order, the trace's columns None for a rollout stored without one."""
    return conn.execute(
        "SELECT r.id, r.task_index, r.reward, r.status, r.source, r.messages, r.state, t.nodes, t.token_ids, "
        "t.logprobs, t.mask FROM rollout r LEFT JOIN trace t ON t.rollout_pk = r.pk WHERE r.run_id = ? "
        "ORDER BY r.pk", (run_id,))


__all__ = ["add_records", "conversation_rollouts", "eval_steps", "last_step", "open_bridge", "records_after",
           "ResumePoint", "resume_point", "run_kind_and_env", "traced_rollouts"]
