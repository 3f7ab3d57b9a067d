"""The store side of the gateway's feedback (``POST /v1/feedback``) and of the traffic it recorded: a judgement
kept by the exchange's id or by a session, and the questions asked of traffic runs."""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def add_feedback(conn: sqlite3.Connection, *, app: str, response_id: str | None = None, session: str | None = None,
                 score: float | None = None, label: str = "", comment: str = "") -> int:
    """Keep one judgement; its id."""
    cur = conn.execute("INSERT INTO feedback (response_id, session, app, score, label, comment, created_at) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (response_id, session, app, score, label, comment, time.time()))
    return int(cur.lastrowid or 0)


def traffic_rollout_app(conn: sqlite3.Connection, response_id: str) -> str | None:
    """The app whose traffic the rollout ``response_id`` is (None: no such recorded exchange)."""
    row = conn.execute("SELECT env_name FROM rollout WHERE id = ? AND source = 'traffic'", (response_id,)).fetchone()
    return str(row[0]).removeprefix("traffic/") if row is not None else None


def feedback_for(conn: sqlite3.Connection, response_id: str, session: str | None = None) -> list[dict[str, Any]]:
    """The judgements of an exchange: its own and its session's, oldest first."""
    rows = conn.execute("SELECT response_id, session, app, score, label, comment, created_at FROM feedback "
                        "WHERE response_id = ? OR (session IS NOT NULL AND session = ?) ORDER BY id",
                        (response_id, session)).fetchall()
    keys = ("response_id", "session", "app", "score", "label", "comment", "created_at")
    return [dict(zip(keys, tuple(r), strict=True)) for r in rows]


__all__ = ["add_feedback", "feedback_for", "traffic_rollout_app"]
