"""The app shell: screen keys, help, command palette, theme, XDG config and keymap, Runs summary."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from workbench_app.config import config_path, load_config
from workbench_app.main import WorkbenchApp, run_app
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.help import HelpScreen
from workbench_app.screens.runs import RunsScreen
from workbench_app.screens.traces import TracesScreen

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.errors import StoreError


async def test_number_keys_switch_screens(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, EnvironmentsScreen)
        await pilot.press("2")
        assert isinstance(app.screen, TracesScreen)
        await pilot.press("3")
        assert isinstance(app.screen, RunsScreen)
        await pilot.press("1")
        assert isinstance(app.screen, EnvironmentsScreen)


async def test_help_lists_screen_and_app_keys(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        actions = {desc for _, desc, _ in app.screen._rows}
        assert {"Export", "Sort", "Search", "Clear filters", "Help", "Quit", "Traces"} <= actions
        await pilot.press("escape")
        assert isinstance(app.screen, TracesScreen)


async def test_command_palette_goes_to_a_screen(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press(*"go to runs")
        await wait_until(pilot, lambda: "Go to Runs" in screen_text(app), what="the palette hit")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, RunsScreen), what="the Runs screen")


async def test_command_palette_launches_from_another_screen(make_app: Callable[..., WorkbenchApp]) -> None:
    """An environment action from the palette goes to Environments and acts on the selected env."""
    from workbench_app.screens.launch import LaunchScreen

    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+p")
        await pilot.press(*"launch a training")
        await wait_until(pilot, lambda: "Launch a training run" in screen_text(app), what="the palette hit")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch dialog")
        assert "adder" in screen_text(app)


async def test_theme_toggle(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        assert app.theme == "textual-dark"
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"
        await pilot.press("ctrl+t")
        assert app.theme == "textual-dark"


def test_config_file_is_read_from_xdg(tmp_path: Path) -> None:
    path = config_path()
    assert path == tmp_path / "xdg-config" / "workbench" / "tui.toml"
    path.parent.mkdir(parents=True)
    path.write_text('theme = "nord"\nquick_eval_n = 3\nbase_url = "http://x/v1"\n'
                    '[keymap]\n"screen.runs" = "f3"\n"env.eval" = 7\n')
    cfg = load_config()
    assert (cfg.theme, cfg.quick_eval_n, cfg.base_url) == ("nord", 3, "http://x/v1")
    assert cfg.keymap == {"screen.runs": "f3"}
    assert len(cfg.problems) == 1 and "env.eval" in cfg.problems[0]


def test_bad_config_gives_defaults_and_a_problem(tmp_path: Path) -> None:
    path = config_path()
    path.parent.mkdir(parents=True)
    path.write_text("theme = [oops")
    cfg = load_config()
    assert cfg.theme == "textual-dark" and cfg.problems and "not valid TOML" in cfg.problems[0]


async def test_keymap_override_and_config_problems(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(keymap={"screen.runs": "f3"}, theme="no-such-theme")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")  # the old key no longer switches
        assert isinstance(app.screen, EnvironmentsScreen)
        await pilot.press("f3")
        assert isinstance(app.screen, RunsScreen)
        assert app.theme == "textual-dark"
        await wait_until(pilot, lambda: any("unknown theme" in n.message for n in app._notifications),
                         what="the config problem notification")


async def test_runs_summary(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: "mean reward   0.700 ± 0.153" in screen_text(app), what="the summary")
        text = screen_text(app)
        assert "1114-bbbbbb" in text and "1114-aaaaaa" in text
        for frag in ("pass@1 0.583", "correct  0.700", "timeout  1", "152 prompt / 37 completion", "$0.0078"):
            assert frag in text, frag
        await pilot.press("down")
        await wait_until(pilot, lambda: "adder @ 0123456789ab" in screen_text(app), what="the other run")


def test_run_app_on_a_bad_store_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        run_app(str(bad))


def test_store_handle_never_closes_a_connection_under_a_running_thread(store_file: Path) -> None:
    """The app quitting while a worker is mid-query must not close that worker's connection under it
    (SQLite would crash the process): it closes with its thread. Finished threads' stores are closed."""
    import sqlite3
    import threading

    from workbench_app.store_access import StoreHandle

    handle = StoreHandle(store_file)
    main_store = handle.get()
    busy, release, results = threading.Event(), threading.Event(), []

    def worker() -> None:
        store = handle.get()
        busy.set()
        release.wait(10)
        results.append(store.conn.execute("SELECT COUNT(*) FROM rollout").fetchone()[0])  # after close()

    done = threading.Thread(target=lambda: handle.get())
    done.start()
    done.join()
    running = threading.Thread(target=worker)
    running.start()
    assert busy.wait(10)
    handle.close()
    release.set()
    running.join(10)
    assert results and results[0] > 0  # the running thread's connection was left open
    with pytest.raises(sqlite3.ProgrammingError):  # this thread's own store was closed
        main_store.conn.execute("SELECT 1")
