"""Compare in the app: from Runs (a run of a comparison, or marked runs) to the leaderboard, the cost/reward
plot and the task-by-model matrix, worst regression first; Enter on a cell opens the rollout diff."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from textual.widgets import DataTable, Static
from workbench_app.main import WorkbenchApp
from workbench_app.screens.compare import CompareScreen, pareto
from workbench_app.screens.rollout_diff import RolloutDiffScreen
from workbench_app.screens.runs import RunsScreen

from tests.app.conftest import SIZE, T0, _record, screen_text, wait_until
from workbench.store import Store

GOOD, BAD = "1114-good00", "1114-bad000"


def _add_comparison(path: Path) -> None:
    store = Store(path)
    try:
        for run, model in ((GOOD, "m-good"), (BAD, "m-bad")):
            store.create_run(run, kind="eval", env_name="adder", env_version="0123456789ab", env_source="test",
                             model=model, n_tasks=12, rollouts_per_task=1, status="completed", created_at=T0 + 7200,
                             finished_at=T0 + 7230, config={"comparison_id": "cmp-0000test"})
            recs = [_record(run, "adder", model, i, reward=1.0 if run == GOOD or i % 2 else 0.0) for i in range(12)]
            w = store.writer()
            w.submit(recs)
            w.close()
    finally:
        store.close()


def test_pareto_front() -> None:
    assert pareto([(1.0, 0.5), (2.0, 0.9), (3.0, 0.8), (0.5, 0.1)]) == [0, 1, 3]


async def _runs_screen(app: WorkbenchApp, pilot: object) -> RunsScreen:
    screen = app.screen
    assert isinstance(screen, RunsScreen)
    await wait_until(pilot, lambda: len(screen.runs) == 4, what="the runs")
    return screen


async def test_a_comparison_opens_from_one_of_its_runs(make_app: Callable[..., WorkbenchApp],
                                                       store_file: Path) -> None:
    _add_comparison(store_file)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        runs = await _runs_screen(app, pilot)
        table = runs.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(BAD))
        await pilot.press("c")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen,
                                  what="the Compare screen")
        await pilot.pause()
        assert screen.runs == [GOOD, BAD], "the comparison's runs, the first as the baseline"
        board = screen_text(app)
        for word in ("m-good", "m-bad", "1.00±0.00", "-0.50*", "base"):
            assert word in board, (word, board)
        matrix = screen.query_one("#compare-matrix", DataTable)
        assert matrix.row_count == 12
        assert [str(matrix.get_cell_at((r, 2))) for r in range(6)] == ["0.00"] * 6, "regressions first"
        assert matrix.cursor_coordinate == (0, 2)
        await pilot.press("enter")
        diff = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                                what="the rollout diff")
        assert diff.diff.a["run_id"] == GOOD and diff.diff.b["run_id"] == BAD
        assert diff.diff.a["task_id"] == diff.diff.b["task_id"]


async def test_marked_runs_compare_and_a_lone_run_says_how(make_app: Callable[..., WorkbenchApp],
                                                           store_file: Path) -> None:
    _add_comparison(store_file)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        runs = await _runs_screen(app, pilot)
        table = runs.query_one(DataTable)
        table.move_cursor(row=table.get_row_index("1114-aaaaaa"))
        await pilot.press("c")
        await wait_until(pilot, lambda: any("mark two runs" in n.message for n in app._notifications),
                         what="the hint")
        await pilot.press("m")
        table.move_cursor(row=table.get_row_index(GOOD))
        await pilot.press("m", "c")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen,
                                  what="the Compare screen")
        assert screen.runs == ["1114-aaaaaa", GOOD]
        board = screen.query_one("#compare-board", Static)
        assert "12 tasks" in str(board.border_title)
