"""The typed messages the screens' workers post where their results cross to another screen or the app.

A recording app (a WorkbenchApp whose extra ``@on`` handlers keep every message they see; the app's own
handlers still run) checks the contract: which message arrives, with what payload, once the worker ends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on
from textual.message import Message
from workbench_app import main as app_main
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.launch import LaunchScreen
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.rollout_diff import RolloutDiffScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable
from workbench_cloud.launch import Launched

from tests.app.conftest import SIZE, wait_until


class RecordingApp(WorkbenchApp):
    CSS_PATH = str(Path(app_main.__file__).with_name("workbench.tcss"))  # a relative one is read beside this file

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.posted: list[Message] = []

    @on(TracesScreen.RolloutLoaded)
    @on(TracesScreen.DiffLoaded)
    @on(EnvironmentsScreen.LaunchStarted)
    @on(EnvironmentsScreen.LaunchFinished)
    def _record(self, message: Message) -> None:
        self.posted.append(message)

    def of(self, kind: type[Message]) -> list[Any]:
        return [m for m in self.posted if isinstance(m, kind)]


def _make(make_app: Callable[..., WorkbenchApp], mode: str) -> RecordingApp:
    app = make_app(mode=mode, cls=RecordingApp)
    assert isinstance(app, RecordingApp)
    return app


async def _traces_ready(pilot: Any, app: WorkbenchApp) -> VirtualTable:
    assert isinstance(app.screen, TracesScreen)
    table = app.screen.query_one(VirtualTable)
    await wait_until(pilot, lambda: table.total == 24 and table.row(23) is not None, what="the rows")
    return table


async def test_opening_a_rollout_posts_rollout_loaded(make_app: Callable[..., WorkbenchApp]) -> None:
    app = _make(make_app, "traces")
    async with app.run_test(size=SIZE) as pilot:
        await _traces_ready(pilot, app)
        await pilot.press(*["down"] * 9, "enter")  # newest first: row 9 is run b, task 2
        (msg,) = await wait_until(pilot, lambda: app.of(TracesScreen.RolloutLoaded), what="RolloutLoaded")
        assert isinstance(msg.rollout, dict) and msg.rollout["id"] == "1114-bbbbbb.2.0"
        assert msg.rollout["env_name"] == "wordplay" and msg.rollout["task_index"] == 2
        # the app's own handler shows exactly that rollout
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the detail screen")
        assert screen.rollout is msg.rollout
        assert not app.of(TracesScreen.DiffLoaded)


async def test_diffing_posts_diff_loaded(make_app: Callable[..., WorkbenchApp]) -> None:
    app = _make(make_app, "traces")
    async with app.run_test(size=SIZE) as pilot:
        await _traces_ready(pilot, app)
        await pilot.press("m", "down", "D")  # A: the newest (run b, task 11); B: the next (run b, task 10)
        (msg,) = await wait_until(pilot, lambda: app.of(TracesScreen.DiffLoaded), what="DiffLoaded")
        assert (msg.diff.a["id"], msg.diff.b["id"]) == ("1114-bbbbbb.11.0", "1114-bbbbbb.10.0")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                                  what="the diff screen")
        assert screen.diff is msg.diff
        assert not app.of(TracesScreen.RolloutLoaded)


async def test_a_failed_read_posts_nothing(make_app: Callable[..., WorkbenchApp]) -> None:
    app = _make(make_app, "traces")
    async with app.run_test(size=SIZE) as pilot:
        traces = app.screen
        assert isinstance(traces, TracesScreen)
        await _traces_ready(pilot, app)
        traces._open("no-such-rollout")
        await wait_until(pilot, lambda: any("no-such-rollout" in n.message for n in app._notifications),
                         what="the error notification")
        await pilot.pause(0.1)
        assert not app.posted and app.screen is traces


async def test_a_launch_posts_started_then_finished(make_app: Callable[..., WorkbenchApp]) -> None:
    def launcher(store: Any, run: Any, **kwargs: Any) -> Launched:
        kwargs["on_start"]("1130-msg001")
        return Launched("1130-msg001", "completed", "hash", 0.25, {"steps": run.loop.max_steps})

    app = _make(make_app, "environments")
    app.launcher = launcher
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, EnvironmentsScreen)
        await wait_until(pilot, lambda: "adder" in screen.envs and screen.envs["adder"].status == "ok",
                         what="the environment")
        await pilot.press("L")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.of(EnvironmentsScreen.LaunchFinished), timeout=60, what="LaunchFinished")
        started, finished = app.posted
        assert isinstance(started, EnvironmentsScreen.LaunchStarted)
        assert (started.env, started.run_id) == ("adder", "1130-msg001")
        assert isinstance(finished, EnvironmentsScreen.LaunchFinished)
        assert (finished.env, finished.run_id, finished.status, finished.spent_usd) == (
            "adder", "1130-msg001", "completed", 0.25)
        # the screen's own handlers ran too: both notifications
        messages = [n.message for n in app._notifications]
        assert any("run 1130-msg001 started" in m for m in messages)
        assert any("run 1130-msg001 completed, spent $0.2500" in m for m in messages)
