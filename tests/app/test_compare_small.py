"""Compare at 80x24: the task-by-model matrix names tasks by index and prompt start (not their hash ids),
the leaderboard keeps its numbers whole with costs in significant digits, and the cost/reward plot has a
legend that names each model's marker (not colour alone)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable
from workbench_app.main import WorkbenchApp
from workbench_app.screens.compare import CompareScreen, load_comparison, task_name

from tests.app.conftest import screen_text, wait_until
from tests.app.test_compare import BAD, GOOD, _add_comparison
from workbench.store import Store

SMALL = (80, 24)


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths on screen are relative to the working directory: the test's own, so snapshots do not vary."""
    monkeypatch.chdir(tmp_path)


def test_a_task_is_named_by_index_and_prompt() -> None:
    result = {"task_labels": {"9f8e7d6c5b4a": {"task_index": 7, "prompt": "What is 7 + 8? Answer with a number."}}}
    assert task_name(result, "9f8e7d6c5b4a") == "#7 What is 7 + 8? Answer wi…"
    assert task_name(result, "9f8e7d6c5b4a", 60) == "#7 What is 7 + 8? Answer with a number."
    assert task_name(result, "0123456789abcdef0123456789abcdef") == "0123456789abcdef0123456789a…", "no label: the id"


async def _compare(app: WorkbenchApp, pilot: Any, store_file: Path) -> CompareScreen:
    with Store(store_file) as store:
        screen = CompareScreen(*load_comparison(store.conn, [GOOD, BAD]))
    await app.push_screen(screen)
    await wait_until(pilot, lambda: screen.query_one("#compare-matrix", DataTable).row_count == 12,
                     what="the matrix")
    await pilot.pause()
    return screen


@pytest.fixture
def compared(store_file: Path) -> Path:
    _add_comparison(store_file)
    return store_file


async def test_compare_at_80x24_names_tasks_and_its_plot_has_a_legend(make_app: Callable[..., WorkbenchApp],
                                                                      compared: Path) -> None:
    app = make_app(mode="runs")
    async with app.run_test(size=SMALL) as pilot:
        screen = await _compare(app, pilot, compared)
        matrix = screen.query_one("#compare-matrix", DataTable)
        first = [str(matrix.get_cell_at((r, 0))) for r in range(matrix.row_count)]
        regressed = [f"#{i} What is {i} + {i + 1}?" for i in range(0, 12, 2)]
        assert sorted(first[:6]) == sorted(regressed), "the regressions first, by index and prompt"
        text = screen_text(app)
        assert "#0 What is 0 + 1?" in text
        assert "1 m-good ◆" in text and "2 m-bad" in text, "the legend: each model's marker, the Pareto front"
        assert "$0.00065" in text, "the cost per solved task in significant digits"
        assert "1.00±0.00" in text and "-0.50*" in text


def test_compare_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], compared: Path) -> None:
    async def run_before(pilot: Any) -> None:
        await _compare(pilot.app, pilot, compared)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="runs"), terminal_size=SMALL, run_before=run_before)
