"""A store this process cannot write (here: the immutable flag) still opens for browsing: the app's
store handle falls back to a read-only store and says so; what would write (quick eval, launch, a live
debug rollout) is one clear error, never a crash; nothing in the file changes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.store_access import StoreHandle
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.helpers import immutable


def _notes(app: WorkbenchApp, severity: str | None = None) -> list[Any]:
    return [n for n in app._notifications if severity is None or n.severity == severity]


def test_the_handle_opens_a_store_it_cannot_write_read_only(store_file: Path) -> None:
    with immutable(store_file):
        before = store_file.read_bytes()
        handle = StoreHandle(store_file)
        try:
            assert handle.readonly and "read-only" in handle.readonly_reason
            store = handle.get()
            assert store.readonly
            assert store.conn.execute("SELECT COUNT(*) FROM rollout").fetchone()[0] == 24
        finally:
            handle.close()
        assert store_file.read_bytes() == before


async def test_a_read_only_store_is_browsed_and_writes_are_one_clear_error(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    with immutable(store_file):
        before = store_file.read_bytes()
        app = make_app(mode="traces")
        async with app.run_test(size=SIZE) as pilot:
            assert app.store.readonly
            note = await wait_until(pilot, lambda: next((n for n in _notes(app) if n.title == "read-only store"), None),
                                    what="the read-only notification")
            assert note.severity == "warning" and "open read-only" in note.message
            assert "(read-only)" in app.sub_title
            table = app.screen.query_one(VirtualTable)
            assert isinstance(app.screen, TracesScreen)
            await wait_until(pilot, lambda: table.total == 24 and table.row(23) is not None, what="the rollouts")
            await pilot.press("enter")  # a rollout opens
            await wait_until(pilot, lambda: "What is" in screen_text(app), what="the rollout detail")
            await pilot.press("escape", "3")
            await wait_until(pilot, lambda: "mean reward" in screen_text(app), what="the run summary")

            await pilot.press("1")
            screen = app.screen
            assert isinstance(screen, EnvironmentsScreen)
            await wait_until(pilot, lambda: "adder" in screen.envs and screen.envs["adder"].status == "ok",
                             what="the environment")
            for key, what in (("e", "a quick eval"), ("L", "a launch")):
                app.clear_notifications()
                await pilot.press(key)
                errors = await wait_until(pilot, lambda: _notes(app, "error"), what=f"the refusal of {what}")
                assert len(errors) == 1 and errors[0].message.startswith(f"{what} writes to the store")
                assert "read-only" in errors[0].message and isinstance(app.screen, EnvironmentsScreen)
            assert not screen.query_one("#eval-bar").display
            await pilot.press("R")  # a re-score only reads: it works on a read-only store
            await wait_until(pilot, lambda: screen.envs["adder"].rescore is not None, timeout=30, what="the re-score")

            app.clear_notifications()
            app.open_debugger(env_spec="arithmetic")
            await wait_until(pilot, lambda: type(app.screen).__name__ == "DebuggerScreen", what="the debugger")
            await pilot.press("n")
            errors = await wait_until(pilot, lambda: _notes(app, "error"), what="the refusal of a live rollout")
            assert errors[0].message.startswith("a live rollout writes to the store")
            assert app.is_running
        assert store_file.read_bytes() == before
