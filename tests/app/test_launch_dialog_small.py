"""The Launch dialog at 80×24: it fits the screen, its fields scroll and Launch and Cancel stay visible."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.widgets import Button
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.launch import LaunchScreen

from tests.app.conftest import wait_until


async def _open(pilot: Any) -> LaunchScreen:
    app = pilot.app
    await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen) and "adder" in app.screen.envs,
                     what="the environment")
    await pilot.press("L")
    await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.settled,
                     what="the launch dialog and its plan")
    await pilot.pause()
    assert isinstance(app.screen, LaunchScreen)
    return app.screen


@pytest.mark.parametrize(("size", "compact"), [((80, 24), True), ((100, 20), True), ((140, 45), False)])
async def test_the_dialog_fits_with_its_buttons(make_app: Callable[..., WorkbenchApp], size: tuple[int, int],
                                                compact: bool) -> None:
    app = make_app()
    async with app.run_test(size=size) as pilot:
        dialog = await _open(pilot)
        assert dialog.has_class("-compact") == compact
        box = dialog.query_one("#launch-box")
        assert box.region.bottom <= size[1] and box.region.right <= size[0]
        for button in dialog.query(Button):
            assert button.region.height == 3 and box.region.contains_region(button.region), button.id
        fields = dialog.query_one("#launch-fields")
        fields.scroll_end(animate=False)  # what is below the fold is reached by scrolling
        await pilot.pause()
        plan = dialog.query_one("#launch-plan")
        assert fields.region.contains_region(plan.region) or plan.region.bottom <= fields.region.bottom + 1


def test_launch_dialog_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    async def run_before(pilot: Any) -> None:
        await _open(pilot)
        await pilot.pause(0.3)
        pilot.app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
