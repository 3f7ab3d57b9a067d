"""Environments screen: listing, hot reload of a broken/fixed file, validate, quick eval, editor."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import ProgressBar

from app.main import WorkbenchApp
from app.screens.environments import EnvironmentsScreen
from tests.app.conftest import SIZE, wait_until
from tests.helpers import ADDER_ENV, MockServer, write_file
from workbench.authoring.discovery import EnvRef
from workbench.store import Store


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
        await wait_until(pilot, lambda: _screen(app)._stop_watch is not None, what="the watcher to start")
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
    server = mock_server("arithmetic", latency=0.4)
    app = make_app(base_url=server.base_url, model="mock-model", quick_eval_n=4)
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("e")
        assert _screen(app).query_one("#eval-bar").display
        label = _screen(app).query_one("#eval-label")
        await wait_until(pilot, lambda: "/4" in str(label.render()), what="the progress label")
        assert _screen(app).query_one(ProgressBar).total == 4
        await pilot.press("e")  # a second eval is refused while one runs
        await wait_until(pilot, lambda: any("is running" in n.message for n in _notes(app)), what="the refusal")
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

    from app.env_state import load_env
    from workbench.authoring.discovery import discover

    ref = next((r for r in discover() if r.origin == "bundled"), None)
    if ref is None:
        pytest.skip("no bundled environment")
    first = load_env(ref, reload=False)
    assert first.status == "ok", first.message
    before = sys.modules[f"envs.{ref.name}"]
    again = load_env(ref, reload=True)
    assert again.status == "ok" and sys.modules[f"envs.{ref.name}"] is not before
