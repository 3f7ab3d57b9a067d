"""Traces screen: listing, filters, sort, rollout detail, export, and paging through a large store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, Static
from workbench_app.config import TuiConfig
from workbench_app.main import WorkbenchApp
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, _record, screen_text, wait_until
from workbench.store import Store

# slow: a Pilot run per filter, sort and page of the Traces screen
pytestmark = pytest.mark.slow


def _traces(app: WorkbenchApp) -> TracesScreen:
    assert isinstance(app.screen, TracesScreen), app.screen
    return app.screen


def _table(app: WorkbenchApp) -> VirtualTable:
    return _traces(app).query_one(VirtualTable)


def _loaded_ids(app: WorkbenchApp) -> list[str]:
    t = _table(app)
    rows = [t.row(i) for i in range(t.row_count)]
    return [r.id for r in rows if r is not None]


async def _settled(pilot: Any, app: WorkbenchApp, total: int) -> None:
    t = _table(app)
    await wait_until(pilot, lambda: t.total == total and len(_loaded_ids(app)) == total,
                     what=f"{total} rows (have total={t.total})")


async def _type(pilot: Any, app: WorkbenchApp, wid: str, text: str) -> None:
    inp = _traces(app).query_one(f"#{wid}", Input)
    inp.focus()
    inp.value = ""
    await pilot.press(*text, "enter")


async def test_lists_all_rollouts_newest_first(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        ids = _loaded_ids(app)
        assert ids[0] == "1114-bbbbbb.11.0" and ids[-1] == "1114-aaaaaa.0.0"
        status = _traces(app).query_one("#traces-status", Static)
        # The count comes from a worker; the status line shows it once that worker reports.
        await wait_until(pilot, lambda: "24 rollouts" in str(status.render()), what="the count in the status line")
        assert "newest first" in str(status.render())


async def test_filters_change_the_rows(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await _type(pilot, app, "f-env", "adder")
        await _settled(pilot, app, 12)
        assert all(i.startswith("1114-aaaaaa.") for i in _loaded_ids(app))

        await _type(pilot, app, "f-min", "1")
        await _settled(pilot, app, 7)
        assert all(_table(app).row(i).reward == 1.0 for i in range(7))

        await pilot.press("escape", "c")  # back to the table; clear: everything again
        await _settled(pilot, app, 24)

        await _type(pilot, app, "f-error", "timeout")
        await _settled(pilot, app, 2)
        assert sorted(_loaded_ids(app)) == ["1114-aaaaaa.5.0", "1114-bbbbbb.5.0"]

        await pilot.press("escape", "c")
        await _settled(pilot, app, 24)
        await _type(pilot, app, "f-search", "21")  # full text: only task 10 answers "21"
        await _settled(pilot, app, 2)
        assert sorted(_loaded_ids(app)) == ["1114-aaaaaa.10.0", "1114-bbbbbb.10.0"]
        assert "text=21" in str(_traces(app).query_one("#traces-status", Static).render())


async def test_sort_cycles(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press("s")  # oldest first
        await _settled(pilot, app, 24)
        assert _loaded_ids(app)[0] == "1114-aaaaaa.0.0"
        await pilot.press("s")  # reward high to low: unrewarded (failed) rollouts last
        await _settled(pilot, app, 24)
        rewards = [_table(app).row(i).reward for i in range(24)]
        assert rewards[0] == 1.0 and rewards[-1] is None


async def test_open_rollout_detail_and_back(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press(*["down"] * 9)  # newest first: row 9 is run b, task 2 (the tool call)
        assert _table(app).current_row().id == "1114-bbbbbb.2.0"
        await pilot.press("enter")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the detail screen")
        assert screen.rollout["id"] == "1114-bbbbbb.2.0"
        await pilot.pause()
        text = screen_text(app)
        assert "→ add" in text and '"a": 2' in text  # the tool call, its arguments
        assert screen.query_one("#message-3").border_title == "tool (add)"
        assert "correct   reward  1.000" in text and "words     metric  4.000" in text
        await pilot.press("escape")
        assert isinstance(app.screen, TracesScreen)
        assert _table(app).cursor == 9


async def test_detail_of_failed_rollout_shows_error(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press(*["down"] * 6, "enter")  # run b, task 5: timeout
        await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the detail screen")
        await pilot.pause()
        assert "timeout in model: timeout happened" in screen_text(app)


def _export_note(app: WorkbenchApp) -> Any:
    return next((n for n in app._notifications if n.title == "export done"), None)


async def _export_dialog(pilot: Any, app: WorkbenchApp) -> Any:
    from workbench_app.screens.export import ExportScreen

    await pilot.press("escape", "x")
    return await wait_until(pilot, lambda: isinstance(app.screen, ExportScreen) and app.screen,
                            what="the export dialog")


async def test_export_current_filter(make_app: Callable[..., WorkbenchApp], tmp_path: Path) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await _type(pilot, app, "f-run", "1114-bbbbbb")
        await _settled(pilot, app, 12)
        dialog = await _export_dialog(pilot, app)
        offered = Path(dialog.query_one("#export-path", Input).value)
        assert offered.parent == tmp_path / "exports"  # the settings' export_dir, set by the fixture
        assert "12 rollouts · run_id=1114-bbbbbb" in screen_text(app)
        await pilot.press("enter")
        note = await wait_until(pilot, lambda: _export_note(app), what="the export")
        assert isinstance(app.screen, TracesScreen)
    path = Path(note.message.rsplit(" to ", 1)[1])
    assert path == offered and path.is_absolute()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 12 and {r["run_id"] for r in rows} == {"1114-bbbbbb"}
    assert rows[0]["messages"][0]["role"] == "system" and "rewards" in rows[0]


async def test_runs_t_opens_traces_of_run(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: getattr(app.screen, "runs", None), what="the runs")
        await pilot.press("down", "t")  # the older run: adder
        await wait_until(pilot, lambda: isinstance(app.screen, TracesScreen), what="traces")
        await _settled(pilot, app, 12)
        assert _traces(app).filters.run_id == "1114-aaaaaa"


async def test_returning_to_traces_tells_of_new_rollouts(make_app: Callable[..., WorkbenchApp],
                                                         store_file: Path) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press("3")
        with Store(store_file) as store:
            w = store.writer()
            w.submit([_record("1114-aaaaaa", "adder", "mock-model", 20 + i, reward=1.0) for i in range(3)])
            w.close()
        await pilot.press("2")
        status = _traces(app).query_one("#traces-status", Static)
        await wait_until(pilot, lambda: "+3 since loaded" in str(status.render()), what="the new-rollouts hint")
        assert _table(app).total == 24  # the list did not move
        await pilot.press("r")
        await _settled(pilot, app, 27)


async def test_export_defaults_to_the_data_folder_not_the_working_directory(
        make_app: Callable[..., WorkbenchApp], tmp_path: Path, monkeypatch: Any) -> None:
    from workbench.config import paths

    cwd = tmp_path / "started-here"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    app = make_app(mode="traces")
    app.config = TuiConfig()  # nothing set by the user: export_dir is the settings' default, the cwd
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        dialog = await _export_dialog(pilot, app)
        offered = Path(dialog.query_one("#export-path", Input).value)
        assert offered.parent == paths.data_dir() / "exports"
        await pilot.press("enter")
        note = await wait_until(pilot, lambda: _export_note(app), what="the export")
    assert note.message == f"exported 24 rollouts to {offered}"
    assert len(offered.read_text().splitlines()) == 24
    assert list(cwd.iterdir()) == []


async def test_export_escape_cancels_and_bad_paths_write_nothing(make_app: Callable[..., WorkbenchApp],
                                                                 tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    folder = tmp_path / "a-folder"
    folder.mkdir()
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await _export_dialog(pilot, app)
        await pilot.press("escape")
        assert isinstance(app.screen, TracesScreen)
        await pilot.pause(0.2)
        assert not (tmp_path / "exports").exists() and _export_note(app) is None

        dialog = await _export_dialog(pilot, app)
        field = dialog.query_one("#export-path", Input)
        for bad, says in ((folder, "is a folder"), (a_file / "sub" / "out.jsonl", f"{a_file} is a file")):
            app.clear_notifications()
            field.value = str(bad)
            await pilot.press("enter")
            notes = await wait_until(pilot, lambda: [n for n in app._notifications if n.severity == "error"],
                                     what=f"the error for {bad}")
            assert len(notes) == 1 and says in notes[0].message, notes[0].message
            assert notes[0].title == "cannot export there"
            assert app.screen is dialog  # still asking: nothing written
        field.value = "mine.jsonl"  # a bare name goes in the export folder
        await pilot.press("enter")
        note = await wait_until(pilot, lambda: _export_note(app), what="the export")
    assert note.message.endswith(str(tmp_path / "exports" / "mine.jsonl"))
    assert sorted(p.name for p in folder.iterdir()) == [] and a_file.read_text() == "not a folder"


async def test_right_takes_the_suggestion_and_typing_never_fires_table_keys(
        make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        screen = _traces(app)
        env = screen.query_one("#f-env", Input)
        await wait_until(pilot, lambda: env.suggester is not None, what="the known values")
        env.focus()
        await pilot.press(*"word", "enter")  # the suggestion shows "wordplay", but Enter filters by what was typed
        await _settled(pilot, app, 0)
        assert env.value == "word" and screen.filters.env == "word"
        await pilot.press("right", "enter")  # → at the end takes the suggestion
        await _settled(pilot, app, 12)
        assert env.value == "wordplay" and screen.filters.env == "wordplay"
        assert screen.focused is env  # the focus stays in the field

        await pilot.press(*"cmr")  # table keys elsewhere (clear filters, mark, refresh): text here
        await pilot.pause(0.5)
        assert env.value == "wordplaycmr" and screen.marked is None
        assert screen.filters.env == "wordplaycmr"  # typed, not cleared
        await pilot.press(*["backspace"] * 3, "enter")
        await _settled(pilot, app, 12)

        await pilot.press("escape")  # back to the table, where the keys are the table's again
        assert screen.focused is _table(app)
        await pilot.press("m")
        assert screen.marked == "1114-bbbbbb.11.0"
        await pilot.press("c")
        await _settled(pilot, app, 24)
        assert env.value == ""


def _calls_text(calls: list[dict[str, Any]]) -> list[str]:
    from rich.console import Console
    from workbench_app.screens.rollout_detail import calls_table

    console = Console(width=120, record=True)
    console.print(calls_table(calls))
    return console.export_text().split()


async def test_detail_says_which_api_each_call_came_through(make_app: Callable[..., WorkbenchApp]) -> None:
    """Calls an agent made on the Responses or Messages API (through the proxy) say so; a rollout whose
    calls were all chat completions has no api column at all."""
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press(*["down"] * 9, "enter")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the detail screen")
        await pilot.pause()
        calls = [dict(c) for c in screen.rollout["calls"]]
        assert calls and "api" not in _calls_text(calls)
        calls[0]["extra"] = {"api": "messages"}
        words = _calls_text(calls)
        assert "api" in words and "messages" in words, words
        await app.push_screen(RolloutDetailScreen({**screen.rollout, "calls": calls}))
        await pilot.pause()
        assert app.screen.query_one("#rollout-calls") is not None


async def test_detail_lists_the_mcp_tool_calls(make_app: Callable[..., WorkbenchApp]) -> None:
    """A rollout whose tools came from MCP servers shows each call: who called, server, tool, arguments,
    result (failed ones in red) and time; a rollout without MCP calls has no such section."""
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app, 24)
        await pilot.press("enter")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDetailScreen) and app.screen,
                                  what="the detail screen")
        await pilot.pause()
        assert not screen.query("#rollout-mcp-calls")
        state = {"mcp_calls": [
            {"server": "crm", "tool": "issue_refund", "arguments": {"order_id": "A1"}, "by": "model",
             "error": False, "ms": 3.25, "result": "refund R-17 issued"},
            {"server": "crm", "tool": "get_order", "arguments": {"order_id": "A1"}, "by": "reward",
             "error": True, "ms": 1.0, "result": "no order A1"}]}
        await app.push_screen(RolloutDetailScreen({**screen.rollout, "state": state}))
        await pilot.pause()
        box = app.screen.query_one("#rollout-mcp-calls", Static)
        app.screen.query_one("#rollout-body").scroll_end(animate=False)
        await pilot.pause()
        text = screen_text(app)
        for word in ("MCP tool calls", "issue_refund", "refund R-17 issued", "reward", "get_order", "3.2"):
            assert word in text, (word, text)
        assert box.border_title == "MCP tool calls"
