"""The Debugger at 80×24: the hint and the token legend whole, a failed rollout's status said as what
happened, and the token view of a stored rollout opened while it is on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from workbench_app.main import WorkbenchApp
from workbench_app.screens.debugger import DebuggerScreen
from workbench_app.widgets.debug_panels import done_status
from workbench_app.widgets.token_view import TokenView

from tests.app.conftest import screen_text, wait_until
from workbench.runs.debug_report import DebugResult, ScoreLine
from workbench.store.queries import get_rollout

SMALL = (80, 24)
SCORE = ScoreLine("correct", "correct", "reward", 1.0, 1.0)
ERROR = {"kind": "timeout", "source": "model", "message": "timeout happened"}


@pytest.mark.parametrize(("scores", "errors", "expected"), [
    ([SCORE], [], "done: scored; stored as R (Traces lists it once K shows debug runs)"),
    ([], [ERROR], "done: the rollout failed (no scores); stored as R (Traces lists it once K shows debug runs)"),
    ([SCORE], [ERROR], "done: scored; stored as R (Traces lists it once K shows debug runs)"),  # a tool error the rubric still scored
    ([], [], "done: scored; stored as R (Traces lists it once K shows debug runs)"),  # a rubric with no functions
])
def test_the_done_status_says_what_happened(scores: list[ScoreLine], errors: list[dict[str, Any]],
                                            expected: str) -> None:
    res = DebugResult("R", "error" if errors else "ok", None, scores, errors, 0.1, 0.0, 0.0)
    assert done_status(res) == expected
    assert done_status(None) == "done"


async def _open_stored(pilot: Any, app: WorkbenchApp, rollout_id: str) -> DebuggerScreen:
    dbg = app.screen
    assert isinstance(dbg, DebuggerScreen)
    await wait_until(pilot, lambda: dbg._env_options, what="the environment picker")  # noqa: SLF001
    app.open_debugger(rollout=get_rollout(app.store.get().conn, rollout_id))
    await wait_until(pilot, lambda: f"read-only: {rollout_id}" in screen_text(app).replace("\n", " "),
                     what="the stored rollout")
    return dbg


async def test_the_hint_and_the_legend_fit_80x24(make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="debugger")
    async with app.run_test(size=SMALL) as pilot:
        dbg = app.screen
        assert isinstance(dbg, DebuggerScreen)
        await wait_until(pilot, lambda: dbg.has_class("-narrow"), what="the narrow layout")
        status = dbg.query_one("#dbg-status")
        assert status.content_size.height == 3 and status.region.right <= SMALL[0]
        hint = "pick an environment and a task, then n (next turn) or r (run to end)"
        lines = screen_text(app).splitlines()[1:4]
        shown = " ".join(line[status.region.x:].strip() for line in lines)
        assert hint in shown  # every word of it, over the three lines beside the picker
        await _open_stored(pilot, app, "1114-aaaaaa.5.0")
        await pilot.press("t")
        view = dbg.query_one(TokenView)
        await wait_until(pilot, lambda: "has no stored token trace" in view.report_text, what="the token view")
        text = screen_text(app)
        assert "sampled p:  ≥.9  ≥.5  ≥.1  ≥.01  <.01" in text and "prompt/template  ⚠ mismatch" in text


async def test_a_stored_rollout_opened_with_the_token_view_on_shows_its_tokens(
        make_app: Callable[..., WorkbenchApp]) -> None:
    app = make_app(mode="debugger")
    async with app.run_test(size=SMALL) as pilot:
        dbg = app.screen
        assert isinstance(dbg, DebuggerScreen)
        await pilot.press("t")  # the token view on, with no rollout yet
        view = dbg.query_one(TokenView)
        await wait_until(pilot, lambda: "no rollout yet" in view.report_text, what="the empty token view")
        await _open_stored(pilot, app, "1114-aaaaaa.5.0")
        await wait_until(pilot, lambda: "rollout 1114-aaaaaa.5.0 has no stored token trace" in view.report_text,
                         what="the stored rollout's token view, with no key pressed")
        assert "no rollout yet" not in view.report_text


def test_debugger_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """A failed stored rollout read-only at 80×24: the status whole, turns, no scores, the error."""

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await _open_stored(pilot, app, "1114-aaaaaa.5.0")
        await wait_until(pilot, lambda: "timeout happened" in screen_text(app), what="the error")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="debugger"), terminal_size=SMALL, run_before=run_before)


def test_debugger_tokens_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp]) -> None:
    """The token view at 80×24: the short legend, the view's note."""

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        dbg = await _open_stored(pilot, app, "1114-aaaaaa.5.0")
        await pilot.press("t")
        await wait_until(pilot, lambda: "no stored token trace" in dbg.query_one(TokenView).report_text,
                         what="the token view")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="debugger"), terminal_size=SMALL, run_before=run_before)
