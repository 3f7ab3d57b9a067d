"""Which version of an environment a stored score was computed with: a rollout's run's ``env_version``
(``workbench.runs.score_age`` compares it with the environment's files now)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from workbench.store.rescores import plain_cursor


def rollout_scored_version(conn: sqlite3.Connection, rollout_id: str) -> tuple[int, str, str] | None:
    """(pk, environment, the version its run scored it with) of rollout ``rollout_id``; None when not stored."""
    row = plain_cursor(conn).execute(
        "SELECT ro.pk, ro.env_name, ru.env_version FROM rollout ro JOIN run ru ON ru.id = ro.run_id WHERE ro.id = ?",
        (rollout_id,)).fetchone()
    return None if row is None else (int(row[0]), str(row[1]), str(row[2]))


def run_scored_versions(conn: sqlite3.Connection, run_ids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Run id -> (environment, the version it scored its rollouts with); unknown runs are left out."""
    ids = sorted(set(run_ids))
    out: dict[str, tuple[str, str]] = {}
    for i in range(0, len(ids), 900):
        part = ids[i:i + 900]
        for run_id, env, version in plain_cursor(conn).execute(
                f"SELECT id, env_name, env_version FROM run WHERE id IN ({','.join('?' * len(part))})", part):
            out[run_id] = (env, version)
    return out


def scored_with_other_versions(conn: sqlite3.Connection, env: str, version: str) -> tuple[int, int]:
    """(stored rollouts of ``env`` scored with another version than ``version``, all its stored rollouts)."""
    other, total = plain_cursor(conn).execute(
        "SELECT COALESCE(SUM(ru.env_version != ?), 0), COUNT(*) FROM rollout ro JOIN run ru ON ru.id = ro.run_id "
        "WHERE ro.env_name = ?", (version, env)).fetchone()
    return int(other), int(total)


__all__ = ["rollout_scored_version", "run_scored_versions", "scored_with_other_versions"]
