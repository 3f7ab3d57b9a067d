"""The store's run listing: runs newest first, of the kinds asked for, a probe's policies as one entry.

``list_runs`` reads ``run`` along ``ix_run_kind_created`` (kind, created_at), so a store full of probe
runs costs a listing of the user's own runs nothing. The runs of one probe or ``validate`` (one
pipeline id in ``config.pipeline.id``) are listed as one entry whose id is the pipeline id;
``pipeline_members`` opens it again (``workbench runs PIPELINE``, ``workbench show PIPELINE``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import orjson

from workbench.store.run_kinds import PIPELINE_KINDS, RUN_KINDS, USER_KINDS

_COLS = ("id", "kind", "env_name", "env_version", "model", "status", "error", "n_tasks", "rollouts_per_task",
         "created_at", "finished_at", "summary", "pipeline_id")
_SELECT = (f"SELECT {', '.join(_COLS[:-1])}, CASE WHEN kind IN ({', '.join(repr(k) for k in PIPELINE_KINDS)}) "
           "THEN json_extract(config, '$.pipeline.id') END FROM run")
_FINISHED = ("completed", "failed", "interrupted")


def _cur(conn: sqlite3.Connection) -> sqlite3.Cursor:
    cur = conn.cursor()
    cur.row_factory = None
    return cur


def kinds_clause(kinds: Iterable[str] | None, column: str = "kind") -> tuple[str, tuple[str, ...]]:
    """``column IN (...)`` for ``kinds`` and its arguments; ``("", ())`` when every kind is asked for (None or
    all of :data:`RUN_KINDS`)."""
    if kinds is None:
        return "", ()
    ks = tuple(dict.fromkeys(kinds))
    if set(RUN_KINDS) <= set(ks):
        return "", ()
    if not ks:
        return "0", ()
    return f"{column} IN ({', '.join('?' * len(ks))})", ks


def _counted(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    """A run row with ``rollouts``, ``errors`` and ``mean_reward``: from the summary a finished run stored, else
    counted on ix_rollout_run_reward alone (errors = rollouts without a reward, which is how the engine stores a
    failure; a gateway's recorded traffic is never scored, so it has none)."""
    r = dict(zip(_COLS, row, strict=True))
    r.pop("pipeline_id")
    s = orjson.loads(r.pop("summary") or "{}")
    if r["status"] in _FINISHED and {"rollouts", "errors", "mean_reward"} <= s.keys():
        r.update(rollouts=s["rollouts"], errors=s["errors"], mean_reward=s["mean_reward"])
    else:
        n, scored, mean = cur.execute("SELECT COUNT(*), COUNT(reward), AVG(reward) FROM rollout WHERE run_id = ?",
                                      (r["id"],)).fetchone()
        r.update(rollouts=n, errors=0 if r["kind"] == "gateway" else n - scored, mean_reward=mean)
    return r


def _pipeline_entry(pipeline_id: str, members: list[dict[str, Any]]) -> dict[str, Any]:
    """One listing entry for the runs of one probe (``members``, oldest first)."""
    first = members[0]
    statuses = {m["status"] for m in members}
    status = next((s for s in ("running", "failed", "interrupted") if s in statuses), "completed")
    finished = [m["finished_at"] for m in members if m["finished_at"] is not None]
    return {"id": pipeline_id, "kind": first["kind"], "env_name": first["env_name"],
            "env_version": first["env_version"], "model": "probe:*", "status": status, "error": "",
            "n_tasks": first["n_tasks"], "rollouts_per_task": first["rollouts_per_task"],
            "created_at": first["created_at"], "finished_at": max(finished) if status != "running" and finished else None,
            "rollouts": sum(m["rollouts"] for m in members), "errors": sum(m["errors"] for m in members),
            "mean_reward": None,  # each policy earns its own: the entry opens them
            "pipeline": pipeline_id, "members": [m["id"] for m in members],
            "policies": [m["model"].removeprefix("probe:") for m in members]}


def list_runs(conn: sqlite3.Connection, limit: int = 50, env: str | None = None,
              kinds: Iterable[str] | None = USER_KINDS) -> list[dict[str, Any]]:
    """Runs of ``kinds`` (None: every kind) newest first, each with ``rollouts``, ``errors`` and ``mean_reward``;
    the runs of one probe or ``validate`` are one entry (id: the pipeline id, ``members``: its runs oldest first,
    ``policies``: their policies, ``model``: ``probe:*``, created when its first run was)."""
    cur = _cur(conn)
    clause, args = kinds_clause(kinds)
    where = [c for c in (clause, "env_name = ?" if env is not None else "") if c]
    sql = f"{_SELECT}{' WHERE ' + ' AND '.join(where) if where else ''} ORDER BY created_at DESC"
    entries: list[dict[str, Any] | str] = []  # a run, or the pipeline id whose entry goes there
    groups: dict[str, list[tuple[Any, ...]]] = {}
    for row in cur.execute(sql, (*args, *([env] if env is not None else []))):
        pid = row[-1]
        if pid is None:
            if len(entries) >= limit:
                break
            entries.append(dict(zip(_COLS, row, strict=True)))
        elif pid in groups:
            groups[pid].append(row)
        else:
            if len(entries) >= limit:
                break
            groups[pid] = [row]
            entries.append(pid)
    out = []
    for e in entries:
        if isinstance(e, str):
            members = [_counted(cur, row) for row in _member_rows(cur, e, groups[e])]
            out.append(_pipeline_entry(e, members))
        else:
            out.append(_counted(cur, tuple(e.values())))
    return out


def _member_rows(cur: sqlite3.Cursor, pipeline_id: str, seen: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Every run of the pipeline, oldest first: those the listing read and any older ones it stopped before."""
    rows = {r[0]: r for r in seen}
    oldest = min(r[_COLS.index("created_at")] for r in seen)
    kinds = ", ".join("?" * len(PIPELINE_KINDS))
    for row in cur.execute(f"{_SELECT} WHERE kind IN ({kinds}) AND created_at <= ? AND "
                           "json_extract(config, '$.pipeline.id') = ?", (*PIPELINE_KINDS, oldest, pipeline_id)):
        rows.setdefault(row[0], row)
    return sorted(rows.values(), key=lambda r: (r[_COLS.index("created_at")], r[0]))


def pipeline_members(conn: sqlite3.Connection, pipeline_id: str) -> dict[str, Any] | None:
    """The listing entry of a probe's pipeline (:func:`list_runs`'s) with ``runs``: each member run, oldest first,
    with its ``policy``, or None when no probe or validate run carries ``pipeline_id``."""
    cur = _cur(conn)
    kinds = ", ".join("?" * len(PIPELINE_KINDS))
    rows = cur.execute(f"{_SELECT} WHERE kind IN ({kinds}) AND json_extract(config, '$.pipeline.id') = ? "
                       "ORDER BY created_at, id", (*PIPELINE_KINDS, pipeline_id)).fetchall()
    if not rows:
        return None
    members = [_counted(cur, row) for row in rows]
    for m in members:
        m["policy"] = m["model"].removeprefix("probe:")
    return {**_pipeline_entry(pipeline_id, members), "runs": members}


__all__ = ["kinds_clause", "list_runs", "pipeline_members"]
