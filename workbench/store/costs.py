"""The cost ledger's rows (``cost_event``): recording an event, a run's and a month's spend, spend
grouped by run, provider or day, and the launched runs whose spend is held to a budget. The ledger's
figures are made in ``workbench/cost``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: How ``cost_event`` rows are grouped, per grouping of the ledger.
GROUP_KEYS = {
    "run": "COALESCE(run_id, '')",
    "provider": "COALESCE(NULLIF(provider, ''), '-')",
    "day": "date(created_at, 'unixepoch', 'localtime')",
}
_INSERT = ("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
           "VALUES (?, ?, ?, ?, ?, ?, ?, ?)")


def add_cost_event(conn: sqlite3.Connection, run_id: str | None, kind: str, *, provider: str, model: str,
                   quantity: float, unit: str, usd: float, created_at: float | None = None) -> None:
    """Record one cost event (``created_at``: now unless given)."""
    conn.execute(_INSERT, (run_id, kind, provider, model, quantity, unit, usd,
                           time.time() if created_at is None else created_at))


def add_cost_event_to(db: Path | str, run_id: str | None, kind: str, *, provider: str, model: str,
                      quantity: float, unit: str, usd: float) -> None:
    """Record one cost event in the store file ``db``, on a connection of its own, committed."""
    con = sqlite3.connect(db, timeout=30.0)
    try:
        con.execute(_INSERT, (run_id, kind, provider, model, quantity, unit, usd, time.time()))
        con.commit()
    finally:
        con.close()


def spent_usd(conn: sqlite3.Connection, run_id: str) -> float:
    """A run's spend so far: its own cost events and those of its held-out evals (``RUN-eval*``)."""
    like = run_id.replace("_", "\\_").replace("%", "\\%") + "-eval%"
    return float(conn.execute("SELECT COALESCE(SUM(usd), 0) FROM cost_event WHERE run_id = ? OR run_id LIKE ? "
                              "ESCAPE '\\'", (run_id, like)).fetchone()[0])


def spent_since(conn: sqlite3.Connection, start: float) -> float:
    """Everything the cost ledger recorded since ``start`` (a Unix time)."""
    return float(conn.execute("SELECT COALESCE(SUM(usd), 0) FROM cost_event WHERE created_at >= ?",
                              (start,)).fetchone()[0])


def _by_kind(kinds: Sequence[str]) -> str:
    return ", ".join(f"COALESCE(SUM(CASE WHEN kind = '{k}' THEN usd END), 0)" for k in kinds)


def spend_groups(conn: sqlite3.Connection, group: str, kinds: Sequence[str]) -> list[tuple[Any, ...]]:
    """Per group of :data:`GROUP_KEYS` ``group``: ``(key, events, usd of each of kinds..., total, first,
    last)``, biggest first (by day: newest first)."""
    order = "g DESC" if group == "day" else "total DESC, g"
    return conn.execute(f"SELECT {GROUP_KEYS[group]} AS g, COUNT(*), {_by_kind(kinds)}, COALESCE(SUM(usd), 0) AS "
                        f"total, MIN(created_at), MAX(created_at) FROM cost_event GROUP BY g ORDER BY {order}"
                        ).fetchall()


def spend_totals(conn: sqlite3.Connection, kinds: Sequence[str], since: float) -> tuple[Any, ...]:
    """``(events, usd, usd of each of kinds..., usd since since)`` over the whole ledger."""
    return conn.execute(f"SELECT COUNT(*), COALESCE(SUM(usd), 0), {_by_kind(kinds)}, "
                        "COALESCE(SUM(CASE WHEN created_at >= ? THEN usd END), 0) FROM cost_event",
                        (since,)).fetchone()


def launched_runs(conn: sqlite3.Connection, limit: int) -> list[tuple[Any, ...]]:
    """``(id, env_name, status, config)`` of the runs whose config has a ``launch`` table, newest first."""
    return conn.execute("SELECT id, env_name, status, config FROM run WHERE config LIKE '%\"launch\"%' "
                        "ORDER BY created_at DESC LIMIT ?", (limit,)).fetchall()


def launched_train_usage(conn: sqlite3.Connection, provider: str) -> list[tuple[Any, ...]]:
    """``(config, gpu-seconds of provider, last step)`` of the finished launched training runs, newest first."""
    return conn.execute(
        "SELECT r.config, (SELECT COALESCE(SUM(c.quantity), 0) FROM cost_event c WHERE c.run_id = r.id AND "
        "c.kind = 'gpu_seconds' AND c.provider = ?), (SELECT MAX(m.step) FROM train_metric m WHERE "
        "m.run_id = r.id AND m.kind = 'step') FROM run r WHERE r.kind = 'train' AND "
        "r.status IN ('completed', 'stopped') AND r.config LIKE '%\"launch\"%' ORDER BY r.created_at DESC",
        (provider,)).fetchall()


__all__ = ["GROUP_KEYS", "add_cost_event", "add_cost_event_to", "launched_runs", "launched_train_usage",
           "spend_groups", "spend_totals", "spent_since", "spent_usd"]
