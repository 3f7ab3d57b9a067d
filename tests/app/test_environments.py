"""Environments screen: listing, hot reload of a broken/fixed file, validate, quick eval, editor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import ProgressBar
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen

from tests.app.conftest import SIZE, wait_until
from tests.helpers import ADDER_ENV, MockServer, write_file
from workbench.authoring.discovery import EnvRef
from workbench.store import Store

# slow: the whole Environments screen with file watching and quick evals (its controllers alone: test_env_controllers.py)
pytestmark = pytest.mark.slow


def _screen(app: WorkbenchApp) -> EnvironmentsScreen:
    assert isinstance(app.screen, EnvironmentsScreen)
    return app.screen


def _cell(app: WorkbenchApp, name: str, column: str) -> str:
    from textual.widgets import DataTable

    return str(_screen(app).query_one(DataTable).get_cell(name, column))


def _detail(app: WorkbenchApp) -> str:
    from textual.widgets import Static

    return str(_screen(app).query_one("#env-detail", Static).render())


def _notes(app: WorkbenchApp) -> list[Any]:
    return list(app._notifications)


async def _loaded(pilot: Any, app: WorkbenchApp, name: str = "adder", status: str = "ok") -> None:
    await wait_until(pilot, lambda: name in _screen(app).envs and _screen(app).envs[name].status == status,
                     what=f"{name} to be {status}")


async def test_lists_envs_with_version_and_latest_reward(make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        assert _cell(app, "adder", "version") == EnvRef("adder", "path", env_dir / "adder.py").version()
        assert _cell(app, "adder", "tasks") == "20"
        assert _cell(app, "adder", "run") == "1114-aaaaaa"
        assert _cell(app, "adder", "reward") == "0.636"  # 7 of 11 scored rollouts of the fixture run
        assert _cell(app, "adder", "status") == "ok"
        assert "loaded — 20 tasks" in _detail(app)


BROKEN = """
import workbench as wb

def load_environment(:
    pass
"""


async def test_hot_reload_broken_then_fixed(make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    app = make_app(watch=True)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        before = _screen(app).envs["adder"].version
        await wait_until(pilot, lambda: _screen(app).hot_reload.started, what="the watcher to start")
        await pilot.pause(0.3)

        write_file(env_dir / "adder.py", BROKEN)
        await _loaded(pilot, app, status="error")
        assert _cell(app, "adder", "status").startswith("error:")
        assert "syntax error" in _detail(app)
        await wait_until(pilot, lambda: any("failed to load" in (n.title or "") for n in _notes(app)),
                         what="the load-error notification")
        assert _screen(app).envs["adder"].version != before

        write_file(env_dir / "adder.py", ADDER_ENV.replace("n: int = 20", "n: int = 7"))
        await _loaded(pilot, app)
        assert _cell(app, "adder", "tasks") == "7"
        assert _cell(app, "adder", "status") == "ok"

        # A new env file appears as a new row; deleting it removes the row.
        write_file(env_dir / "second.py", ADDER_ENV)
        await _loaded(pilot, app, name="second")
        (env_dir / "second.py").unlink()
        await wait_until(pilot, lambda: "second" not in _screen(app).envs, what="second to disappear")
        assert app.is_running


async def test_broken_env_at_start_does_not_crash(make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    write_file(env_dir / "boom.py", "raise SystemExit('no')\n")
    write_file(env_dir / "noload.py", "x = 1\n")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await _loaded(pilot, app, "boom", "error")
        await _loaded(pilot, app, "noload", "error")
        assert "no load_environment" in _screen(app).envs["noload"].message
        assert app.is_running


async def test_validate_shows_report(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("v")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].report is not None, what="the validation")
        text = _detail(app)
        assert "validate: ok" in text and "gold: correct=1.000" in text


async def test_quick_eval_streams_into_store(make_app: Callable[..., WorkbenchApp],
                                             mock_server: Callable[..., MockServer], store_file: Path) -> None:
    server = mock_server("arithmetic", "--hold")  # every request waits until the test releases them
    app = make_app(base_url=server.base_url, model="mock-model", quick_eval_n=4)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("e")
        await wait_until(pilot, lambda: _screen(app).query_one("#eval-bar").display, what="the progress bar")
        label = _screen(app).query_one("#eval-label")
        await wait_until(pilot, lambda: "/4" in str(label.render()), what="the progress label")
        assert _screen(app).query_one(ProgressBar).total == 4
        await pilot.press("e")  # a second eval is refused while one runs
        await wait_until(pilot, lambda: any("is running" in n.message for n in _notes(app)), what="the refusal")
        server.release()
        await wait_until(pilot, lambda: any(n.title in ("quick eval done", "quick eval failed") for n in _notes(app)),
                         timeout=60, what="the quick eval to finish")
        assert [n.message for n in _notes(app) if n.title == "quick eval failed"] == []
        assert not _screen(app).query_one("#eval-bar").display
        await wait_until(pilot, lambda: _cell(app, "adder", "run") not in ("1114-aaaaaa", "-"),
                         what="the latest run column to update")
        run_id = _cell(app, "adder", "run")
    with Store(store_file) as store:
        run = store.get_run(run_id)
        assert run["status"] == "completed" and run["env_name"] == "adder" and run["n_tasks"] == 4


async def test_quick_eval_unreachable_endpoint_is_a_notification(make_app: Callable[..., WorkbenchApp],
                                                                 closed_port: int) -> None:
    app = make_app(base_url=f"http://127.0.0.1:{closed_port}/v1", model="mock-model")
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("e")
        note = await wait_until(pilot, lambda: next((n for n in _notes(app) if n.title == "quick eval failed"), None),
                                timeout=60, what="the failure notification")
        assert note.severity == "error" and "Traceback" not in note.message
        assert app.is_running and not _screen(app).query_one("#eval-bar").display


async def test_open_editor_headless_explains(make_app: Callable[..., WorkbenchApp], monkeypatch: Any) -> None:
    monkeypatch.setenv("EDITOR", "true")
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("o")
        await wait_until(pilot, lambda: any("adder.py" in n.message for n in _notes(app)), what="a notification")
        assert app.is_running


def test_reloading_a_bundled_env_reimports_it() -> None:
    import sys

    from workbench_app.env_state import load_env

    from workbench.authoring.discovery import discover

    ref = next((r for r in discover() if r.origin == "bundled"), None)
    if ref is None:
        pytest.skip("no bundled environment")
    first = load_env(ref, reload=False)
    assert first.status == "ok", first.message
    before = sys.modules[f"workbench_envs.{ref.name}"]
    again = load_env(ref, reload=True)
    assert again.status == "ok" and sys.modules[f"workbench_envs.{ref.name}"] is not before


def _user_envs() -> list[EnvRef]:
    """What discovery lists in the user env folders (the bundled ones are not what this is about)."""
    from workbench.authoring import discovery

    return [r for r in discovery.discover() if r.origin == "user"]


async def test_the_first_env_made_in_the_app_hot_reloads(store_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh install: the user env folder does not exist when the app starts. `n` makes the first
    environment there; breaking its file shows at once, with no `r` (the folder is watched from the start)."""
    from textual.widgets import Input
    from workbench_app.config import TuiConfig
    from workbench_app.screens.new_env import NewEnvScreen

    from workbench.config import paths

    monkeypatch.setenv("EDITOR", "true")
    folder = paths.user_env_dirs()[0]
    assert not folder.exists()
    app = WorkbenchApp(store_file, config=TuiConfig(), discover_fn=_user_envs, watch=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = _screen(app)
        await wait_until(pilot, lambda: screen.hot_reload.started,
                         what="the watcher to start")
        assert not screen.envs
        await pilot.pause(0.3)
        await pilot.press("n")
        dialog = await wait_until(pilot, lambda: isinstance(app.screen, NewEnvScreen) and app.screen,
                                  what="the new-environment dialog")
        dialog.query_one("#new-name", Input).value = "first_env"
        await pilot.click("#new-ok")
        await wait_until(pilot, lambda: "first_env" in screen.envs and screen.envs["first_env"].status == "ok",
                         timeout=30, what="the new environment to load")
        assert screen.envs["first_env"].ref.path == folder / "first_env"
        await pilot.pause(0.5)  # its folder's creation events have been seen

        write_file(folder / "first_env" / "__init__.py", BROKEN)
        await wait_until(pilot, lambda: screen.envs["first_env"].status == "error", timeout=20,
                         what="the broken file to show without r")
        assert "syntax error" in screen.envs["first_env"].message


def test_watch_dirs_creates_a_missing_user_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench_app.env_state import watch_dirs

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ancestor of these is under it: none watched instead
    missing = tmp_path / "data" / "envs"
    blocked = tmp_path / "a-file" / "envs"
    (tmp_path / "a-file").write_text("not a folder")
    assert watch_dirs([], [missing, blocked]) == [missing.resolve()]
    assert missing.is_dir()


async def test_a_validation_of_other_files_is_dropped_on_reload(make_app: Callable[..., WorkbenchApp],
                                                              env_dir: Path) -> None:
    write_file(env_dir / "adder.py", BROKEN)
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app, status="error")
        await pilot.press("v")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].report_error, what="the failed validation")
        assert "validate: " in _detail(app) and "syntax error" in _detail(app).split("validate: ", 1)[1]

        write_file(env_dir / "adder.py", ADDER_ENV)
        await pilot.press("r")
        await _loaded(pilot, app)
        await pilot.pause(0.1)
        assert "validate:" not in _detail(app)  # it was of the broken file
        await pilot.press("v")
        await wait_until(pilot, lambda: _screen(app).envs["adder"].report is not None, what="the new validation")
        assert "validate: ok" in _detail(app)
        await pilot.press("r")  # the same files again: the report still holds
        await pilot.pause(0.5)
        assert "validate: ok" in _detail(app)


async def test_a_quick_eval_stopped_before_any_rollout_is_not_the_latest_result(
        make_app: Callable[..., WorkbenchApp], mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("arithmetic", latency=30)  # nothing finishes before escape
    app = make_app(base_url=server.base_url, model="mock-model", quick_eval_n=2)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        assert _cell(app, "adder", "run") == "1114-aaaaaa"
        await pilot.press("e")
        label = _screen(app).query_one("#eval-label")
        await wait_until(pilot, lambda: "/2" in str(label.render()), what="the eval to start")
        await pilot.press("escape")
        await wait_until(pilot, lambda: any(n.title in ("quick eval done", "quick eval failed") for n in _notes(app)),
                         timeout=60, what="the eval to stop")
        await pilot.press("r")  # rescan: the interrupted run with no rollout is not shown as the latest
        await pilot.pause(0.5)
        await wait_until(pilot, lambda: _cell(app, "adder", "run") == "1114-aaaaaa", what="the latest run kept")


async def test_quitting_says_so_at_once(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("q")
        assert any(n.title == "quit" and "quitting" in n.message for n in _notes(app))
        await wait_until(pilot, lambda: not app.is_running or app._exit_renderables is not None or app.return_code
                         is not None, what="the app to exit")
