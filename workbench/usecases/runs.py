"""Reading runs: the listing of the kinds asked for, a run or a probe opened, a run's rollouts, a search.

``workbench runs``/``show``, the ``list_runs`` and ``search_rollouts`` tools and the app call these, so a
listing shows the same runs wherever it is asked for: the user's own (:data:`~workbench.runs.kinds.USER_KINDS`)
unless other kinds are named (``--kind``, ``kinds``; ``all`` for every kind).
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterable
from typing import Any

from workbench.errors import OptionError
from workbench.runs.kinds import USER_KINDS, parse_kinds
from workbench.store.queries import RolloutFilter, count_rollouts, page_rollouts
from workbench.store.run_listing import list_runs as _list_runs
from workbench.store.run_listing import pipeline_members

#: How ``show RUN`` orders a run's rollouts, and the store order each is.
ROLLOUT_ORDERS: dict[str, str] = {"newest": "-created", "oldest": "created", "worst": "reward", "best": "-reward"}
PREVIEW_CHARS = 60  # a rollout's completion as listed: its first line, cut here


def kinds_of(values: str | Iterable[str] | None, field: str = "RunFilter.kinds") -> tuple[str, ...]:
    """The kinds a face was given (repeated or comma-separated, ``all``); the user's kinds when none."""
    return parse_kinds(values, field)


def list_runs(conn: sqlite3.Connection, *, limit: int = 30, env: str | None = None,
              kinds: Iterable[str] | None = USER_KINDS) -> list[dict[str, Any]]:
    """Runs of ``kinds`` newest first (a probe's policies as one entry); see
    :func:`workbench.store.run_listing.list_runs`."""
    if limit < 1:
        raise OptionError("RunFilter.limit", limit, "at least 1")
    return _list_runs(conn, limit=limit, env=env, kinds=kinds)


def open_pipeline(conn: sqlite3.Connection, pipeline_id: str) -> dict[str, Any] | None:
    """A probe's entry with its member ``runs`` (each with its ``policy`` and mean reward), or None."""
    return pipeline_members(conn, pipeline_id)


def preview_line(text: str, width: int = PREVIEW_CHARS) -> str:
    """A completion as one short line: whitespace runs made one space, cut at ``width`` with an ellipsis."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[:width - 1] + "…"


def rollout_row(summary: Any) -> dict[str, Any]:
    """One listed rollout (a :class:`~workbench.store.queries.RolloutSummary`) as plain data."""
    d = dataclasses.asdict(summary)
    return {"id": d["id"], "task": d["task_index"], "sample": d["sample_index"], "reward": d["reward"],
            "status": d["status"], "error_kind": d["error_kind"], "turns": d["turns"], "duration_s": d["duration_s"],
            "created_at": d["created_at"], "completion": preview_line(d["preview"])}


def run_rollouts(conn: sqlite3.Connection, run_id: str, *, order: str = "newest", limit: int = 20,
                 offset: int = 0) -> dict[str, Any]:
    """A page of one run's rollouts (``order``: newest, oldest, worst or best first) and how many it holds:
    ``{"rollouts": [...], "total", "order", "limit", "offset"}``."""
    if order not in ROLLOUT_ORDERS:
        raise OptionError("RunRollouts.sort", order, ", ".join(ROLLOUT_ORDERS))
    if limit < 1:
        raise OptionError("RunRollouts.limit", limit, "at least 1")
    if offset < 0:
        raise OptionError("RunRollouts.offset", offset, "0 or more")
    f = RolloutFilter(run_id=run_id, sort=ROLLOUT_ORDERS[order], kinds=None)
    rows = page_rollouts(conn, f, limit=limit, offset=offset)
    return {"rollouts": [rollout_row(r) for r in rows], "total": count_rollouts(conn, f), "order": order,
            "limit": limit, "offset": offset}


def search_rollouts(conn: sqlite3.Connection, f: RolloutFilter, *, limit: int = 20, offset: int = 0) -> dict[str, Any]:
    """A page of the rollouts matching ``f`` (of ``f.kinds`` of run) and their count."""
    rows = page_rollouts(conn, f, limit=limit, offset=offset)
    return {"rollouts": [dataclasses.asdict(x) for x in rows], "count": count_rollouts(conn, f), "limit": limit,
            "offset": offset, "kinds": list(f.kinds) if f.kinds is not None else None}


__all__ = ["PREVIEW_CHARS", "ROLLOUT_ORDERS", "kinds_of", "list_runs", "open_pipeline", "preview_line",
           "rollout_row", "run_rollouts", "search_rollouts"]
