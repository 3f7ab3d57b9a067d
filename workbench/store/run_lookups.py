"""Small lookups the app's screens make on a store's connection: a run's live counts, the comparison a
run belongs to, a run's first rollout of a task. The SQL stays in the store; the screens call these."""

from __future__ import annotations

import sqlite3


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


__all__ = ["comparison_of", "first_rollout_of_task", "run_counts"]
