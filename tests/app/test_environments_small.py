"""Environments at 80×24: snapshots with environments and runs, and of an empty store (the status line
says what to do first); the quick eval's status and progress bar side by side at 100 columns."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Label, ProgressBar
from workbench_app.config import TuiConfig
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments.screen import FIRST_STEPS

from tests.app.conftest import envs_ready, wait_until
from workbench.authoring.discovery import EnvRef

SMALL = (80, 24)


@pytest.fixture(autouse=True)
def _cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the snapshot shows paths relative to it


def _empty_app(tmp_path: Path, env_dir: Path) -> WorkbenchApp:
    def discover() -> list[EnvRef]:
        return [EnvRef(p.stem, "path", p) for p in sorted(env_dir.glob("*.py"))]

    return WorkbenchApp(tmp_path / "empty" / "workbench.db", config=TuiConfig(export_dir=tmp_path / "exports"),
                        discover_fn=discover, watch=False)


async def _settle(pilot: Any) -> None:
    await wait_until(pilot, lambda: envs_ready(pilot.app), what="the environments")
    pilot.app.clear_notifications()
    await pilot.pause()


async def test_an_empty_store_says_what_to_do_first(tmp_path: Path, env_dir: Path,
                                                    make_app: Callable[..., WorkbenchApp]) -> None:
    app = _empty_app(tmp_path, env_dir)
    async with app.run_test(size=SMALL) as pilot:
        await _settle(pilot)
        line = app.screen.query_one("#env-status")
        await wait_until(pilot, lambda: line.display and str(line.render()) == FIRST_STEPS, what="the first steps")
    with_runs = make_app()
    async with with_runs.run_test(size=SMALL) as pilot:
        await _settle(pilot)
        assert not with_runs.screen.query_one("#env-status").display  # a run of adder: nothing to say


def test_environments_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=_settle)


def test_environments_empty_store_80x24_snapshot(snap_compare: Any, tmp_path: Path, env_dir: Path) -> None:
    assert snap_compare(_empty_app(tmp_path, env_dir), terminal_size=SMALL, run_before=_settle)


@pytest.mark.parametrize("width", [80, 100, 120])
async def test_the_eval_status_never_overlaps_its_progress_bar(make_app: Callable[..., WorkbenchApp],
                                                               width: int) -> None:
    app = make_app()
    async with app.run_test(size=(width, 24)) as pilot:
        await _settle(pilot)
        screen = app.screen
        screen.query_one("#eval-bar").display = True
        label = screen.query_one("#eval-label", Label)
        label.update("eval adder: 7/8 rollouts · mean reward 0.714 · 1 error · run 1114-cccccc · 12.3 s elapsed")
        screen.query_one(ProgressBar).update(total=8, progress=7)
        await pilot.pause()
        bar = screen.query_one(ProgressBar)
        assert label.region.right <= bar.region.x and label.region.height == 1, (label.region, bar.region)
        assert bar.region.right <= width
