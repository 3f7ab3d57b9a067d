"""The rollout diff at 80×24 and 140×45: the scores pane goes under the fields where it would be squeezed
beside them, and sits beside them where there is room."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.widgets import Static
from workbench_app.main import WorkbenchApp
from workbench_app.screens.rollout_diff import MIN_SCORES_WIDTH, RolloutDiffScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import screen_text, wait_until

#: m on run b's task 2 (a tool call), D on its task 1.
KEYS = (*["down"] * 9, "m", "down", "D")


def _traces_ready(app: WorkbenchApp) -> bool:
    s = app.screen
    if not isinstance(s, TracesScreen):
        return False
    t = s.query_one(VirtualTable)
    return t.total == 24 and t.row(23) is not None


async def _open_diff(pilot: Any) -> RolloutDiffScreen:
    app = pilot.app
    await wait_until(pilot, lambda: _traces_ready(app), what="the traces")
    await pilot.press(*KEYS)
    screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                              what="the diff")
    await pilot.pause()
    return screen


@pytest.mark.parametrize(("size", "stacked"), [((80, 24), True), ((140, 45), False)])
async def test_the_scores_pane_is_never_squeezed(make_app: Callable[..., WorkbenchApp], size: tuple[int, int],
                                                 stacked: bool) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=size) as pilot:
        screen = await _open_diff(pilot)
        values = screen.query_one("#diff-values")
        await wait_until(pilot, lambda: values.has_class("-stacked") == stacked, what="the layout")
        await pilot.pause()
        scores, fields = screen.query_one("#diff-scores", Static), screen.query_one("#diff-fields", Static)
        assert scores.content_size.width >= MIN_SCORES_WIDTH - 4
        assert (scores.region.y >= fields.region.bottom) == stacked
        await pilot.press("end")
        await pilot.pause()
        text = screen_text(app)
        if not stacked:
            assert "correct  reward  1.000  1.000  0" in text


def _snapshot(size: tuple[int, int]) -> Callable[[Any], Any]:
    async def run_before(pilot: Any) -> None:
        await _open_diff(pilot)
        await pilot.pause(0.3)
        pilot.app.clear_notifications()
        await pilot.pause()

    return run_before


def test_diff_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=(80, 24), run_before=_snapshot((80, 24)))


def test_diff_140x45_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=(140, 45), run_before=_snapshot((140, 45)))
