"""``?`` lists Workbench's own keys with what they do, grouped: the screen's, then every screen's; none of
Textual's internal bindings (``super+c``, ``tab``), no widget names."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workbench_app.main import WorkbenchApp
from workbench_app.screens.help import EVERYWHERE, HelpScreen

from tests.app.conftest import envs_ready, wait_until

SMALL = (80, 24)
INTERNAL = {"super+c", "ctrl+c", "tab", "shift+tab", "⇥", "⇧+⇥", "^c", "ctrl+q", "^q"}


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the snapshot shows paths relative to it


@pytest.mark.parametrize(("mode", "title", "screen_keys"), [
    ("environments", "Environments", {"Validate", "Eval", "Probe", "Re-score", "More"}),
    ("traces", "Traces", {"Export", "Sort", "Search", "Clear filters"}),
])
async def test_help_lists_only_workbench_keys_by_screen(make_app: Callable[..., WorkbenchApp], mode: str,
                                                        title: str, screen_keys: set[str]) -> None:
    app = make_app(mode=mode)
    async with app.run_test(size=SMALL) as pilot:
        await wait_until(pilot, lambda: app.screen.title == title, what=f"the {title} screen")
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        rows = app.screen._rows
        keys = {k for k, _, _ in rows}
        assert not keys & INTERNAL, keys & INTERNAL
        groups = [g for _, _, g in rows]
        assert set(groups) == {title, EVERYWHERE}
        assert groups == sorted(groups, key=lambda g: g == EVERYWHERE)  # the screen's first, grouped
        assert screen_keys <= {d for _, d, g in rows if g == title}
        assert {"Help", "Quit", "Envs", "Traces"} <= {d for _, d, g in rows if g == EVERYWHERE}
        assert all(d for _, d, _ in rows)


def test_help_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: envs_ready(app), what="the environments")
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=SMALL, run_before=run_before)
