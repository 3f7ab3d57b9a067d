"""The Environments screen's controllers, each driven by itself (no keys): what it starts in a worker comes
back as its typed message and lands where the screen shows it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench_app.config import TuiConfig
from workbench_app.main import WorkbenchApp
from workbench_app.screens.debugger import DebuggerScreen
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.environments.rescore import Rescores
from workbench_app.screens.launch import LaunchScreen
from workbench_app.workers import CancellableRun

from tests.app.conftest import SIZE, wait_until
from tests.helpers import MockServer, write_file
from workbench.authoring.discovery import EnvRef

BROKEN = "import workbench as wb\n\ndef load_environment(:\n    pass\n"


def _screen(app: WorkbenchApp) -> EnvironmentsScreen:
    assert isinstance(app.screen, EnvironmentsScreen)
    return app.screen


def _titled(app: WorkbenchApp, title: str) -> list[str]:
    return [n.message for n in app._notifications if n.title == title]


async def _adder(pilot: Any, app: WorkbenchApp) -> Any:
    return await wait_until(pilot, lambda: (st := _screen(app).envs.get("adder")) is not None and st.status == "ok"
                            and st, what="adder to load")


async def test_the_catalog_calls_back_once_every_environment_is_loaded(
        make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    write_file(env_dir / "broken.py", BROKEN)
    app = make_app()
    seen: list[dict[str, str]] = []
    async with app.run_test(size=SIZE) as pilot:
        catalog = _screen(app).catalog
        catalog.when_loaded(lambda: seen.append({n: st.status for n, st in catalog.envs.items()}))
        await wait_until(pilot, lambda: seen, what="the callback")
        assert seen == [{"adder": "ok", "broken": "error"}]
        catalog.when_loaded(lambda: seen.append({}))  # loaded already: called at once (on the next turn)
        await wait_until(pilot, lambda: len(seen) == 2, what="the second callback")


async def test_a_failed_listing_is_said_and_still_counts_as_listed(store_file: Path) -> None:
    def discover() -> list[EnvRef]:
        raise OSError("the env folder is unreadable")

    app = WorkbenchApp(store_file, config=TuiConfig(), discover_fn=discover, watch=False)
    called: list[bool] = []
    async with app.run_test(size=SIZE) as pilot:
        _screen(app).catalog.when_loaded(lambda: called.append(True))
        await wait_until(pilot, lambda: called, what="the callback")
        assert any("listing environments failed: the env folder is unreadable" in n.message
                   for n in app._notifications)
        assert _screen(app).envs == {}


async def test_the_hot_reload_watch_reloads_what_changes(make_app: Callable[..., WorkbenchApp],
                                                          env_dir: Path) -> None:
    app = make_app()  # hot reload off: the test starts the watch itself
    async with app.run_test(size=SIZE) as pilot:
        await _adder(pilot, app)
        hot_reload = _screen(app).hot_reload
        assert not hot_reload.started
        hot_reload.follow([env_dir.resolve()])
        await wait_until(pilot, lambda: hot_reload.started, what="the watch")
        await pilot.pause(0.3)
        write_file(env_dir / "adder.py", BROKEN)
        await wait_until(pilot, lambda: _screen(app).envs["adder"].status == "error", timeout=20,
                         what="the reload of the broken file")


async def test_validation_keeps_its_report_with_the_environment(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        _screen(app).validation.start(st)
        report = await wait_until(pilot, lambda: st.report, timeout=30, what="the report")
        assert report.ok and st.report_error == "" and st.report_files == st.ref.version()
        await wait_until(pilot, lambda: _titled(app, "validate"), what="the notification")
        assert "validate: ok" in str(_screen(app).query_one("#env-detail").render())


async def test_a_quick_eval_runs_and_ends_as_a_message(make_app: Callable[..., WorkbenchApp],
                                                       mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("arithmetic")
    app = make_app(base_url=server.base_url, model="mock-model", quick_eval_n=2)
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        quick_eval = _screen(app).quick_eval
        quick_eval.start(st)
        assert quick_eval.running and _screen(app).query_one("#eval-bar").display
        await wait_until(pilot, lambda: _titled(app, "quick eval done") or _titled(app, "quick eval failed"),
                         timeout=60, what="the eval to end")
        assert _titled(app, "quick eval failed") == []
        assert len(done := _titled(app, "quick eval done")) == 1 and "over 2 rollouts" in done[0]
        assert not quick_eval.running and not _screen(app).query_one("#eval-bar").display


async def test_a_rescore_lands_and_a_superseded_ones_end_is_ignored(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        screen = _screen(app)
        screen.rescores.start(st, quiet=False)
        result = await wait_until(pilot, lambda: st.rescore, timeout=30, what="the re-score")
        assert result.rescored == 11 and st.rescoring is None
        screen.post_message(Rescores.Done("adder", CancellableRun(), None, "an old run's failure", False))
        screen.rescores.start(st, quiet=False)  # a new one, whose end is the one that counts
        await wait_until(pilot, lambda: len(_titled(app, "re-scored")) == 2, timeout=30, what="the second re-score")
        assert st.rescore is not result and _titled(app, "re-score failed") == []  # the old end came first


async def test_a_launch_opens_the_dialog_and_its_end_is_said(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        screen = _screen(app)
        screen.post_message(EnvironmentsScreen.LaunchFinished("adder", "1200-launched", "completed", 1.25))
        await wait_until(pilot, lambda: _titled(app, "launch done"), what="the notification")
        assert "run 1200-launched completed, spent $1.25" in _titled(app, "launch done")[0]
        screen.call_later(screen.launches.open_dialog, st)  # in the screen's context, as its key would
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")


async def test_handoffs_open_the_debugger_on_the_environment(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        st = await _adder(pilot, app)
        screen = _screen(app)
        screen.call_later(screen.handoffs.debug, st)  # in the screen's context, as its key would
        await wait_until(pilot, lambda: isinstance(app.screen, DebuggerScreen), what="the debugger")


async def test_the_editor_says_when_there_is_no_file(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _adder(pilot, app)
        screen = _screen(app)
        screen.call_later(screen.editor.open, None)
        await wait_until(pilot, lambda: any("no source file" in n.message for n in app._notifications),
                         what="the warning")
