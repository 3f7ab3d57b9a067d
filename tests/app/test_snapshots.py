"""SVG snapshots of each screen at a fixed terminal size (``pytest --snapshot-update`` re-records).

Deterministic: fixed timestamps in the store, UTC, paths shown relative to the working directory
(the test's tmp dir), notifications cleared before the picture is taken.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, envs_ready, screen_text, wait_until

# slow: an SVG snapshot of every screen
pytestmark = pytest.mark.slow


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


def _traces_ready(app: WorkbenchApp) -> bool:
    s = app.screen
    if not isinstance(s, TracesScreen):
        return False
    t = s.query_one(VirtualTable)
    return t.total == 24 and t.row(23) is not None


def test_environments_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_settle(envs_ready))


def test_traces_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, "down", "down"))


def test_rollout_detail_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, *["down"] * 9, "enter",
                                           then=lambda app: isinstance(app.screen, RolloutDetailScreen)
                                           and app.screen.score_age_read))


def test_runs_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="runs"), terminal_size=SIZE,
                        run_before=_settle(lambda app: "pass@1" in screen_text(app)))


def test_help_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, "question_mark"))


def test_debugger_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """The Debugger on a stored rollout with a tool call (read-only): transcript by turn, turns, scores."""
    from workbench_app.screens.debugger import DebuggerScreen

    from workbench.store.queries import get_rollout

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and app.screen._env_options,
                         what="the environment picker")
        app.open_debugger(rollout=get_rollout(app.store.get().conn, "1114-aaaaaa.2.0"))
        await wait_until(pilot, lambda: "read-only" in screen_text(app) and "adder" in screen_text(app),
                         what="the stored rollout")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="debugger"), terminal_size=SIZE, run_before=run_before)


def test_rollout_diff_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """m on run b's task 2 (a tool call), D on its task 1: fields, scores, the aligned conversations."""
    from workbench_app.screens.rollout_diff import RolloutDiffScreen

    assert snap_compare(make_app(mode="traces"), terminal_size=SIZE,
                        run_before=_settle(_traces_ready, *["down"] * 9, "m", "down", "D",
                                           then=lambda app: isinstance(app.screen, RolloutDiffScreen)))


def test_train_run_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    """A finished training run on Runs: the four plots, evals and events, newest rollouts, last steps."""
    from workbench_app.screens.runs import RunsScreen
    from workbench_app.widgets.train_view import TrainView

    from tests.app.test_train_view import TRAIN, add_train_run

    add_train_run(store_file, "completed", steps=12, rollouts=10)

    def shown(app: WorkbenchApp) -> bool:
        s = app.screen
        if not isinstance(s, RunsScreen):
            return False
        view = s.query_one(TrainView)
        return view.run_id == TRAIN and view.display and len(view.rollouts) == 10 and "(train)" in screen_text(app)

    assert snap_compare(make_app(mode="runs"), terminal_size=SIZE,
                        run_before=_settle(lambda app: len(getattr(app.screen, "runs", [])) == 3, "down",
                                           then=shown))


def test_costs_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], store_file: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger by run with its totals (no monthly budget configured, no forecast picked), on a
    fixed clock: the cost events and "this month" are pinned to the fixture's November 2023."""
    import sqlite3

    from workbench_app.screens.costs import CostsScreen

    import workbench.cost.ledger
    from tests.app.conftest import T0

    con = sqlite3.connect(store_file)
    con.execute("UPDATE cost_event SET created_at = ? + id * 60", (T0,))
    con.commit()
    con.close()
    real = workbench.cost.ledger.month_start
    monkeypatch.setattr(workbench.cost.ledger, "month_start", lambda now=None: real(T0 + 86400 if now is None else now))

    def ready(app: WorkbenchApp) -> bool:
        s = app.screen
        return isinstance(s, CostsScreen) and s.ledger is not None and "spent" in screen_text(app)

    assert snap_compare(make_app(mode="costs"), terminal_size=SIZE, run_before=_settle(ready))


def test_launch_dialog_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """L on the selected environment: backend, steps, budget, config and the local estimate."""
    from workbench_app.screens.launch import LaunchScreen

    def shown(app: WorkbenchApp) -> bool:
        s = app.screen
        return isinstance(s, LaunchScreen) and s.settled

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_settle(envs_ready, "L", then=shown))


# -- a small terminal: 80×24 ----------------------------------------------------------------------
SMALL = (80, 24)


def test_environments_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp],
                                     env_dir: Path) -> None:
    """A broken env beside a loaded one: the status column clipped to the screen, help and quit in the footer."""
    (env_dir / "broken.py").write_text("import workbench as wb\n\ndef load_environment(:\n    pass\n")
    assert snap_compare(make_app(), terminal_size=SMALL, run_before=_settle(envs_ready))


def test_environments_rescore_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """R on adder at 80×24: the re-score panel, and the env list still has its rows."""
    import dataclasses

    from workbench_app.widgets.reward_compare import RewardCompare

    def rescored(app: WorkbenchApp) -> bool:
        s = app.screen
        if not isinstance(s, EnvironmentsScreen) or s.envs["adder"].rescore is None:
            return False
        st = s.envs["adder"]
        if st.rescore.wall_s != 0.5:  # the wall time differs on every run: pin it for the picture
            st.rescore = dataclasses.replace(st.rescore, wall_s=0.5)
            s.query_one(RewardCompare).show_result(st.rescore)
        return s.query_one(RewardCompare).display

    assert snap_compare(make_app(), terminal_size=SMALL, run_before=_settle(envs_ready, "R", then=rescored))


def test_traces_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    assert snap_compare(make_app(mode="traces"), terminal_size=SMALL,
                        run_before=_settle(_traces_ready, "down", "down"))


def test_runs_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    # The run column laid out whole (the id shown in the table and in the summary), not mid-layout.
    assert snap_compare(make_app(mode="runs"), terminal_size=SMALL,
                        run_before=_settle(lambda app: "pass@1" in screen_text(app)
                                           and screen_text(app).count("1114-bbbbbb") >= 2))


def test_export_dialog_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """x on Traces: the path asked for, in the export folder (relative here, and a fixed file name, so
    the picture is the same on every run)."""
    import workbench_app.screens.traces as traces_module
    from workbench_app.screens.export import ExportScreen, export_folder

    monkeypatch.setattr(traces_module, "default_export_path",
                        lambda settings: export_folder(settings) / "rollouts-20231114-221320.jsonl")
    app = make_app(mode="traces")
    app.config.export_dir = Path("exports")
    assert snap_compare(app, terminal_size=SMALL,
                        run_before=_settle(_traces_ready, "x", then=lambda app: isinstance(app.screen, ExportScreen)))


def test_compare_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    """Compare at 80x24: the leaderboard and the plot above the task-by-model matrix."""
    from workbench_app.screens.compare import CompareScreen

    from tests.app.test_compare import BAD, _add_comparison

    _add_comparison(store_file)

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: len(getattr(app.screen, "runs", ())) == 4, what="the runs")
        table = app.screen.query_one("#runs-table")
        table.move_cursor(row=table.get_row_index(BAD))
        await pilot.press("c")
        await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the Compare screen")
        await wait_until(pilot, lambda: "◆" in screen_text(app) and "m-bad" in screen_text(app),
                         what="the plot and the matrix drawn")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="runs"), terminal_size=SMALL, run_before=run_before)
