"""Spending limits: a per-run budget (``--budget``, ``[cloud] budget_usd``) and a monthly one
(``[budget] monthly_usd`` in ``~/.config/workbench/tui.toml``, shared with the app's Costs screen).
A launch is refused when its estimate does not fit what is left of the month, and a launched run's
budget guard stops it at whichever cap comes first."""

from __future__ import annotations

import sqlite3
import time

from workbench.errors import ConfigError
from workbench.store.costs import spent_since, spent_usd

__all__ = ["check_monthly", "month_spent_usd", "month_start", "monthly_budget_usd", "run_cap", "spent_usd"]


def month_start(now: float | None = None) -> float:
    """The first second of the current calendar month, local time."""
    t = time.localtime(time.time() if now is None else now)
    return time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))


def monthly_budget_usd() -> float | None:
    """``[budget] monthly_usd`` from the settings file, or None when none is set."""
    from workbench.config.settings import load_settings

    return load_settings(strict=True).monthly_budget_usd


def month_spent_usd(conn: sqlite3.Connection, now: float | None = None) -> float:
    """Everything the cost ledger recorded since the start of this month."""
    return spent_since(conn, month_start(now))


def run_cap(conn: sqlite3.Connection, run_budget: float | None) -> tuple[float | None, str]:
    """The cap a launched run's budget guard enforces: its own budget or what is left of the
    month, whichever is lower (None: no cap); and a sentence saying which."""
    monthly = monthly_budget_usd()
    if monthly is None:
        return run_budget, f"run budget ${run_budget:.2f}" if run_budget is not None else "no budget"
    left = max(0.0, monthly - month_spent_usd(conn))
    if left <= 0:
        raise ConfigError(f"the monthly budget of ${monthly:.2f} is spent (${month_spent_usd(conn):.2f} this "
                          "month); raise budget.monthly_usd in tui.toml to launch more")
    if run_budget is None or left < run_budget:
        return left, f"${left:.2f} left of the ${monthly:.2f} monthly budget"
    return run_budget, f"run budget ${run_budget:.2f}"


def check_monthly(conn: sqlite3.Connection, estimate_usd: float) -> None:
    """Refuse a planned run whose estimate exceeds what is left of the monthly budget."""
    monthly = monthly_budget_usd()
    if monthly is None:
        return
    spent = month_spent_usd(conn)
    if spent + estimate_usd > monthly:
        raise ConfigError(f"the plan's estimate ${estimate_usd:,.2f} exceeds what is left of the monthly budget: "
                          f"${max(0.0, monthly - spent):,.2f} of ${monthly:,.2f} (${spent:,.2f} spent this month)")
