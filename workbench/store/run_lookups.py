"""Small lookups on a store's runs: a run's live counts, whether it exists or holds rollouts, the
comparison a run belongs to and the runs of one, a run's first rollout (of a task), the runs of an
optimisation. The SQL stays in the store; the app's screens and the commands call these."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any


def run_counts(conn: sqlite3.Connection, run_id: str) -> tuple[int, int, float | None]:
    """(rollouts, errors, mean reward) of a run as stored now, counted as ``list_runs`` counts a run
    still running (errors: rollouts without a reward), on the run/reward index alone."""
    n, scored, mean = conn.execute("SELECT COUNT(*), COUNT(reward), AVG(reward) FROM rollout WHERE run_id = ?",
                                   (run_id,)).fetchone()
    return n, n - scored, mean


def comparison_of(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The comparison ``run_id`` is part of, or the one it made (a pipeline's own run), or None."""
    row = conn.execute("SELECT json_extract(config, '$.comparison_id') FROM run WHERE id = ?", (run_id,)).fetchone()
    if row and row[0]:
        return str(row[0])
    made = conn.execute("SELECT 1 FROM run WHERE json_extract(config, '$.comparison_id') = ? LIMIT 1",
                        (run_id,)).fetchone()
    return run_id if made else None


def first_rollout_of_task(conn: sqlite3.Connection, run_id: str, task_id: str) -> str | None:
    """The id of ``run_id``'s first sample of ``task_id``, or None when the run has none."""
    row = conn.execute("SELECT id FROM rollout WHERE run_id = ? AND task_id = ? ORDER BY sample_index LIMIT 1",
                       (run_id, task_id)).fetchone()
    return None if row is None else str(row[0])


def rollout_count(conn: sqlite3.Connection, run_id: str) -> int:
    """How many rollouts of the run are stored."""
    return conn.execute("SELECT COUNT(*) FROM rollout WHERE run_id=?", (run_id,)).fetchone()[0]


def has_rollouts(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM rollout WHERE run_id=? LIMIT 1", (run_id,)).fetchone() is not None


def first_rollout(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The id of a rollout of the run (its only one, for a run of one rollout), or None when it has none."""
    row = conn.execute("SELECT id FROM rollout WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else row[0]


def run_exists(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT id FROM run WHERE id = ?", (run_id,)).fetchone() is not None


def run_exists_in(db: Path, run_id: str) -> bool:
    """Whether the store file ``db`` (which may not exist yet) holds the run."""
    if not db.exists():
        return False
    con = sqlite3.connect(db, timeout=30.0)
    try:
        return con.execute("SELECT 1 FROM run WHERE id = ?", (run_id,)).fetchone() is not None
    finally:
        con.close()


def comparison_runs(conn: sqlite3.Connection, comparison_id: str) -> list[str]:
    """The ids of the runs of a comparison: in the order its models were given (``eval -m A -m B``, whose runs
    start together), else oldest first (a pipeline's stages)."""
    return [r for (r,) in conn.execute(
        "SELECT id FROM run WHERE json_extract(config, '$.comparison_id') = ? "
        "ORDER BY json_extract(config, '$.comparison_index'), created_at, rowid", (comparison_id,))]


def running_runs_of(conn: sqlite3.Connection, kind: str) -> list[str]:
    """The ids of the ``running`` runs of ``kind`` and of the pipelines of that kind (their evaluations)."""
    return [r for (r,) in conn.execute(
        "SELECT id FROM run WHERE status = 'running' AND (kind = ? OR json_extract(config, '$.pipeline.kind') = ?)",
        (kind, kind)).fetchall()]


def latest_stage_run(conn: sqlite3.Connection, pipeline_id: str, stage: str) -> str | None:
    """The id of the pipeline's latest run of ``stage``, or None."""
    row = conn.execute(
        "SELECT id FROM run WHERE json_extract(config, '$.pipeline.id') = ? AND json_extract(config, "
        "'$.pipeline.stage') = ? ORDER BY created_at DESC LIMIT 1", (pipeline_id, stage)).fetchone()
    return row[0] if row else None


def rollout_results(conn: sqlite3.Connection, run_id: str) -> list[tuple[Any, ...]]:
    """``(pk, id, task_index, reward, status)`` of each of the run's rollouts."""
    return conn.execute("SELECT pk, id, task_index, reward, status FROM rollout WHERE run_id = ?",
                        (run_id,)).fetchall()


__all__ = ["comparison_of", "comparison_runs", "first_rollout", "first_rollout_of_task", "has_rollouts",
           "latest_stage_run", "rollout_count", "rollout_results", "run_counts", "run_exists", "run_exists_in",
           "running_runs_of"]
