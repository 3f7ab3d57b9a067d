"""What a planned run will cost, and whether the budgets allow it — the numbers the app's Launch
dialog and Costs screen show before anything starts.

Nothing here estimates on its own account: a cloud forecast is :func:`workbench_cloud.plan.make_plan`
(what ``workbench launch --plan`` prints) judged by the very checks ``workbench launch`` refuses with
(:func:`~workbench_cloud.plan.check_budget`, :func:`workbench.cost.budgets.check_monthly`, the memory fit);
a local forecast is the local backend's cost formula — device-seconds × the local price
(``workbench gpu-prices set local cpu``) — with device-seconds per step measured from the cost
ledgers of earlier local launches, and the cap its budget guard will enforce
(:func:`workbench.cost.budgets.run_cap`).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench_cloud.local_price import LOCAL_DEVICE, LOCAL_PROVIDER, local_price
from workbench_cloud.plan import Plan, check_budget, load_launch_config, make_plan

from workbench.cost.budgets import check_monthly, month_spent_usd, monthly_budget_usd, run_cap
from workbench.errors import ConfigError
from workbench.store.costs import launched_train_usage

CONFIGS_DIR = Path(__file__).with_name("configs")
PLANNED_ENV = "(planned run)"  # the plan does not depend on the environment, only the config's name needs one
DOES_NOT_FIT = ("the plan does not fit in GPU memory (see `--plan`); add nodes, raise cloud.context_parallel or "
                "shorten cloud.context_length")
MEASURED_RUNS = 5  # how many recent local launches the device-seconds per step is averaged over


def bundled_configs() -> list[Path]:
    """The run configs shipped with Workbench (``cloud_runtime/configs/*.toml``)."""
    return sorted(CONFIGS_DIR.glob("*.toml"))


@dataclass(slots=True)
class Month:
    """This calendar month against ``[budget] monthly_usd`` (None: no monthly budget)."""

    budget_usd: float | None
    spent_usd: float

    @property
    def left_usd(self) -> float | None:
        return None if self.budget_usd is None else max(0.0, self.budget_usd - self.spent_usd)


def this_month(conn: sqlite3.Connection) -> Month:
    return Month(monthly_budget_usd(), month_spent_usd(conn))


@dataclass(slots=True)
class CloudForecast:
    plan: Plan
    month: Month
    refusal: str | None  # the sentence `workbench launch` refuses this plan with; None: it may launch
    launch: Any = None  # the LaunchConfig planned (what a confirmed launch runs)
    budget_error: ConfigError | None = None  # the budgets' refusal (the run's or the month's cap), as raised

    @property
    def budget_problem(self) -> str | None:
        """The budgets' part of the refusal, as a sentence (the error's fields by their own names)."""
        return None if self.budget_error is None else str(self.budget_error)

    @property
    def within_run_budget(self) -> bool | None:
        return None if self.plan.budget_usd is None else self.plan.total_usd <= self.plan.budget_usd

    @property
    def within_month(self) -> bool | None:
        left = self.month.left_usd
        return None if left is None else self.plan.total_usd <= left


def cloud_forecast(conn: sqlite3.Connection, config_file: str | Path | None, *, env: str | None = None,
                   max_steps: int | None = None, budget_usd: float | None = None,
                   overrides: dict[str, Any] | None = None, require_env: bool = False) -> CloudForecast:
    """The plan of ``config_file`` (with ``--max-steps``/``--budget`` applied as the CLI does) and its verdict.
    A config the plan cannot use raises :class:`ConfigError` with the CLI's message. Without ``env`` the
    config's own ``env.name`` is planned, else (unless ``require_env``) a placeholder."""
    overrides = dict(overrides or {})
    if max_steps is not None:
        overrides["loop.max_steps"] = max_steps
    cfg = load_launch_config(config_file, overrides, env if require_env else env or PLANNED_ENV)
    plan = make_plan(cfg, budget_usd=budget_usd, max_steps=max_steps)
    budget_error = None
    try:
        check_budget(plan)
        check_monthly(conn, plan.total_usd)
    except ConfigError as e:
        budget_error = e
    refusal = str(budget_error) if budget_error is not None else (None if plan.fits else DOES_NOT_FIT)
    return CloudForecast(plan, this_month(conn), refusal, cfg, budget_error)


@dataclass(slots=True)
class LocalForecast:
    max_steps: int
    usd_per_s: float  # the local device price
    s_per_step: float | None  # device-seconds per step, measured (None: no finished local launch yet)
    measured_runs: int
    cap_usd: float | None  # what the budget guard stops the run at (None: no cap)
    cap_why: str
    month: Month
    refusal: str | None  # the sentence `workbench launch --backend local` refuses with

    @property
    def device_s(self) -> float | None:
        return None if self.s_per_step is None else self.s_per_step * self.max_steps

    @property
    def total_usd(self) -> float | None:
        """Device-seconds × price; exactly 0 at a zero price, unknown before any measurement."""
        if self.usd_per_s == 0:
            return 0.0
        return None if self.device_s is None else self.device_s * self.usd_per_s

    @property
    def steps_within_cap(self) -> int | None:
        """How many steps the cap pays for, when the estimate exceeds it (else None)."""
        total = self.total_usd
        if self.cap_usd is None or total is None or total <= self.cap_usd or not self.s_per_step:
            return None
        return int(self.cap_usd / (self.s_per_step * self.usd_per_s))


def measured_step_s(conn: sqlite3.Connection, limit: int = MEASURED_RUNS) -> tuple[float | None, int]:
    """Device-seconds per optimizer step over the last ``limit`` finished local launches that made
    steps: their ledgers' ``gpu_seconds`` (startup included) over their steps. ``(None, 0)`` if none."""
    rows = launched_train_usage(conn, LOCAL_PROVIDER)
    used: list[tuple[float, int]] = []
    for config, device_s, steps in rows:
        try:
            launch = json.loads(config or "{}").get("launch") or {}
        except (ValueError, AttributeError):
            continue
        if isinstance(launch, dict) and launch.get("backend") == "local" and steps and device_s:
            used.append((float(device_s), int(steps)))
        if len(used) == limit:
            break
    if not used:
        return None, 0
    return sum(d for d, _ in used) / sum(s for _, s in used), len(used)


def local_forecast(conn: sqlite3.Connection, max_steps: int, budget_usd: float | None) -> LocalForecast:
    s_per_step, runs = measured_step_s(conn)
    refusal = None
    try:
        cap, why = run_cap(conn, budget_usd)
    except ConfigError as e:
        cap, why, refusal = None, "", str(e)
    return LocalForecast(max_steps, local_price(), s_per_step, runs, cap, why, this_month(conn), refusal)


def local_price_hint() -> str:
    return f"workbench gpu-prices set {LOCAL_PROVIDER} {LOCAL_DEVICE} --per-second USD"
