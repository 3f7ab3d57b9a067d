"""Launch from the app: ``L`` on an environment opens the dialog; bad input is shown, nothing launched;
confirming calls the launcher (``launch_local`` in the app, a recorder here: the real pipeline is
tested in tests/cloud/test_launch_local.py) with the resolved config; ``S`` on Runs stops a launched run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, RadioButton, Static

from app.main import WorkbenchApp
from app.screens.environments import EnvironmentsScreen
from app.screens.launch import MODAL_REASON, LaunchScreen, parse_inputs
from app.screens.runs import RunsScreen
from cloud_runtime.launch import Launched
from tests.app.conftest import SIZE, T0, screen_text, wait_until
from workbench.store import Store


class Recorder:
    """Stands in for ``launch_local``: records its arguments, reports a start, returns at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any, dict[str, Any]]] = []

    def __call__(self, store: Any, run: Any, **kwargs: Any) -> Launched:
        self.calls.append((store, run, kwargs))
        if kwargs.get("on_start"):
            kwargs["on_start"]("1130-fake01")
        return Launched("1130-fake01", "completed", "hash", 0.125, {"steps": run.loop.max_steps})


def _make(make_app: Callable[..., WorkbenchApp], launcher: Recorder, mode: str = "environments") -> WorkbenchApp:
    app = make_app(mode=mode)
    app.launcher = launcher
    return app


def _messages(app: WorkbenchApp) -> list[str]:
    return [n.message for n in app._notifications]


async def _open_dialog(pilot: Any) -> LaunchScreen:
    app = pilot.app
    screen = app.screen
    assert isinstance(screen, EnvironmentsScreen)
    await wait_until(pilot, lambda: "adder" in screen.envs, what="the environment")
    await pilot.press("L")
    await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")
    return app.screen


def _fill(dialog: LaunchScreen, steps: str = "3", budget: str = "", config: str = "") -> None:
    dialog.query_one("#launch-steps", Input).value = steps
    dialog.query_one("#launch-budget", Input).value = budget
    dialog.query_one("#launch-config", Input).value = config


def _error(dialog: LaunchScreen) -> str:
    return str(dialog.query_one("#launch-error", Static).render())


def test_parse_inputs(tmp_path: Path) -> None:
    assert parse_inputs("5", "", "") == (5, None, None)
    assert parse_inputs(" 7 ", "$1.5", "") == (7, 1.5, None)
    for steps, budget, msg in (("x", "", "whole number"), ("0", "", "at least 1"), ("3", "abc", "number of USD"),
                               ("3", "-1", "negative"), ("3", "nan", "negative")):
        with pytest.raises(ValueError, match=msg):
            parse_inputs(steps, budget, "")
    with pytest.raises(ValueError, match="does not exist"):
        parse_inputs("3", "", str(tmp_path / "missing.toml"))


async def test_dialog_shows_backends_and_bad_budget_launches_nothing(make_app: Callable[..., WorkbenchApp]) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        assert dialog.query_one("#backend-local", RadioButton).value
        modal = dialog.query_one("#backend-modal", RadioButton)
        assert modal.disabled and MODAL_REASON in str(modal.label)
        assert MODAL_REASON in screen_text(app)
        _fill(dialog, budget="lots")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "budget must be a number" in _error(dialog), what="the inline error")
        assert app.screen is dialog and not rec.calls
        _fill(dialog, steps="many")
        await pilot.press("enter")
        await wait_until(pilot, lambda: "whole number" in _error(dialog), what="the steps error")
        await pilot.press("escape")
        assert isinstance(app.screen, EnvironmentsScreen)
        await pilot.pause(0.2)
        assert not rec.calls


async def test_bad_config_file_shows_the_config_error(make_app: Callable[..., WorkbenchApp],
                                                      tmp_path: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    bad = tmp_path / "bad.toml"
    bad.write_text("[loop]\nmax_steps = 2\n[nonsense]\nx = 1\n")
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, config=str(tmp_path / "missing.toml"))
        await pilot.press("enter")
        await wait_until(pilot, lambda: "does not exist" in _error(dialog), what="the missing-file error")
        _fill(dialog, config=str(bad))
        await pilot.press("enter")
        await wait_until(pilot, lambda: "unknown section 'nonsense'" in _error(dialog), timeout=60,
                         what="the ConfigError text")
        assert app.screen is dialog and not rec.calls and not dialog.busy


async def test_confirm_calls_the_launcher(make_app: Callable[..., WorkbenchApp], env_dir: Path,
                                          tmp_path: Path) -> None:
    rec = Recorder()
    app = _make(make_app, rec)
    cfg = tmp_path / "run.toml"
    cfg.write_text("[loop]\nmax_steps = 50\nrollouts_per_task = 2\n")
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="3", budget="0.5", config=str(cfg))
        await pilot.click("#launch-ok")
        await wait_until(pilot, lambda: rec.calls, timeout=60, what="the launch")
        store, run, kwargs = rec.calls[0]
        assert isinstance(store, Store)
        assert run.env == str(env_dir / "adder.py")
        assert run.loop.max_steps == 3 and run.loop.rollouts_per_task == 2  # the flag beats the file
        assert kwargs["budget_usd"] == 0.5 and kwargs["threads"] == 1 and callable(kwargs["on_start"])
        assert isinstance(app.screen, EnvironmentsScreen)
        await wait_until(pilot, lambda: any("run 1130-fake01 completed, spent $0.1250" in m for m in _messages(app)),
                         what="the done notification")
        assert any("run 1130-fake01 started" in m for m in _messages(app))


async def test_launcher_failure_is_a_notification(make_app: Callable[..., WorkbenchApp]) -> None:
    from workbench.errors import ConfigError

    def failing(store: Any, run: Any, **kwargs: Any) -> Launched:
        raise ConfigError("the bundle holds a secret")

    app = make_app()
    app.launcher = failing
    async with app.run_test(size=SIZE) as pilot:
        dialog = await _open_dialog(pilot)
        _fill(dialog, steps="2")
        await pilot.press("enter")
        await wait_until(pilot, lambda: any("the bundle holds a secret" in m for m in _messages(app)), timeout=60,
                         what="the failure notification")
        assert isinstance(app.screen, EnvironmentsScreen)


async def test_stop_key_on_runs(make_app: Callable[..., WorkbenchApp], store_file: Path, tmp_path: Path) -> None:
    stream = tmp_path / "stream"
    with Store(store_file) as store:  # a launched run, still running: the newest, so the first row
        store.create_run("1114-zlaunch", kind="train", env_name="adder", model="m", status="running",
                         created_at=T0 + 7200, config={"launch": {"backend": "local", "budget_usd": None,
                                                                  "stream": {"kind": "dir", "path": str(stream)}}})
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        assert screen._selected_id() == "1114-zlaunch"
        await pilot.press("S")
        await wait_until(pilot, lambda: any("asked run 1114-zlaunch to stop" in m for m in _messages(app)),
                         what="the stop notification")
        assert (stream / "stop").exists()
        await pilot.press("down")
        await wait_until(pilot, lambda: screen._selected_id() == "1114-bbbbbb", what="an eval run")
        await pilot.press("S")
        await wait_until(pilot, lambda: any("was not launched" in m for m in _messages(app)),
                         what="the not-launched notification")
