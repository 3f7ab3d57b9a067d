"""A key typed right after a dialog's closing key acts on the screen beneath: a :class:`Dialog`'s keys are
priority bindings, so the dialog is gone before the next key is routed (Textual routes a key to the
focused widget as it arrives, and an input in a closing dialog would type it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.dialog import Dialog
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.help import HelpScreen
from workbench_app.screens.new_env import NewEnvScreen

from tests.app.conftest import SIZE, wait_until


class AskName(Dialog["str | None"]):
    """A dialog with an input focused, as the app's dialogs have."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def compose(self) -> ComposeResult:
        yield Input(id="ask-name")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)


def test_a_dialogs_own_keys_are_priority_bindings() -> None:
    assert all(b.priority for b in AskName.BINDINGS if isinstance(b, Binding))
    assert all(b.priority for b in HelpScreen.BINDINGS if isinstance(b, Binding))


async def _type_at_once(app: WorkbenchApp, *keys: str) -> None:
    """The keys as a fast typist sends them: all queued before the app handles the first."""
    for key in keys:
        app.post_message(events.Key(key, key if len(key) == 1 else None))


async def test_the_key_after_a_dialog_closes_acts(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, EnvironmentsScreen)
        await wait_until(pilot, lambda: screen.envs.get("adder") and screen.envs["adder"].status == "ok",
                         what="adder to load")

        asked = AskName()
        app.push_screen(asked)
        await wait_until(pilot, lambda: asked.is_mounted and asked.query(Input) and app.focused is asked.query_one(Input),
                         what="the dialog's input")
        field = asked.query_one(Input)
        await _type_at_once(app, "escape", "n")  # n: New environment, on Environments
        await wait_until(pilot, lambda: isinstance(app.screen, NewEnvScreen), what="n to act on Environments")
        assert field.value == ""  # not typed into the closing dialog
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is screen, what="Environments again")

        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await _type_at_once(app, "escape", "n")
        await wait_until(pilot, lambda: isinstance(app.screen, NewEnvScreen), what="n after help")
