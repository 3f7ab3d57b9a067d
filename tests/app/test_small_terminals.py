"""Small terminals and column widths: the footer keeps help and quit, Traces' columns fit their values
and the screen (titles never cut), the Environments list keeps rows beside the re-score panel, and its
columns follow what they hold (a long error, a longer run id) instead of the widths of the first paint.
Home and End go to the first and last row of every table."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.help import HelpScreen
from workbench_app.screens.runs import RunsScreen
from workbench_app.screens.traces import COLUMNS, TracesScreen
from workbench_app.widgets.reward_compare import RewardCompare
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import T0, screen_text, wait_until
from tests.helpers import ADDER_ENV, write_file
from workbench.store import Store

# slow: screens redrawn at several terminal sizes, a Pilot run each
pytestmark = pytest.mark.slow

SMALL = [(80, 24), (100, 30)]
BROKEN = "import workbench as wb\n\ndef load_environment(:\n    pass\n"


def _footer(app: WorkbenchApp) -> str:
    return screen_text(app).splitlines()[-1]


async def _envs_loaded(pilot: Any, app: WorkbenchApp) -> EnvironmentsScreen:
    screen = app.screen
    assert isinstance(screen, EnvironmentsScreen)
    await wait_until(pilot, lambda: screen.envs and all(s.status != "loading" for s in screen.envs.values()),
                     what="the environments")
    return screen


@pytest.mark.parametrize("size", SMALL, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("mode", ["environments", "traces", "runs", "costs", "debugger"])
async def test_the_footer_keeps_help_and_quit(make_app: Callable[..., WorkbenchApp], mode: str,
                                              size: tuple[int, int]) -> None:
    app = make_app(mode=mode)
    async with app.run_test(size=size) as pilot:
        # The screen's own keys paint after the app's (help, quit): wait for both sides of the footer.
        footer = await wait_until(pilot, lambda: "? Help" in _footer(app) and _footer(app).split("▏")[0].strip()
                                  and _footer(app), what="the footer with the screen's keys")
        assert "? Help" in footer and "q Quit" in footer, footer
        # Keys that do not fit are left out whole: every key shown has its whole description.
        descriptions = {a.binding.description for a in app.screen.active_bindings.values()}
        for item in re.split(r"\s{2,}", footer.split("▏")[0].strip()):
            key, _, desc = item.partition(" ")
            assert desc in descriptions, (item, footer)


async def test_traces_columns_fit_a_100_column_terminal(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=(100, 30)) as pilot:
        table = app.screen.query_one(VirtualTable)
        await wait_until(pilot, lambda: table.total == 24 and table.row(23) is not None, what="the rows")
        await wait_until(pilot, lambda: any("1114-bbbbbb" in ln for ln in screen_text(app).splitlines()),
                         what="the rows painted")
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if line.strip().startswith("time"))
        assert header.split() == [c.title for c in COLUMNS]  # every title, none cut ("se" for secs)
        row = next(line for line in lines if "1114-bbbbbb" in line)
        assert "The answer is" in row, row  # the completion column is there
        assert not table.show_horizontal_scrollbar


async def test_traces_at_80x24_leaves_columns_out_whole(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(VirtualTable)
        await wait_until(pilot, lambda: table.total == 24 and table.row(23) is not None, what="the rows")
        await wait_until(pilot, lambda: any(re.search(r"\b1114-bbbbbb\b", ln) for ln in screen_text(app).splitlines()),
                         what="the rows painted")
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if line.strip().startswith("time"))
        titles = [c.title for c in COLUMNS]
        assert all(word in titles for word in header.split()), header  # whole titles only
        for essential in ("run", "env", "reward", "status", "completion"):
            assert essential in header.split(), header
        assert any(re.search(r"\b1114-bbbbbb\b", line) for line in lines)  # full run ids
        assert max(len(line) for line in lines) <= 80


def test_fit_columns_drops_the_lowest_priority_first() -> None:
    from workbench_app.widgets.virtual_table import Column, fit_columns

    cols = [Column("a", 10, str, priority=9), Column("b", 10, str, priority=1), Column("c", 10, str, priority=5),
            Column("rest", 0, str, priority=3, min_width=5)]
    assert fit_columns(cols, [10, 10, 10, 0], 60) == [10, 10, 10, 27]
    assert fit_columns(cols, [10, 10, 10, 0], 30) == [10, None, 10, 8]  # b goes first
    assert fit_columns(cols, [10, 10, 10, 0], 25) == [10, None, 10, None]  # then the one that takes the rest
    assert fit_columns(cols, [4, 4, 4, 0], 60)[:3] == [4, 4, 4]  # sized to the values, titles at least


async def test_the_env_list_keeps_rows_beside_the_rescore_panel(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _envs_loaded(pilot, app)
        await pilot.press("R")
        await wait_until(pilot, lambda: screen.envs["adder"].rescore is not None, timeout=30, what="the re-score")
        panel = screen.query_one(RewardCompare)
        await wait_until(pilot, lambda: panel.display and panel.result is not None, what="the panel")
        table = screen.query_one("#env-table", DataTable)
        await wait_until(pilot, lambda: table.region.height >= 6, what="the table beside the panel")  # not zero
        assert "adder" in screen_text(app).splitlines()[table.region.y + 1]
        assert "? Help" in _footer(app)


async def test_env_columns_follow_their_values(make_app: Callable[..., WorkbenchApp], env_dir: Path,
                                               store_file: Path) -> None:
    """A load error at the start widens the status column past "error: /" (it was "loading…"); a
    longer run id in the latest-run column is shown whole."""
    write_file(env_dir / "broken.py", BROKEN)
    app = make_app()
    async with app.run_test(size=(200, 40)) as pilot:
        screen = await _envs_loaded(pilot, app)

        def row_of(name: str) -> str:
            return next((ln for ln in screen_text(app).splitlines() if ln.strip().startswith(name)), "")

        await wait_until(pilot, lambda: "error: broken.py:3: syntax error: invalid syntax" in row_of("broken"),
                         what="the whole error in the row")
        with Store(store_file) as store:
            store.create_run("1130-quickeval-long", kind="eval", env_name="adder", model="m", status="completed",
                             created_at=T0 + 90_000)
        await pilot.press("r")
        await wait_until(pilot, lambda: (screen.envs["adder"].latest or {}).get("id") == "1130-quickeval-long",
                         what="the new latest run")
        await wait_until(pilot, lambda: "1130-quickeval-long" in row_of("adder"), what="the whole run id in the row")
        write_file(env_dir / "broken.py", ADDER_ENV.replace('name="adder"', 'name="broken"'))
        await pilot.press("down", "r")
        await wait_until(pilot, lambda: screen.envs["broken"].status == "ok", what="broken to be fixed")
        await wait_until(pilot, lambda: screen.query_one(DataTable).columns["status"].content_width == len("status"),
                         what="the status column narrowed again")


async def test_env_status_is_clipped_to_the_screen(make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    write_file(env_dir / "broken.py", BROKEN)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _envs_loaded(pilot, app)
        table = screen.query_one(DataTable)

        def broken_row() -> str:
            return next((ln for ln in screen_text(app).splitlines() if ln.strip().startswith("broken")), "")

        # the table settles its column widths after the rows arrive: wait for the clipped row
        await wait_until(pilot, lambda: broken_row().rstrip().endswith("…")
                         and table.virtual_size.width <= table.scrollable_content_region.width, what="the clipped row")
        row = broken_row()
        assert "error: bro" in row and len(row.rstrip()) <= 80, row
        await pilot.press("down")  # the whole message is in the detail panel
        await wait_until(pilot, lambda: "syntax error: invalid syntax" in screen_text(app), what="the detail")


async def test_home_and_end_jump_to_the_first_and_last_row(make_app: Callable[..., WorkbenchApp],
                                                           env_dir: Path) -> None:
    for name in ("second", "third"):
        write_file(env_dir / f"{name}.py", ADDER_ENV.replace('name="adder"', f'name="{name}"'))
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await _envs_loaded(pilot, app)
        table = screen.query_one(DataTable)
        await pilot.press("end")
        assert table.cursor_row == 2 and screen._selected().name == "third"
        await pilot.press("home")
        assert table.cursor_row == 0 and screen._selected().name == "adder"

        await pilot.press("3")
        runs = app.screen
        assert isinstance(runs, RunsScreen)
        await wait_until(pilot, lambda: len(runs.runs) == 2, what="the runs")
        await pilot.press("end")
        assert runs._selected_id() == "1114-aaaaaa"
        await pilot.press("home")
        assert runs._selected_id() == "1114-bbbbbb"

        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        rows = {(key, desc) for key, desc, _ in app.screen._rows}
        help_table = app.screen.query_one(DataTable)
        await pilot.press("end")
        assert help_table.cursor_row == help_table.row_count - 1
        await pilot.press("escape", "2")
        traces = app.screen
        assert isinstance(traces, TracesScreen)
        vt = traces.query_one(VirtualTable)
        await wait_until(pilot, lambda: vt.total == 24, what="the rollouts")
        await pilot.press("end")
        assert vt.cursor == 23
        await pilot.press("home")
        assert vt.cursor == 0
    assert ("home", "First row") in rows and ("end", "Last row") in rows
