"""The Costs screen: the ledger by run / provider / day, totals, and budget bars (launched runs, month)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, ProgressBar, Select, Static
from workbench_app.config import config_path, load_config
from workbench_app.main import WorkbenchApp
from workbench_app.screens.costs import CostsScreen
from workbench_cloud.plan import load_launch_config, make_plan

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.cost.ledger import month_start, read_ledger
from workbench.store import Store

# slow: the Costs screen over ledgers, budgets and forecasts, a Pilot run each
pytestmark = pytest.mark.slow

LAUNCHED, UNBUDGETED, EVAL = "0101-launch1", "0101-launch2", "0101-evalrun"


def build_store(path: Path) -> tuple[float, float]:
    """Runs and cost events over two days of this month (and one older event); returns the two days."""
    start = month_start()
    day1, day2 = start + 3600, start + 86400 + 3600
    with Store(path) as store:
        store.create_run(LAUNCHED, kind="train", env_name="adder", model="m", status="running", created_at=day1,
                         config={"launch": {"backend": "local", "bundle": "b", "bundle_hash": "h",
                                            "stream": {"kind": "dir", "path": "/nowhere"}, "budget_usd": 1.0,
                                            "workdir": "/nowhere"}})
        store.create_run(UNBUDGETED, kind="train", env_name="wordplay", model="m", status="completed",
                         created_at=day2, config={"launch": {"backend": "local", "budget_usd": None}})
        store.create_run(EVAL, kind="eval", env_name="adder", model="gpt", status="completed", created_at=day1)
        rows = [
            (LAUNCHED, "gpu_seconds", "local", "", 300.0, "seconds", 0.3, day1),
            (f"{LAUNCHED}-eval0", "api_tokens", "openai", "gpt", 1000.0, "tokens", 0.1, day2),
            (EVAL, "api_tokens", "openai", "gpt", 2500.0, "tokens", 0.25, day1),
            (EVAL, "sandbox_seconds", "anthropic", "", 50.0, "seconds", 0.05, day2),
            (UNBUDGETED, "gpu_seconds", "local", "", 200.0, "seconds", 0.2, day2),
            (EVAL, "api_tokens", "openai", "gpt", 9999.0, "tokens", 1.0, start - 2 * 86400),  # last month
        ]
        store.conn.executemany("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, "
                               "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        store.conn.commit()
    return day1, day2


@pytest.fixture
def cost_store(tmp_path: Path) -> Path:
    path = tmp_path / "costs" / "workbench.db"
    path.parent.mkdir(parents=True)
    build_store(path)
    return path


def _app(db: Path) -> WorkbenchApp:
    return WorkbenchApp(db, config=load_config(), discover_fn=list, watch=False, mode="costs")


def _cells(table: DataTable) -> dict[str, list[str]]:
    return {str(row[0]): [str(c) for c in row] for row in (table.get_row_at(i) for i in range(table.row_count))}


def _painted(app: Any, *fragments: str) -> str | None:
    """The screen's text once every fragment is on it (None before)."""
    text = screen_text(app)
    return text if all(f in text for f in fragments) else None


def test_ledger_queries(cost_store: Path) -> None:
    with Store(cost_store) as store:
        led = read_ledger(store.conn, "provider")
    assert led.total_usd == pytest.approx(1.9) and led.total_events == 6
    assert led.month_usd == pytest.approx(0.9)
    assert {r.key: round(r.usd, 4) for r in led.rows} == {"openai": 1.35, "local": 0.5, "anthropic": 0.05}
    assert [r.key for r in led.rows] == ["openai", "local", "anthropic"]  # biggest first
    runs = {r.run_id: r for r in led.runs}
    assert set(runs) == {LAUNCHED, UNBUDGETED}
    assert runs[LAUNCHED].spent_usd == pytest.approx(0.4) and runs[LAUNCHED].fraction == pytest.approx(0.4)
    assert runs[UNBUDGETED].budget_usd is None and runs[UNBUDGETED].fraction is None


async def test_costs_screen_groups_totals_and_budgets(cost_store: Path) -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text("[budget]\nmonthly_usd = 3.0\n")
    app = _app(cost_store)
    assert app.config.monthly_budget_usd == 3.0
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, CostsScreen)
        await wait_until(pilot, lambda: screen.ledger is not None, what="the ledger")
        bar = screen.query_one("#budget-0101-launch1", ProgressBar)
        assert bar.total == 1.0 and bar.progress == pytest.approx(0.4)
        assert bar.percentage == pytest.approx(0.4)
        month = screen.query_one("#budget-month", ProgressBar)
        assert month.total == 3.0 and month.percentage == pytest.approx(0.3)
        # The bars' percentages are painted on the next refresh after they mount.
        text = await wait_until(pilot, lambda: _painted(app, "40%", "30%"), what="the budget bars painted")
        for frag in ("total $1.9000 over 6 cost events", "api tokens $1.3500", "gpu $0.5000", "sandbox $0.0500",
                     "$0.4000 of $1.0000", "$0.9000 of $3.0000", "$0.2000 spent, no budget"):
            assert frag in text, frag
        assert not screen.query("#budget-0101-launch2")  # no budget: spend only, no bar

        table = screen.query_one("#costs-table", DataTable)
        rows = _cells(table)  # by run
        assert list(rows) == [EVAL, LAUNCHED, UNBUDGETED, f"{LAUNCHED}-eval0"]
        assert rows[EVAL][1:6] == ["3", "$1.2500", "$0.0000", "$0.0500", "$1.3000"]

        await pilot.press("g")
        await wait_until(pilot, lambda: screen.ledger.group == "provider", what="by provider")
        rows = _cells(table)
        assert list(rows) == ["openai", "local", "anthropic"]
        assert rows["local"][1:6] == ["2", "$0.0000", "$0.5000", "$0.0000", "$0.5000"]

        await pilot.press("g")
        await wait_until(pilot, lambda: screen.ledger.group == "day", what="by day")
        rows = _cells(table)
        assert len(rows) == 3  # two days this month and one last month, newest first
        totals = [r[5] for r in rows.values()]
        assert totals == ["$0.3500", "$0.5500", "$1.0000"]
        await pilot.press("g")
        await wait_until(pilot, lambda: screen.ledger.group == "run", what="back to by run")


async def test_costs_without_monthly_budget_and_key_4(cost_store: Path) -> None:
    app = WorkbenchApp(cost_store, config=load_config(), discover_fn=list, watch=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, CostsScreen)
        await wait_until(pilot, lambda: screen.ledger is not None, what="the ledger")
        assert not screen.query("#budget-month")
        assert "$0.9000 spent; set [budget] monthly_usd" in screen_text(app)
        await pilot.press("question_mark")
        actions = {desc for _, desc, _ in app.screen._rows}
        assert {"Group by run/provider/day", "Refresh", "Costs"} <= actions


async def test_costs_on_an_empty_store(tmp_path: Path) -> None:
    app = _app(tmp_path / "empty.db")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.ledger is not None, what="the ledger")
        text = await wait_until(pilot, lambda: _painted(app, "no launched runs"), what="the empty ledger painted")
        assert "total $0.0000 over 0 cost events" in text


def test_bad_monthly_budget_is_a_problem() -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text('[budget]\nmonthly_usd = "lots"\n')
    cfg = load_config()
    assert cfg.monthly_budget_usd is None and "budget.monthly_usd" in cfg.problems[0]


# -- the forecast of a planned run -----------------------------------------------------------------
BIG_CONFIG = Path(__file__).resolve().parents[2] / "cloud_runtime" / "configs" / "long-context-28node.toml"


def _forecast(screen: CostsScreen) -> str:
    return str(screen.query_one("#forecast-text", Static).render())


async def _forecast_of(pilot: Any, screen: CostsScreen, config: str) -> Any:
    return await wait_until(pilot, lambda: screen.forecast is not None and screen.forecast[0] == config
                            and screen.forecast[1], timeout=30, what=f"the forecast of {config}")


async def test_costs_forecast_of_a_bundled_config_against_the_month(cost_store: Path, tmp_path: Path) -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text("[budget]\nmonthly_usd = 50000\n")
    plan = make_plan(load_launch_config(BIG_CONFIG, {}, "x"))
    with Store(cost_store) as store:
        left = 50000 - read_ledger(store.conn, "run").month_usd
    fixed = plan.total_usd - plan.usd_per_step * plan.max_steps
    app = _app(cost_store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, CostsScreen)
        await wait_until(pilot, lambda: screen.ledger is not None, what="the ledger")
        assert "pick a bundled run config" in _forecast(screen)
        await pilot.press("f")
        assert isinstance(app.focused, Select) and app.focused.id == "forecast-config-pick"
        app.focused.value = str(BIG_CONFIG)  # what picking it from the list does
        result = await _forecast_of(pilot, screen, str(BIG_CONFIG))
        assert result.plan.total_usd == pytest.approx(plan.total_usd)
        text = _forecast(screen)
        for frag in ("long-context-28node.toml · modal 28 × 8 H200 = 224 GPUs · 1,000 steps",
                     f"${plan.total_usd:,.0f} · wall {plan.wall_s / 3600:,.1f} h ({plan.wall_s / 86400:.2f} days)",
                     f"${left:,.0f} left of $50,000: exceeded by ${plan.total_usd - left:,.0f}",
                     f"(the month covers {int((left - fixed) / plan.usd_per_step):,} steps)"):
            assert frag in text, (frag, text)
        assert "refused" not in text  # the month is the reason, already said

        path.write_text("[budget]\nmonthly_usd = 100000\n")
        await pilot.press("r")  # a refresh re-reads the month and re-judges the plan
        await wait_until(pilot, lambda: "within" in _forecast(screen), timeout=30, what="the new verdict")
        assert f"${100000 - (50000 - left) - plan.total_usd:,.0f} would remain" in _forecast(screen)


async def test_costs_forecast_errors_are_inline(cost_store: Path, tmp_path: Path) -> None:
    no_cloud = tmp_path / "plain.toml"
    no_cloud.write_text("[loop]\nmax_steps = 3\n")
    tight = tmp_path / "tight.toml"
    tight.write_text(BIG_CONFIG.read_text() + "budget_usd = 1000\n")  # appended to the [cloud] table
    app = _app(cost_store)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await wait_until(pilot, lambda: screen.ledger is not None, what="the ledger")
        field = screen.query_one("#forecast-config", Input)
        for config, fragment in ((str(tmp_path / "missing.toml"), "does not exist"),
                                 (str(no_cloud), "the plan needs cloud.params_b")):
            field.value = config
            result = await _forecast_of(pilot, screen, config)
            assert isinstance(result, str) and fragment in result
            assert f"no forecast: {result}" in _forecast(screen)
        field.value = str(tight)
        await _forecast_of(pilot, screen, str(tight))
        text = _forecast(screen)
        assert "no monthly budget to hold it against" in text
        assert "plan refused: estimated" in text and "exceeds the budget of $1,000" in text
        field.value = ""
        await wait_until(pilot, lambda: "pick a bundled run config" in _forecast(screen), what="the hint again")
        assert screen.forecast is None
