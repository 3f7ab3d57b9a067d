"""Costs: the cost ledger by run, provider or day, its totals, budgets as progress bars — each
launched run's spend against its ``--budget`` and this month's spend against ``[budget] monthly_usd`` (read
from the settings file each time the ledger is, so a budget set in Settings or in the file shows at once) —
and the forecast of a planned run: a run config's plan (``workbench launch --plan``) against what is
left of the month (:func:`workbench_cloud.forecast.cloud_forecast`)."""

from __future__ import annotations

import re
import time
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Header, Input, Label, ProgressBar, Select, Static
from workbench_app.config import config_path, load_config
from workbench_app.format import fcost, for_app, fpath, ftime
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.forecast import ConfigPicker, forecast_text
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import notify_ui, post_ui

from workbench.config.settings import Budget
from workbench.cost.ledger import GROUPS, KINDS, Ledger, RunBudget, read_ledger

COSTS_POLL_S = 5.0  # how often the ledger is re-read while the screen is shown
KIND_TITLES = {"api_tokens": "api tokens", "gpu_seconds": "gpu", "sandbox_seconds": "sandbox"}
FORECAST_DEBOUNCE_S = 0.25
FORECAST_HINT = "pick a bundled run config or type a path: its plan's total $ and wall time against this month"


def _bar_id(run_id: str) -> str:
    return "budget-" + re.sub(r"[^A-Za-z0-9_-]", "_", run_id)


def _budget_row(label: Text, bar_id: str, spent: float, budget: float | None) -> Horizontal:
    widgets: list[Label | ProgressBar] = [Label(label, classes="budget-label")]
    if budget is not None:
        bar = ProgressBar(total=budget, show_eta=False, id=bar_id, classes="budget-bar")
        bar.progress = spent
        widgets.append(bar)
    return Horizontal(*widgets, classes="budget-row")


def run_label(r: RunBudget) -> Text:
    t = Text(f"{r.run_id}", style="bold")
    t.append(f"  {r.env} ({r.status})  ", style="dim")
    if r.budget_usd is None:
        t.append(f"{fcost(r.spent_usd)} spent, no budget")
        return t
    t.append(f"{fcost(r.spent_usd)} of {fcost(r.budget_usd)}")
    if r.spent_usd >= r.budget_usd:
        t.append("  budget reached", style="bold red")
    return t


class CostsScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Costs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("g", "cycle_group", "Group by run/provider/day", id="costs.group"),
        Binding("r", "refresh", "Refresh", id="costs.refresh"),
        Binding("f", "forecast", "Forecast a run", id="costs.forecast"),
    ]
    DEFAULT_CSS = """
    #forecast { height: auto; border: round $primary-darken-1; padding: 0 1; }
    #forecast-text { height: auto; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.group = GROUPS[0]
        self.ledger: Ledger | None = None
        self.forecast: Any = None  # the last (config, CloudForecast | error message) shown
        self._forecast_gen = 0
        self._forecast_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the cost ledger…", id="costs-totals")
        yield VerticalScroll(id="budgets")
        with Vertical(id="forecast"):
            yield ConfigPicker("forecast-config", "or a run config TOML path")
            yield Static(Text(FORECAST_HINT, style="dim"), id="forecast-text")
        yield Static("", id="costs-group")
        yield RowTable(id="costs-table", cursor_type="row", zebra_stripes=True)
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.query_one("#forecast", Vertical).border_title = "forecast of a planned run"
        self.set_interval(COSTS_POLL_S, self._tick)
        self.action_refresh()

    def on_screen_resume(self) -> None:
        if self.is_mounted and self.ledger is not None:
            self.action_refresh()

    def _tick(self) -> None:
        if self.app.screen is self:
            self.action_refresh()

    def action_refresh(self) -> None:
        self._load(self.group)
        if self.forecast is not None:  # this month's spend moves: so does what is left for the plan
            self._replan()

    def action_cycle_group(self) -> None:
        self.group = GROUPS[(GROUPS.index(self.group) + 1) % len(GROUPS)]
        self.query_one("#costs-group", Static).update(f"by {self.group}: reading…")
        self.action_refresh()

    class LedgerRead(Message, bubble=False):
        """The ledger, and the budgets the settings file holds as it was read."""

        def __init__(self, ledger: Ledger, budget: Budget) -> None:
            super().__init__()
            self.ledger, self.budget = ledger, budget

    class ForecastMade(Message, bubble=False):
        """The forecast of ``config`` (a ``cloud_forecast`` result, or the message that says why there is none)."""

        def __init__(self, gen: int, config: str, result: Any) -> None:
            super().__init__()
            self.gen, self.config, self.result = gen, config, result

    @work(thread=True, exit_on_error=False, exclusive=True, group="costs")
    def _load(self, group: str) -> None:
        try:
            ledger = read_ledger(self.workbench_app.store.get().conn, group)
        except Exception as e:
            notify_ui(self, f"reading the cost ledger failed: {e}", severity="error")
            return
        post_ui(self, self.LedgerRead(ledger, load_config().budget))  # a bad value: no budget (the app said why)

    @on(LedgerRead)
    async def _show(self, event: LedgerRead) -> None:
        ledger = event.ledger
        if ledger.group != self.group:
            return  # a newer grouping was asked for meanwhile
        self.workbench_app.config.budget = event.budget
        totals = Text("total ", style="bold")
        totals.append(f"{fcost(ledger.total_usd)} over {ledger.total_events} cost events   ")
        totals.append("  ·  ".join(f"{KIND_TITLES[k]} {fcost(ledger.by_kind[k])}" for k in KINDS), style="dim")
        self.query_one("#costs-totals", Static).update(totals)
        await self._show_budgets(ledger)
        self._show_table(ledger)
        self.ledger = ledger  # last: once it is set, all of it is on screen

    async def _show_budgets(self, ledger: Ledger) -> None:
        box = self.query_one("#budgets", VerticalScroll)
        monthly = self.workbench_app.config.monthly_budget_usd
        month = time.strftime("%B %Y", time.localtime(ledger.month_start))
        label = Text(f"this month ({month})", style="bold")
        if monthly is None:
            label.append(f"  {fcost(ledger.month_usd)} spent; set [budget] monthly_usd in "
                         f"{fpath(config_path())} for a bar")
        else:
            label.append(f"  {fcost(ledger.month_usd)} of {fcost(monthly)}")
            if ledger.month_usd >= monthly:
                label.append("  budget reached", style="bold red")
        rows = [_budget_row(label, "budget-month", ledger.month_usd, monthly)]
        rows += [_budget_row(run_label(r), _bar_id(r.run_id), r.spent_usd, r.budget_usd) for r in ledger.runs]
        if not ledger.runs:
            rows.append(Horizontal(Label(Text("no launched runs: press 1, pick an environment and press L",
                                              style="dim"), classes="budget-label"), classes="budget-row"))
        await box.remove_children()
        await box.mount_all(rows)

    def _show_table(self, ledger: Ledger) -> None:
        others = [g for g in GROUPS if g != ledger.group]
        self.query_one("#costs-group", Static).update(
            Text.assemble(("by " + ledger.group, "bold"), f"  ({len(ledger.rows)} rows; g: by {' / by '.join(others)})"))
        table = self.query_one("#costs-table", DataTable)
        table.clear(columns=True)
        table.add_column(ledger.group, key="key")
        table.add_column("events", key="events")
        for k in KINDS:
            table.add_column(KIND_TITLES[k], key=k)
        table.add_column("total", key="total")
        table.add_column("last", key="last")
        for row in ledger.rows:
            key = row.key or ("(no run)" if ledger.group == "run" else "-")
            table.add_row(key, str(row.events), *(fcost(row.by_kind[k]) for k in KINDS),
                          Text(fcost(row.usd), style="bold"), ftime(row.last_at, short=True), key=row.key)

    # -- the forecast of a planned run -----------------------------------------------------------
    def action_forecast(self) -> None:
        self.query_one("#forecast-config-pick", Select).focus()

    @on(Input.Changed, "#forecast-config")
    def _config_changed(self) -> None:
        if self._forecast_timer is not None:
            self._forecast_timer.stop()
        self._forecast_timer = self.set_timer(FORECAST_DEBOUNCE_S, self._replan)

    def _replan(self) -> None:
        self._forecast_gen += 1
        config = self.query_one("#forecast-config", Input).value.strip()
        if not config:
            self.forecast = None
            self.query_one("#forecast-text", Static).update(Text(FORECAST_HINT, style="dim"))
            return
        self._plan(self._forecast_gen, config)

    @work(thread=True, exit_on_error=False, exclusive=True, group="costs-forecast")
    def _plan(self, gen: int, config: str) -> None:
        from pathlib import Path

        from workbench_cloud.forecast import cloud_forecast

        from workbench.errors import WorkbenchError

        try:
            if not Path(config).expanduser().is_file():
                raise FileNotFoundError(f"config file {config} does not exist")
            result: Any = cloud_forecast(self.workbench_app.store.get().conn, Path(config).expanduser())
        except (WorkbenchError, FileNotFoundError) as e:
            result = for_app(e)
        except Exception as e:  # never a crash: the message goes where the forecast would be
            result = f"{type(e).__name__}: {e}"
        post_ui(self, self.ForecastMade(gen, config, result))

    @on(ForecastMade)
    def _show_forecast(self, event: ForecastMade) -> None:
        gen, config, result = event.gen, event.config, event.result
        if gen != self._forecast_gen or not self.is_attached:
            return
        self.forecast = (config, result)
        text = Text(f"no forecast: {result}", style="bold red") if isinstance(result, str) else forecast_text(
            result, config)
        self.query_one("#forecast-text", Static).update(text)
