"""The training view at a small terminal: one plot at a time, ``p`` shows the next (in the footer), each
legend names its series by glyph, not colour alone; a wide terminal keeps the 2 x 2 grid."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual_plotext import PlotextPlot
from workbench_app.main import WorkbenchApp
from workbench_app.screens.runs import RunsScreen
from workbench_app.widgets.run_plots import PLOTS, RunPlots
from workbench_app.widgets.train_view import TrainView

from tests.app.conftest import screen_text, wait_until
from tests.app.test_train_view import TRAIN, add_train_run

# slow: the Runs screen on a training run at two sizes, and a snapshot
pytestmark = pytest.mark.slow

SMALL, WIDE = (80, 24), (140, 45)


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths on screen are relative to the working directory: the test's own, so snapshots do not vary."""
    monkeypatch.chdir(tmp_path)


async def _train_view(app: WorkbenchApp, pilot: Any) -> TrainView:
    screen = app.screen
    assert isinstance(screen, RunsScreen)
    view = screen.query_one(TrainView)
    await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
    await pilot.press("down")
    await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
    plots = view.query_one(RunPlots)
    await wait_until(pilot, lambda: plots.single == (app.size.width < 100) and plots._width > 0, what="the layout")
    await pilot.pause()
    return view


def _shown(plots: RunPlots) -> list[str]:
    return [p.id or "" for p in plots.query(PlotextPlot) if p.display]


async def test_a_small_terminal_shows_one_plot_and_p_cycles(make_app: Callable[..., WorkbenchApp],
                                                            store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=12, rollouts=10)
    app = make_app(mode="runs")
    async with app.run_test(size=SMALL) as pilot:
        view = await _train_view(app, pilot)
        plots = view.query_one(RunPlots)
        assert plots.single and _shown(plots) == ["plot-reward"]
        reward = plots.query_one("#plot-reward", PlotextPlot)
        assert reward.size.width >= 40 and reward.size.height >= 8, reward.size
        text = screen_text(app)
        assert "reward ━ train ● eval 1/4" in text, "the whole legend: each series by its glyph"
        # the runs list keeps the focus: the key is the screen's, in its footer
        await wait_until(pilot, lambda: "Next plot" in screen_text(app), what="the key in the footer")
        seen = []
        for _ in PLOTS:
            await pilot.press("p")
            await wait_until(pilot, lambda: len(_shown(plots)) == 1 and _shown(plots)[0] != (seen or ["plot-reward"])[-1],
                             what="the next plot")
            seen.append(_shown(plots)[0])
        assert seen == [*list(PLOTS)[1:], "plot-reward"], "p goes round the four plots"
        await pilot.press("p")
        await wait_until(pilot, lambda: "step s ━ train w wait u update 2/4" in screen_text(app), what="step time")
        drawn = plots.query_one("#plot-time", PlotextPlot).render().plain
        assert "w" in drawn and "u" in drawn, "the series drawn with the glyphs the legend names"


async def test_a_wide_terminal_keeps_the_grid(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=12, rollouts=10)
    app = make_app(mode="runs")
    async with app.run_test(size=WIDE) as pilot:
        view = await _train_view(app, pilot)
        plots = view.query_one(RunPlots)
        assert not plots.single and _shown(plots) == list(PLOTS)
        text = screen_text(app)
        for legend in ("reward ━ train ● eval", "step s ━ train w wait u update", "policy lag ━ mean x max",
                       "trainer tokens/s"):
            assert legend in text, legend
        plots.focus()
        await pilot.pause()
        assert "Next plot" not in screen_text(app), "every plot is shown: no key for the next"


def test_train_view_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=12, rollouts=10)

    async def run_before(pilot: Any) -> None:
        await _train_view(pilot.app, pilot)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="runs"), terminal_size=SMALL, run_before=run_before)
