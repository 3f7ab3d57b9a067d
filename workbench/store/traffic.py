"""The store side of the gateway's feedback (``POST /v1/feedback``) and of the traffic it recorded: a judgement
kept by the exchange's id or by a session, and the questions asked of traffic runs."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson

from workbench.records.rollout import searchable_text


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


def traffic_answer(conn: sqlite3.Connection, answer_id: str) -> str | None:
    """The recorded exchange whose answer carried ``answer_id`` in its own API (None: none did)."""
    row = conn.execute("SELECT id FROM rollout WHERE source = 'traffic' AND json_extract(state, '$.answer_id') = ? "
                       "LIMIT 1", (answer_id,)).fetchone()
    return str(row[0]) if row is not None else None


def feedback_for(conn: sqlite3.Connection, response_id: str, session: str | None = None) -> list[dict[str, Any]]:
    """The judgements of an exchange: its own and its session's, oldest first."""
    rows = conn.execute("SELECT response_id, session, app, score, label, comment, created_at FROM feedback "
                        "WHERE response_id = ? OR (session IS NOT NULL AND session = ?) ORDER BY id",
                        (response_id, session)).fetchall()
    keys = ("response_id", "session", "app", "score", "label", "comment", "created_at")
    return [dict(zip(keys, tuple(r), strict=True)) for r in rows]



#: An exchange's best feedback score: its own, else its session's (None without any).
_FEEDBACK = ("COALESCE((SELECT MAX(f.score) FROM feedback f WHERE f.response_id = r.id), "
             "(SELECT MAX(f.score) FROM feedback f WHERE f.session IS NOT NULL "
             " AND f.session = json_extract(r.state, '$.session') AND f.app = substr(r.env_name, 9)))")


def recent_traffic(conn: sqlite3.Connection, *, limit: int = 200, text: str | None = None) -> list[dict[str, Any]]:
    """The latest recorded exchanges, newest first (``text``: only those whose app, route, arm, session or
    answer holds it, case-insensitively): ``id``, ``app``, ``route``, ``arm``, ``session``, ``shadow_of``,
    ``created_at``, ``completion``, ``feedback`` (as in :func:`traffic_exchanges`)."""
    where, args = "r.source = 'traffic'", []
    if text:
        like = f"%{text.lower()}%"
        where += (" AND (lower(r.env_name) LIKE ? OR lower(r.completion) LIKE ? OR lower(json_extract(r.state, "
                  "'$.route')) LIKE ? OR lower(json_extract(r.state, '$.arm')) LIKE ? OR "
                  "lower(json_extract(r.state, '$.session')) LIKE ?)")
        args = [like] * 5
    rows = conn.execute(
        "SELECT r.id, r.env_name, json_extract(r.state, '$.route'), json_extract(r.state, '$.arm'), "
        "json_extract(r.state, '$.session'), json_extract(r.state, '$.shadow_of'), r.created_at, r.completion, "
        f"{_FEEDBACK} FROM rollout r WHERE {where} ORDER BY r.created_at DESC, r.pk DESC LIMIT ?", (*args, limit)).fetchall()
    keys = ("id", "app", "route", "arm", "session", "shadow_of", "created_at", "completion", "feedback")
    out = [dict(zip(keys, tuple(r), strict=True)) for r in rows]
    for r in out:
        r["app"] = str(r["app"]).removeprefix("traffic/")
    return out


def traffic_exchanges(conn: sqlite3.Connection, *, app: str | None = None, since: float | None = None
                      ) -> list[dict[str, Any]]:
    """Every recorded exchange of the gateway (of ``app``, from ``since`` on), oldest first, each with its best
    feedback score (its own, else its session's; None without any): ``id``, ``app``, ``created_at``, ``prompt``
    (the conversation sent, JSON), ``completion``, ``messages`` (the conversation and its answer, JSON), ``model``
    (the arm that answered), ``state`` (JSON), ``feedback``."""
    where: list[str] = ["r.source = 'traffic'"]
    args: list[Any] = []
    if app is not None:
        where.append("r.env_name = ?")
        args.append(f"traffic/{app}")
    if since is not None:
        where.append("r.created_at >= ?")
        args.append(since)
    rows = conn.execute(
        f"SELECT r.id, r.env_name, r.created_at, r.prompt, r.completion, r.messages, r.model, r.state, {_FEEDBACK} "
        f"FROM rollout r WHERE {' AND '.join(where)} "
        "ORDER BY r.created_at, r.pk", args).fetchall()
    return [{"id": rid, "app": str(env).removeprefix("traffic/"), "created_at": created, "prompt": prompt,
             "completion": completion, "messages": messages, "model": model, "state": state, "feedback": feedback}
            for rid, env, created, prompt, completion, messages, model, state, feedback in rows]


#: The tables that hold rows of a rollout, by its ``pk``.
_ROLLOUT_PARTS = ("score", "model_call", "rollout_error", "trace", "rescore_rollout")


def _pruned_pks(conn: sqlite3.Connection, before: float | None, keep: int | None, app: str | None) -> list[int]:
    where, args = "source = 'traffic'", []
    if app is not None:
        where += " AND env_name = ?"
        args.append(f"traffic/{app}")
    picked: set[int] = set()
    if before is not None:
        picked.update(r[0] for r in conn.execute(f"SELECT pk FROM rollout WHERE {where} AND created_at < ?",
                                                 (*args, before)))
    if keep is not None:
        picked.update(r[0] for r in conn.execute(
            f"SELECT pk FROM rollout WHERE {where} ORDER BY created_at DESC, pk DESC LIMIT -1 OFFSET ?", (*args, keep)))
    return sorted(picked)


def prune_traffic(conn: sqlite3.Connection, *, before: float | None = None, keep: int | None = None,
                  app: str | None = None, chunk: int = 500) -> dict[str, int]:
    """Delete the recorded exchanges (of ``app``) made before ``before`` and those past the newest ``keep``, with
    everything of theirs: scores, calls, errors, traces, re-scores, full-text entries, their feedback and the
    feedback of sessions none of whose exchanges is left; then the finished gateway runs left empty. One short
    transaction per ``chunk`` exchanges, so recording goes on meanwhile. What was deleted, counted."""
    pks = _pruned_pks(conn, before, keep, app)
    gone = {"exchanges": 0, "feedback": 0, "runs": 0}
    for start in range(0, len(pks), chunk):
        part = pks[start:start + chunk]
        marks = ",".join("?" * len(part))
        conn.execute("BEGIN IMMEDIATE")
        try:
            rows = conn.execute(f"SELECT pk, id, messages FROM rollout WHERE pk IN ({marks})", part).fetchall()
            conn.executemany("INSERT INTO rollout_fts (rollout_fts, rowid, text) VALUES ('delete', ?, ?)",
                             [(pk, searchable_text(orjson.loads(messages or "[]"))) for pk, _, messages in rows])
            for table in _ROLLOUT_PARTS:
                conn.execute(f"DELETE FROM {table} WHERE rollout_pk IN ({marks})", part)
            conn.execute(f"DELETE FROM rollout WHERE pk IN ({marks})", part)
            ids = [rid for _, rid, _ in rows]
            gone["feedback"] += conn.execute(f"DELETE FROM feedback WHERE response_id IN ({','.join('?' * len(ids))})",
                                             ids).rowcount if ids else 0
            gone["exchanges"] += len(rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    if not pks:
        return gone
    conn.execute("BEGIN IMMEDIATE")
    try:
        left = set(map(tuple, conn.execute("SELECT DISTINCT substr(env_name, 9), json_extract(state, '$.session') FROM rollout "
                                "WHERE source = 'traffic'").fetchall()))
        orphans = [(fid,) for fid, fapp, session in conn.execute(
            "SELECT id, app, session FROM feedback WHERE response_id IS NULL AND session IS NOT NULL")
            if (fapp, session) not in left]
        conn.executemany("DELETE FROM feedback WHERE id = ?", orphans)
        gone["feedback"] += len(orphans)
        empty = [r[0] for r in conn.execute(
            "SELECT id FROM run WHERE kind = 'gateway' AND status != 'running' AND NOT EXISTS "
            "(SELECT 1 FROM rollout r WHERE r.run_id = run.id)")]
        for table in ("cost_event", "train_metric"):
            conn.executemany(f"DELETE FROM {table} WHERE run_id = ?", [(r,) for r in empty])
        conn.executemany("DELETE FROM run WHERE id = ?", [(r,) for r in empty])
        gone["runs"] = len(empty)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return gone


__all__ = ["add_feedback", "feedback_for", "prune_traffic", "recent_traffic", "traffic_answer", "traffic_exchanges",
           "traffic_rollout_app"]
