"""One stored rollout in full: its row with the JSON fields parsed, its scores, model calls and errors."""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from workbench.errors import NotFoundError
from workbench.store.traffic import feedback_for


def _cur(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cur = conn.cursor()
    cur.row_factory = None
    return cur


def _loads(s: str | None, default: Any) -> Any:
    return default if not s else orjson.loads(s)


def get_rollout(conn: sqlite3.Connection, key: int | str) -> dict[str, Any]:
    """One rollout with parsed JSON fields, its scores (``rewards``, ``metrics``), model ``calls``
    and ``errors`` (and, for a gateway's exchange, its ``feedback``); ``key`` is a pk, an id or a unique prefix
    of an id."""
    cur = _cur(conn)
    cols = [r[1] for r in cur.execute("PRAGMA table_info(rollout)")]
    sel = f"SELECT {', '.join(cols)} FROM rollout WHERE"
    key = key if isinstance(key, int) else key.strip()
    row = cur.execute(f"{sel} {'pk' if isinstance(key, int) else 'id'} = ?", (key,)).fetchone()
    if row is None and isinstance(key, str) and key.isdigit():
        row = cur.execute(f"{sel} pk = ?", (int(key),)).fetchone()
    if row is None and isinstance(key, str) and key:  # a unique prefix of an id
        ids = [r[0] for r in cur.execute("SELECT id FROM rollout WHERE id >= ? ORDER BY id LIMIT 3", (key,))
               if r[0].startswith(key)]
        if len(ids) > 1:
            more = ", ..." if len(ids) > 2 else ""
            raise NotFoundError(f"{key!r} matches several rollouts ({ids[0]}, {ids[1]}{more}); give more of the id")
        row = cur.execute(f"{sel} id = ?", (ids[0],)).fetchone() if ids else None
    if row is None:
        raise NotFoundError(f"no rollout {key!r} in this store; rollout ids look like RUN.TASK.SAMPLE "
                            "(`workbench runs` lists the runs)")
    d = dict(zip(cols, row, strict=True))
    for k, default in (("prompt", ""), ("answer", None), ("info", {}), ("messages", []), ("state", {})):
        d[k] = _loads(d[k], default)
    d["rewards"], d["metrics"] = {}, {}
    for name, kind, value in cur.execute("SELECT name, kind, value FROM score WHERE rollout_pk = ? ORDER BY id",
                                         (d["pk"],)):
        d["rewards" if kind == "reward" else "metrics"][name] = value
    d["calls"] = [{"index": i, "n_messages": n, "finish_reason": fr, "prompt_tokens": pt, "completion_tokens": ct,
                   "latency_ms": lat, "extra": _loads(x, None)} for i, n, fr, pt, ct, lat, x in cur.execute(
        "SELECT idx, n_messages, finish_reason, prompt_tokens, completion_tokens, latency_ms, extra FROM model_call "
        "WHERE rollout_pk = ? ORDER BY idx, id", (d["pk"],))]
    d["errors"] = [{"kind": k, "source": s, "message": m} for k, s, m in cur.execute(
        "SELECT kind, source, message FROM rollout_error WHERE rollout_pk = ? ORDER BY id", (d["pk"],))]
    if d.get("source") == "traffic":  # what the product said of this answer (the gateway's POST /v1/feedback)
        session = d["state"].get("session") if isinstance(d["state"], dict) else None
        d["feedback"] = feedback_for(conn, d["id"], session if isinstance(session, str) else None)
    return d


__all__ = ["get_rollout"]
