"""Traces: mark a rollout with m, press D on another, read the side-by-side diff, go back."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from textual.widgets import Static
from workbench_app.main import WorkbenchApp
from workbench_app.screens.rollout_diff import RolloutDiffScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, screen_text, wait_until
from workbench.analysis.diff_render import A_STYLE, B_STYLE


def _table(app: WorkbenchApp) -> VirtualTable:
    assert isinstance(app.screen, TracesScreen), app.screen
    return app.screen.query_one(VirtualTable)


async def _settled(pilot: Any, app: WorkbenchApp) -> None:
    t = _table(app)
    await wait_until(pilot, lambda: t.total == 24 and t.row(23) is not None, what="24 rows")


def _messages(app: WorkbenchApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_mark_then_diff_shows_both_side_by_side(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app)
        traces = app.screen
        assert isinstance(traces, TracesScreen)
        # newest first: row 9 is run b task 2 (a tool call), row 10 is run b task 1 (a plain answer)
        await pilot.press(*["down"] * 9, "m")
        assert traces.marked == "1114-bbbbbb.2.0"
        await pilot.pause()
        lines = screen_text(app).splitlines()
        marked = [ln for ln in lines if "●" in ln]
        assert len(marked) == 1 and "1114-bbbbbb" in marked[0] and " 2.0 " in marked[0]
        assert "marked 1114-bbbbbb.2.0" in str(traces.query_one("#traces-status", Static).render())

        await pilot.press("down", "D")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                                  what="the diff screen")
        assert screen.diff.a["id"] == "1114-bbbbbb.2.0" and screen.diff.b["id"] == "1114-bbbbbb.1.0"
        await pilot.pause()
        text = screen_text(app)
        assert "1114-bbbbbb.2.0 ↔ 1114-bbbbbb.1.0" in text  # the sub-title
        assert "different tasks: A is wordplay task #2, B is wordplay task #1" in text
        # fields and scores with deltas: A took a tool turn more
        assert re.search(r"turns +2 +1 +-1 ", text)
        assert re.search(r"completion_tokens +4 +3 +-1 ", text)
        assert re.search(r"correct +reward +1\.000 +1\.000 +0 ", text)
        # the conversations, aligned: system shared, the user turns differ, A's tool call and result
        # face nothing, and the two final answers face each other
        assert [p.status for p in screen.diff.messages] == ["same", "changed", "only_a", "only_a", "changed"]
        assert screen.query_one("#pair-0").has_class("diff-same")
        assert screen.query_one("#pair-2").has_class("diff-only_a")
        assert "(no message here)" in text and "→ add" in text
        # the changed words are highlighted on each side
        final_a, final_b = (cell.content for cell in screen.query_one("#pair-4").query(Static))
        assert final_a.plain == "The answer is 5" and final_b.plain == "The answer is 3"
        assert [(final_a.plain[s.start:s.end], s.style) for s in final_a.spans] == [("5", A_STYLE)]
        assert [(final_b.plain[s.start:s.end], s.style) for s in final_b.spans] == [("3", B_STYLE)]

        await pilot.press("n")  # the first change: the user turns
        assert screen._at == 1
        await pilot.press("n", "n", "n")
        assert screen._at == 4
        await pilot.press("n")
        assert "no more changes this way" in _messages(app)
        await pilot.press("p")
        assert screen._at == 3

        await pilot.press("a")  # the shared system prompt in full (it is one line: the same text)
        assert screen.full and "Answer with a number." in screen_text(app)

        await pilot.press("escape")
        assert isinstance(app.screen, TracesScreen)
        assert _table(app).cursor == 10 and traces.marked == "1114-bbbbbb.2.0"


async def test_diff_needs_a_mark_and_another_row(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app)
        traces = app.screen
        await pilot.press("D")
        assert any("mark a rollout with m first" in m for m in _messages(app))
        await pilot.press("m", "D")
        assert any("this is the marked rollout" in m for m in _messages(app))
        assert isinstance(app.screen, TracesScreen)
        await pilot.press("m")  # again on the marked row: unmarked
        assert traces.marked is None
        await pilot.pause()
        assert "●" not in screen_text(app)


async def test_the_mark_survives_a_filter(make_app: Callable[..., WorkbenchApp]) -> None:
    """Mark in one run, filter to the other, diff across runs."""
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        await _settled(pilot, app)
        await pilot.press("m")  # the newest: run b, task 11
        app.screen.set_filters(run_id="1114-aaaaaa")
        t = _table(app)
        await wait_until(pilot, lambda: t.total == 12 and t.row(0) is not None and t.row(0).id == "1114-aaaaaa.11.0",
                         what="run a only")
        await pilot.press("D")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, RolloutDiffScreen) and app.screen,
                                  what="the diff screen")
        assert (screen.diff.a["id"], screen.diff.b["id"]) == ("1114-bbbbbb.11.0", "1114-aaaaaa.11.0")
        assert screen.diff.same_task is False  # other env
        model = next(f for f in screen.diff.fields if f.name == "model")
        assert (model.a, model.b) == ("other-model", "mock-model")
