"""The token view's cursor: left and right move over the sampled tokens of a stored rollout, and the line
under the tokens says the one at the cursor: its logprob and the top alternatives its server returned."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from workbench_app.main import WorkbenchApp
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.widgets.token_view import HINT, TokenView, top_alternatives

from tests.app.conftest import T0, wait_until
from workbench.analysis.token_render import legend
from workbench.authoring.rubric import Scores
from workbench.records.rollout import ModelCall, Usage
from workbench.records.task import Task
from workbench.records.trace import Trace
from workbench.store import RolloutRecord, Store
from workbench.store.queries import get_rollout

ROLLOUT = "1114-tttttt.0.0"
MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]
#: What the chat API returns for two sampled tokens with top_logprobs=2.
CHAT_LOGPROBS = {"content": [
    {"token": "5", "logprob": -0.01, "top_logprobs": [{"token": "6", "logprob": -4.5}, {"token": "5", "logprob": -0.01}]},
    {"token": "!", "logprob": -3.0, "top_logprobs": [{"token": ".", "logprob": -0.1}, {"token": "!", "logprob": -3.0}]},
]}


@pytest.mark.parametrize(("extra", "expected"), [
    ({"logprobs": CHAT_LOGPROBS}, [[("5", -0.01), ("6", -4.5)], [(".", -0.1), ("!", -3.0)]]),
    ({"logprobs": {"tokens": ["a"], "token_logprobs": [-0.2], "top_logprobs": [{"a": -0.2, "b": -1.5}]}},
     [[("a", -0.2), ("b", -1.5)]]),
    ({"logprobs": {"content": [{"token": "a", "logprob": -0.2, "top_logprobs": []}]}}, None),  # none asked for
    ({"token_ids": [1, 2]}, None),
    (None, None),
])
def test_top_alternatives_from_a_calls_stored_reply(extra: Any, expected: Any) -> None:
    assert top_alternatives(extra) == expected


def test_the_short_legend_keeps_every_band_whole() -> None:
    lines = legend(short=True).plain.splitlines()
    assert len(lines) == 2 and all(len(line) <= 38 for line in lines)
    assert "≥.9" in lines[0] and "<.01" in lines[0] and "⚠ mismatch" in lines[1]


def _store_rollout(store_file: Path) -> None:
    trace = Trace()
    trace.record(MESSAGES, {"role": "assistant", "content": "5!"}, [11, 12, 13], [5, 33], [-0.01, -3.0])
    store = Store(store_file)
    try:
        store.create_run("1114-tttttt", kind="eval", env_name="adder", model="mock-model", status="completed")
        w = store.writer()
        w.submit([RolloutRecord(
            id=ROLLOUT, run_id="1114-tttttt", env_name="adder", model="mock-model",
            task=Task(prompt="What is 2 + 3?", answer="5"), task_index=0, sample_index=0, status="ok",
            error_kind=None, reward=1.0, usage=Usage(3, 2), duration_s=0.1, turns=1, completion="5!",
            messages=[*MESSAGES, {"role": "assistant", "content": "5!"}], state={},
            scores=Scores(rewards={"correct": 1.0}, total=1.0),
            calls=[ModelCall(0, 1, None, "stop", 3, 2, 0.05, extra={"logprobs": CHAT_LOGPROBS})], errors=[],
            trace=trace, created_at=T0)])
        w.close()
    finally:
        store.close()


async def test_the_cursor_shows_each_tokens_logprob_and_alternatives(make_app: Callable[..., WorkbenchApp],
                                                                      store_file: Path) -> None:
    _store_rollout(store_file)
    app = make_app(mode="traces")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(RolloutDetailScreen(get_rollout(app.store.get().conn, ROLLOUT)))
        await pilot.press("t")
        view = app.screen.query_one(TokenView)
        await wait_until(pilot, lambda: len(view.spots) == 2, what="the sampled tokens")
        assert app.focused is view and view.cursor_text == HINT
        await pilot.press("right")
        await wait_until(pilot, lambda: "token 1/2 of call 0" in view.cursor_text, what="the first token")
        assert "'5'" in view.cursor_text and "logprob -0.010 (p 0.990)" in view.cursor_text
        assert "top: '5' -0.01  '6' -4.50" in view.cursor_text
        await pilot.press("right", "right")  # stops at the last token
        await wait_until(pilot, lambda: "token 2/2" in view.cursor_text, what="the second token")
        assert "logprob -3.000 (p 0.050)" in view.cursor_text and "top: '.' -0.10  '!' -3.00" in view.cursor_text
        await pilot.press("left")
        await wait_until(pilot, lambda: "token 1/2" in view.cursor_text, what="back to the first token")
        spot = view.spots[view.cursor]
        assert view.report_text[spot.start:spot.end] == "5"  # the cursor is drawn on the token itself


async def test_a_trace_without_alternatives_says_so(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    _store_rollout(store_file)
    import sqlite3

    db = sqlite3.connect(store_file)
    db.execute("UPDATE model_call SET extra = NULL")
    db.commit()
    db.close()
    app = make_app(mode="traces")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(RolloutDetailScreen(get_rollout(app.store.get().conn, ROLLOUT)))
        await pilot.press("t")
        view = app.screen.query_one(TokenView)
        await wait_until(pilot, lambda: len(view.spots) == 2, what="the sampled tokens")
        await pilot.press("right")
        await wait_until(pilot, lambda: "token 1/2" in view.cursor_text, what="the first token")
        assert "logprob -0.010" in view.cursor_text and "no top alternatives stored" in view.cursor_text


def test_token_cursor_80x24_snapshot(snap_compare: Any, make_app: Callable[..., WorkbenchApp],
                                     store_file: Path) -> None:
    """The rollout detail's token view at 80×24 with the cursor on the second sampled token."""
    _store_rollout(store_file)

    async def run_before(pilot: Any) -> None:
        app = pilot.app
        await app.push_screen(RolloutDetailScreen(get_rollout(app.store.get().conn, ROLLOUT)))
        await pilot.press("t")
        view = app.screen.query_one(TokenView)
        await wait_until(pilot, lambda: len(view.spots) == 2, what="the sampled tokens")
        await pilot.press("right", "right")
        await wait_until(pilot, lambda: "token 2/2" in view.cursor_text, what="the second token")
        await pilot.pause(0.3)
        app.clear_notifications()
        await pilot.pause()

    assert snap_compare(make_app(mode="traces"), terminal_size=(80, 24), run_before=run_before)
