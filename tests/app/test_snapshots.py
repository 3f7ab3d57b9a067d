"""SVG snapshots of each screen at a fixed terminal size (``pytest --snapshot-update`` re-records).

Deterministic: fixed timestamps in the store, UTC, paths shown relative to the working directory
(the test's tmp dir), notifications cleared before the picture is taken.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.main import WorkbenchApp
from app.screens.environments import EnvironmentsScreen
from app.screens.rollout_detail import RolloutDetailScreen
from app.screens.traces import TracesScreen
from app.widgets.virtual_table import VirtualTable
from tests.app.conftest import SIZE, screen_text, wait_until


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def _settle(ready: Callable[[WorkbenchApp], Any], *keys: str,
            then: Callable[[WorkbenchApp], Any] | None = None) -> Callable[[Any], Awaitable[None]]:
    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: ready(app), what="the screen's data")
        if keys:
            await pilot.press(*keys)
        if then is not None:
            await wait_until(pilot, lambda: then(app), what="the screen after the keys")
        await pilot.pause(0.2)
        app.clear_notifications()
        await pilot.pause()

    return run_before


def _envs_ready(app: WorkbenchApp) -> bool:
    s = app.screen
    return isinstance(s, EnvironmentsScreen) and bool(s.envs) and all(e.status != "loading" for e in s.envs.values())


def _traces_ready(app: WorkbenchApp) -> bool:
    s = app.screen
    if not isinstance(s, TracesScreen):
        return False
    t = s.query_one(VirtualTable)
    return t.total == 24 and t.row(23) is not None


def test_environments_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_settle(_envs_ready))


def test_traces_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, "down", "down"))


def test_rollout_detail_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, *["down"] * 9, "enter",
                                           then=lambda app: isinstance(app.screen, RolloutDetailScreen)))


def test_runs_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="runs"), terminal_size=SIZE,
                        run_before=_settle(lambda app: "pass@1" in screen_text(app)))


def test_help_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, "question_mark"))
