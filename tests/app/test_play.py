"""The Play screen: a person writes each assistant turn of an environment's own harness in the app — a tool
call from the form built from the tool's JSON schema (checked, the error on the field it names), then a text
reply; the rollout is scored and stored with source human. A bad argument and escape store nothing."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Input, Select, TextArea
from workbench_app.main import WorkbenchApp
from workbench_app.screens.debugger import DebuggerScreen
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.play import ConfirmStop, PlayScreen
from workbench_app.widgets.tool_form import ToolForm, fields_of

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.workbench.test_play import CALC

# slow: the Play screen through each harness turn, with SVG snapshots
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _calc(env_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """CALC (a ToolLoop with add(a: int, b: int)) beside adder; the player is alice."""
    (env_dir / "calc.py").write_text(CALC)
    monkeypatch.setenv("WORKBENCH_USER_NAME", "alice")
    monkeypatch.chdir(tmp_path)


def _human_rows(store_file: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    db = sqlite3.connect(store_file)
    try:
        rollouts = db.execute("SELECT id, reward, messages FROM rollout WHERE source = 'human'").fetchall()
        runs = db.execute("SELECT id, model FROM run WHERE kind = 'play'").fetchall()
    finally:
        db.close()
    return rollouts, runs


async def _open_play(pilot: Any, app: WorkbenchApp) -> PlayScreen:
    """p on calc in the Environments list: the Play screen, waiting for the first turn."""
    await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen)
                     and app.screen.envs.get("calc") is not None and app.screen.envs["calc"].status == "ok",
                     what="calc loaded")
    table = app.screen.query_one(DataTable)
    table.move_cursor(row=table.get_row_index("calc"))
    await pilot.press("p")
    screen = await wait_until(pilot, lambda: isinstance(app.screen, PlayScreen) and app.screen, what="the Play screen")
    await wait_until(pilot, lambda: screen.waiting, what="the first turn")
    return screen


async def _choose_add(pilot: Any, screen: PlayScreen) -> ToolForm:
    """The tool select, opened with the keyboard: below the blank, add."""
    form = screen.query_one(ToolForm)
    form.query_one("#tool-select", Select).focus()
    await pilot.press("enter", "down", "enter")
    await wait_until(pilot, lambda: form.tool == "add" and form.field_widget("b") is not None, what="add chosen")
    return form


async def _type_into(pilot: Any, form: ToolForm, field: str, text: str) -> None:
    widget = form.field_widget(field)
    assert isinstance(widget, Input)
    widget.focus()
    await pilot.press(*text)


async def test_play_a_tool_env_and_the_rollout_is_stored_as_human(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_play(pilot, app)
        assert "What is 2+3?" in screen_text(app)
        form = await _choose_add(pilot, screen)
        assert [(f.name, f.kind, f.required) for f in form.fields] == [("a", "integer", True), ("b", "integer", True)]
        await _type_into(pilot, form, "a", "2")
        await _type_into(pilot, form, "b", "3")
        await pilot.press("ctrl+s")
        # the environment's own tool ran on the call: its answer is in the transcript, and it is turn 2
        await wait_until(pilot, lambda: screen.waiting and screen.turns_written == 1, what="the second turn")
        assert [m["role"] for m in screen.messages] == ["user", "assistant", "tool"]
        assert screen.messages[2]["content"] == "5" and form.tool is None
        assert app.focused is screen.query_one("#play-reply", TextArea)
        await pilot.press("5", "ctrl+s")
        await wait_until(pilot, lambda: screen.state == "done", what="the rollout's end")
        result = screen.result
        assert result.reward == 1.0 and result.rewards == {"correct": 1.0} and result.metrics == {"tool_calls": 1.0}
        text = screen_text(app)
        assert result.rollout_id in text and "total reward" in text and "correct" in text and "source human" in text
        await pilot.press("escape")  # back to the list, no confirm: it is stored
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen), what="back to the list")
    [(rid, reward, messages)], [(_, model)] = _human_rows(store_file)
    assert rid == result.rollout_id and reward == 1.0 and model == "human:alice"
    assert '"tool_calls"' in messages


async def test_a_bad_argument_is_shown_on_its_field_and_nothing_is_stored(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_play(pilot, app)
        form = await _choose_add(pilot, screen)
        await _type_into(pilot, form, "a", "x")
        await _type_into(pilot, form, "b", "3")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: form.field_error("a"), what="the error on a")
        assert "'x' is not of type 'integer'" in form.field_error("a") and form.field_error("b") == ""
        assert screen.waiting and screen.turns_written == 0  # still this turn: nothing was sent
        assert app.focused is form.field_widget("a")
        # a required field left empty is named too
        form.field_widget("a").value = ""  # type: ignore[union-attr]
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: "required" in form.field_error("a"), what="a is required")
        await pilot.press("escape")  # no turn written: it stops without asking
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen), what="back to the list")
    assert _human_rows(store_file) == ([], [])


async def test_escape_asks_once_a_turn_is_written_and_stops_storing_nothing(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _open_play(pilot, app)
        form = await _choose_add(pilot, screen)
        await _type_into(pilot, form, "a", "2")
        await _type_into(pilot, form, "b", "3")
        await pilot.press("enter")  # enter in an argument field sends the call too
        await wait_until(pilot, lambda: screen.waiting and screen.turns_written == 1, what="the second turn")
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmStop), what="the confirm")
        await pilot.press("n")  # keep playing
        await wait_until(pilot, lambda: app.screen is screen, what="the Play screen again")
        assert screen.waiting
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmStop), what="the confirm")
        await pilot.press("y")
        await wait_until(pilot, lambda: isinstance(app.screen, EnvironmentsScreen), what="back to the list")
        assert any("nothing was stored" in n.message for n in app._notifications)  # noqa: SLF001
    assert _human_rows(store_file) == ([], [])


async def test_p_in_the_debugger_plays_its_task(make_app: Callable[..., WorkbenchApp], env_dir: Path) -> None:
    """The Debugger has a task # field: p plays that task of the environment picked (here one out of range)."""
    app = make_app(mode="debugger")
    async with app.run_test(size=SIZE) as pilot:
        dbg = app.screen
        assert isinstance(dbg, DebuggerScreen)
        app.open_debugger(env_spec=str(env_dir / "calc.py"))
        await wait_until(pilot, lambda: dbg.query_one("#dbg-env", Select).value == str(env_dir / "calc.py"),
                         what="calc picked")
        dbg.query_one("#dbg-task", Input).value = "3"
        dbg.query_one("#dbg-messages").focus()
        await pilot.press("p")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, PlayScreen) and app.screen, what="Play")
        assert screen.task_index == 3
        await wait_until(pilot, lambda: screen.state == "failed", what="the out-of-range task")
        assert "has 1 tasks" in screen_text(app) and "task 3 is out of range" in screen_text(app)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is dbg, what="back to the Debugger")


def test_the_form_has_one_typed_field_per_property() -> None:
    schema = {"type": "object", "required": ["n", "mode"], "properties": {
        "n": {"type": "integer"}, "x": {"type": ["number", "null"]}, "s": {"type": "string", "description": "d"},
        "flag": {"type": "boolean"}, "mode": {"enum": ["fast", "slow"]}, "opts": {"type": "object"}}}
    got = [(f.name, f.kind, f.required, f.choices) for f in fields_of(schema)]
    assert got == [("n", "integer", True, []), ("x", "number", False, []), ("s", "string", False, []),
                   ("flag", "boolean", False, [True, False]), ("mode", "enum", True, ["fast", "slow"]),
                   ("opts", "json", False, [])]


def test_play_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """The Play screen on calc's first turn at 80×24: the task, the reply box, add chosen with a=x refused."""

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        screen = await _open_play(pilot, app)
        form = await _choose_add(pilot, screen)
        await _type_into(pilot, form, "a", "x")
        await _type_into(pilot, form, "b", "3")
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: form.field_error("a"), what="the error on a")
        for w in [*screen.query(Input), *screen.query(TextArea)]:
            w.cursor_blink = False  # the focused field's cursor is drawn, not blinking: the same on every run
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=run_before)
