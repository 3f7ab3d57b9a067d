"""The new-environment dialog: standalone (pushed with a callback that gets the created path), real
files written by ``workbench.authoring.templates.create_env``; bad names and existing folders stay in the dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App
from textual.widgets import Input, Static
from workbench_app.screens.new_env import NewEnvScreen

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.authoring import discovery
from workbench.config import paths


class Host(App[None]):
    """Any app can push the dialog: it needs nothing of the Workbench app."""

    def __init__(self, screen: NewEnvScreen) -> None:
        super().__init__()
        self.dialog = screen
        self.results: list[Path | None] = []

    def on_mount(self) -> None:
        self.push_screen(self.dialog, self.results.append)


def _error(dialog: NewEnvScreen) -> str:
    return str(dialog.query_one("#new-error", Static).render())


async def _type_name(pilot: Any, dialog: NewEnvScreen, name: str) -> None:
    dialog.query_one("#new-name", Input).value = name
    await wait_until(pilot, lambda: str(dialog.query_one("#new-where", Static).render()).endswith("/" + (name or "NAME")),
                     what="the dialog to take the name")


async def test_create_from_the_tools_template_calls_back_with_the_path(tmp_path: Path) -> None:
    host = Host(NewEnvScreen(directory=tmp_path / "envs"))
    async with host.run_test(size=SIZE) as pilot:
        dialog = host.dialog
        assert dialog.template == "single-turn"
        assert "one prompt, one reply" in screen_text(host)
        await pilot.click("#template-tools")
        await wait_until(pilot, lambda: dialog.template == "tools", what="the tools template")
        assert "ToolLoop over plain Python functions" in screen_text(host)
        dialog.query_one("#new-name", Input).focus()
        await pilot.press(*"shop_bot")
        where = str(dialog.query_one("#new-where", Static).render())
        assert where == f"creates {tmp_path / 'envs' / 'shop_bot'}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: host.results, timeout=30, what="the callback")
    path = tmp_path / "envs" / "shop_bot"
    assert host.results == [path]
    env = discovery.load(str(path))
    assert env.name == "shop_bot" and env.harness.describe() == "ToolLoop(stock, price)"


async def test_default_directory_is_where_discovery_looks() -> None:
    host = Host(NewEnvScreen(template="multi-turn"))
    async with host.run_test(size=SIZE) as pilot:
        await _type_name(pilot, host.dialog, "guesser")
        await pilot.click("#new-ok")
        await wait_until(pilot, lambda: host.results, timeout=30, what="the callback")
    path = host.results[0]
    assert path == paths.user_env_dirs()[0] / "guesser"
    ref = discovery.resolve("guesser")  # found by name, as `workbench eval guesser` would
    assert ref.origin == "user" and ref.path == path
    assert discovery.load_ref(ref).harness.describe().startswith("GuessingGame")


async def test_bad_names_and_existing_folders_stay_in_the_dialog(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    host = Host(NewEnvScreen(directory=tmp_path))
    async with host.run_test(size=SIZE) as pilot:
        dialog = host.dialog
        for name, fragment in (("", "give the new environment a name"), ("2fast", "not a valid environment name"),
                               ("import", "Python keyword"), ("taken", "already exists; nothing was written"),
                               ("arithmetic", "already a bundled environment")):
            await _type_name(pilot, dialog, name)
            assert not _error(dialog)  # typing clears the previous error
            dialog.query_one("#new-name", Input).focus()
            await pilot.press("enter")
            await wait_until(pilot, lambda f=fragment: f in _error(dialog), timeout=30, what=fragment)
            assert host.screen is dialog and not host.results and not dialog.busy
            assert "--dir" not in _error(dialog)  # the dialog has no --dir: said the app's way
        await pilot.press("escape")
        await wait_until(pilot, lambda: host.results, what="the cancel callback")
    assert host.results == [None]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
