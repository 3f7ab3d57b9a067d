"""Play: the tool form refuses a required argument left empty before anything is sent (one line under the
field, naming it), and the stop confirm says "turn" and "turns" as English does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input, Select
from workbench_app.main import WorkbenchApp
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.play import ConfirmStop, PlayScreen, stop_question
from workbench_app.widgets.tool_form import ToolForm

from tests.app.conftest import screen_text, wait_until
from tests.app.test_play import _choose_add, _open_play, _type_into
from workbench.rollouts.human import ReplyError


@pytest.mark.parametrize(("turns", "expected"), [
    (1, "The 1 turn you wrote is not stored"),
    (2, "The 2 turns you wrote are not stored"),
    (11, "The 11 turns you wrote are not stored"),
])
def test_the_stop_question_agrees_with_its_number(turns: int, expected: str) -> None:
    assert stop_question(turns).startswith(f"Stop playing? {expected} (the rollout has not ended).")


TOOL = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "required": ["text", "n", "mode"],
    "properties": {"text": {"type": "string"}, "n": {"type": "integer"}, "mode": {"enum": ["a", "b"]},
                   "tag": {"type": "string"}}}}}]


class FormApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ToolForm(id="form")


@pytest.mark.parametrize(("values", "error"), [
    ({"text": "", "n": "1", "mode": 0}, ("text", "text is required: fill in a value")),
    ({"text": "hi", "n": "", "mode": 0}, ("n", "n is required: fill in a value")),
    ({"text": "hi", "n": "1", "mode": None}, ("mode", "mode is required: choose a value")),
    ({"text": "", "n": "", "mode": None}, ("text", "text is required: fill in a value")),  # the first one named
    ({"text": "hi", "n": "1", "mode": 1}, None),  # tag, not required, is left out
])
async def test_a_required_argument_left_empty_is_refused(values: dict[str, Any],
                                                        error: tuple[str, str] | None) -> None:
    app = FormApp()
    async with app.run_test(size=(80, 24)) as pilot:
        form = app.query_one(ToolForm)
        form.set_tools(TOOL)
        form.choose("note")
        await wait_until(pilot, lambda: form.field_widget("mode") is not None, what="the form")
        await pilot.pause()  # the fields mounted: a value set now stays
        for name, value in values.items():
            widget = form.field_widget(name)
            if isinstance(widget, Input) or isinstance(widget, Select) and value is not None:
                widget.value = value
        await pilot.pause()
        if error is None:
            assert form.arguments() == {"text": "hi", "n": 1, "mode": "b"}
            return
        with pytest.raises(ReplyError) as caught:
            form.arguments()
        assert (caught.value.field, caught.value.message) == error
        form.show_error(caught.value.message, caught.value.field)
        await pilot.pause()
        assert form.field_error(error[0]) == error[1] and app.focused is form.field_widget(error[0])


# slow: the Play screen through the calc environment's harness
@pytest.mark.slow
async def test_play_refuses_an_empty_required_field_and_sends_nothing(
        make_app: Callable[..., WorkbenchApp], env_dir: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    from tests.workbench.test_play import CALC

    (env_dir / "calc.py").write_text(CALC)
    monkeypatch.setenv("WORKBENCH_USER_NAME", "alice")
    monkeypatch.chdir(tmp_path)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_play(pilot, app)
        form = await _choose_add(pilot, screen)
        await _type_into(pilot, form, "b", "3")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: form.field_error("a"), what="the error on a")
        assert form.field_error("a") == "a is required: fill in a value" and form.field_error("b") == ""
        assert screen.waiting and screen.turns_written == 0  # nothing was sent
        await _type_into(pilot, form, "a", "2")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: screen.waiting and screen.turns_written == 1, what="the second turn")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmStop), what="the confirm")
        assert "The 1 turn you wrote is not stored" in screen_text(app).replace("\n", " ").replace("  ", " ")
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen), what="back to the list")
        assert isinstance(screen, PlayScreen)


def test_play_required_field_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp],
                                            env_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """calc's first turn at 80×24 with add chosen and a left empty: the one line under a."""
    from tests.workbench.test_play import CALC

    (env_dir / "calc.py").write_text(CALC)
    monkeypatch.setenv("WORKBENCH_USER_NAME", "alice")
    monkeypatch.chdir(tmp_path)

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        screen = await _open_play(pilot, app)
        form = await _choose_add(pilot, screen)
        await _type_into(pilot, form, "b", "3")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: form.field_error("a"), what="the error on a")
        for w in screen.query(Input):
            w.cursor_blink = False
        from textual.widgets import TextArea

        for t in screen.query(TextArea):
            t.cursor_blink = False
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
