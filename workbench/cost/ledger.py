"""The cost ledger (the store's ``cost_event`` table), for ``workbench costs`` and the app's Costs
screen: spend grouped by run, provider or day, totals, the month so far, and each launched run's
spend against its budget.

A launched run's spend is :func:`workbench.cost.budgets.spent_usd` (its own events and those of its
held-out evals, ``RUN-eval*``): the number ``workbench launch`` holds the budget guard to.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import orjson

from workbench.cost.budgets import month_start, spent_usd
from workbench.store import costs

KINDS = ("api_tokens", "gpu_seconds", "sandbox_seconds")
GROUPS = ("run", "provider", "day")  # the order the toggle key cycles through



@dataclass(slots=True)
class LedgerRow:
    key: str  # the run id, provider or day (YYYY-MM-DD)
    events: int
    by_kind: dict[str, float]  # USD per kind
    usd: float
    first_at: float
    last_at: float


@dataclass(slots=True)
class RunBudget:
    run_id: str
    env: str
    status: str
    spent_usd: float
    budget_usd: float | None  # None: launched without a budget

    @property
    def fraction(self) -> float | None:
        if self.budget_usd is None:
            return None
        return 1.0 if self.budget_usd <= 0 else self.spent_usd / self.budget_usd


@dataclass(slots=True)
class Ledger:
    group: str
    rows: list[LedgerRow]
    total_usd: float
    total_events: int
    by_kind: dict[str, float]
    month_usd: float
    month_start: float
    runs: list[RunBudget] = field(default_factory=list)


def ledger_rows(conn: sqlite3.Connection, group: str) -> list[LedgerRow]:
    """Spend grouped by ``group`` (run | provider | day): biggest first, by day newest first."""
    if group not in GROUPS:
        raise ValueError(f"unknown grouping {group!r}; one of {', '.join(GROUPS)}")
    out = []
    for row in costs.spend_groups(conn, group, KINDS):
        by_kind = dict(zip(KINDS, (float(v) for v in row[2:2 + len(KINDS)]), strict=True))
        out.append(LedgerRow(str(row[0]), int(row[1]), by_kind, float(row[2 + len(KINDS)]),
                             float(row[-2]), float(row[-1])))
    return out


def launched_runs(conn: sqlite3.Connection, limit: int = 200) -> list[RunBudget]:
    """Every launched run (its config has a ``launch`` table), newest first, with its spend and budget."""

    out = []
    rows = costs.launched_runs(conn, limit)
    for run_id, env, status, config in rows:
        try:
            launch = orjson.loads(config or "{}").get("launch")
        except orjson.JSONDecodeError:
            continue
        if not isinstance(launch, dict):
            continue
        budget = launch.get("budget_usd")
        budget = float(budget) if isinstance(budget, int | float) and not isinstance(budget, bool) else None
        out.append(RunBudget(run_id, env or "", status or "", spent_usd(conn, run_id), budget))
    return out


def read_ledger(conn: sqlite3.Connection, group: str, now: float | None = None) -> Ledger:
    rows = ledger_rows(conn, group)
    start = month_start(now)
    totals = costs.spend_totals(conn, KINDS, start)
    by_kind = dict(zip(KINDS, (float(v) for v in totals[2:2 + len(KINDS)]), strict=True))
    return Ledger(group, rows, float(totals[1]), int(totals[0]), by_kind, float(totals[-1]), start,
                  launched_runs(conn))

