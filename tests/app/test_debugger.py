"""Debugger screen: step a bundled env against the real mock server, scores, the store, errors as
notifications; the token view of a stored rollout with a forced renderer mismatch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input
from workbench_app.main import WorkbenchApp
from workbench_app.screens.debugger import DebuggerScreen
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.widgets.token_view import TokenView
from workbench_app.widgets.virtual_table import VirtualTable

from tests.app.conftest import SIZE, screen_text, wait_until
from tests.helpers import MockServer, query
from workbench.analysis.token_render import BAND_STYLES, MARK_STYLE, render_report
from workbench.analysis.token_report import build_report
from workbench.authoring.rubric import Scores
from workbench.records.rollout import ModelCall, Usage
from workbench.records.task import Task
from workbench.records.trace import Trace
from workbench.store import RolloutRecord, Store
from workbench.store.queries import get_rollout

GUESSES = ["<guess>crane</guess>", "<guess>slate</guess>", "<guess>pious</guess>"]


def _debugger(app: WorkbenchApp) -> DebuggerScreen:
    assert isinstance(app.screen, DebuggerScreen), app.screen
    return app.screen


def _notes(app: WorkbenchApp) -> str:
    return " | ".join(n.message for n in app._notifications)  # noqa: SLF001


@pytest.mark.slow  # steps a bundled env turn by turn against a mock server
async def test_step_a_bundled_env_turn_by_turn(make_app: Callable[..., WorkbenchApp],
                                               mock_server: Callable[..., MockServer], store_file: Path) -> None:
    server = mock_server("script", "--tokens", script=GUESSES)
    app = make_app(mode="debugger", base_url=server.base_url, model="mock-model")
    async with app.run_test(size=SIZE) as pilot:
        dbg = _debugger(app)
        app.open_debugger(env_spec="wordle")
        await wait_until(pilot, lambda: dbg.query_one("#dbg-env").value == "wordle", what="wordle picked")
        dbg.query_one("#dbg-task", Input).value = "3"

        await pilot.press("n")
        await wait_until(pilot, lambda: dbg.session is not None and len(dbg.session.turns) == 1
                         and not dbg.busy, what="the first turn")
        await wait_until(pilot, lambda: "crane" in screen_text(app), what="the first turn on screen")
        text = screen_text(app)
        assert "turn 1" in text and "paused before model call 2" in text
        assert server.requests() == 1  # one model call per key press
        assert "rewards and metrics" in text and "scored when the rollout ends" in text

        await pilot.press("n")
        await wait_until(pilot, lambda: len(dbg.session.turns) == 2 and not dbg.busy, what="the second turn")
        assert server.requests() == 2

        # The live token view: ids (no tokenizer for the mock model), each call's prompt and sample.
        await pilot.press("t")
        view = dbg.query_one(TokenView)
        await wait_until(pilot, lambda: "call 1 · sampled" in view.report_text, what="the live token view")
        assert "no local tokenizer found for model 'mock-model'" in view.report_text
        await pilot.press("t")

        await pilot.press("r")
        await wait_until(pilot, lambda: dbg.session.done and not dbg.busy, what="the end of the rollout")
        names = ("total reward", "solved", "efficiency", "guesses", "invalid_guesses")
        # The scores panel fills in once the stored result is read back: wait for every line of it.
        await wait_until(pilot, lambda: all(n in screen_text(app) for n in names), what="the scores")
        text = screen_text(app)
        assert len(dbg.session.turns) == 6 and server.requests() == 6
        rid = dbg.session.result.rollout_id
        assert f"stored as {rid}" in text and "stored (Traces lists it once K shows debug runs)" in _notes(app)

        # It is in the store as the rollout of a debug run, and Traces lists it.
        assert query(store_file, "SELECT run.kind, r.task_index FROM rollout r JOIN run ON run.id = r.run_id "
                                 "WHERE r.id = ?", (rid,)) == [("debug", 3)]
        await pilot.press("2")
        table = app.screen.query_one(VirtualTable)
        assert isinstance(app.screen, TracesScreen)
        await wait_until(pilot, lambda: table.total == 24, what="the user's own rollouts in Traces")
        await pilot.press("K")  # every kind of run: the debugger's too
        await wait_until(pilot, lambda: table.total == 25, what="the debug rollout in Traces")


async def test_errors_are_notifications(make_app: Callable[..., WorkbenchApp], closed_port: int) -> None:
    app = make_app(mode="debugger", base_url=f"http://127.0.0.1:{closed_port}/v1", model="mock-model")
    async with app.run_test(size=SIZE) as pilot:
        dbg = _debugger(app)
        await pilot.press("n")
        await wait_until(pilot, lambda: "pick an environment first" in _notes(app), what="the no-env warning")

        app.open_debugger(env_spec="arithmetic")
        dbg.query_one("#dbg-task", Input).value = "-2"
        await pilot.press("n")
        await wait_until(pilot, lambda: "task must be 0 or more" in _notes(app), what="the bad task")

        dbg.query_one("#dbg-task", Input).value = "99999"
        await pilot.press("n")
        await wait_until(pilot, lambda: "task 99999 is out of range" in _notes(app), what="the task out of range")
        assert "--" not in _notes(app)  # said the app's way: the field is "task #", not a --task flag
        await wait_until(pilot, lambda: not dbg.busy, what="the failed start to end")
        await pilot.press("x")  # drop the failed rollout

        dbg.query_one("#dbg-task", Input).value = "1"
        await pilot.press("n")
        await wait_until(pilot, lambda: "cannot reach the model endpoint" in _notes(app), what="the endpoint error")
        await wait_until(pilot, lambda: not dbg.busy and "failed" in screen_text(app), what="the failed status")
        await pilot.press("n")  # the app is alive and says what to do
        await wait_until(pilot, lambda: "x starts a new one" in _notes(app), what="the ended warning")


# -- the token view of a stored rollout ---------------------------------------------------------
MESSAGES = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "What is 2 + 3?"}]


def _hf_tokenizer(path: Path) -> Any:
    """transformers' tokenizer, for building the scenarios (the app's own view loads its fast one)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def _forced_mismatch_rollout(tok: Any, model: str) -> RolloutRecord:
    """Turn 1's prompt is recorded as if its template had added a space after the question (a
    renderer mismatch); turn 2's prompt does not extend turn 1's tokens (a recorded mismatch)."""
    drifted = [MESSAGES[0], {"role": "user", "content": "What is 2 + 3? "}]
    prompt = list(tok.apply_chat_template(drifted, add_generation_prompt=True, tokenize=True, return_dict=False))
    reply = {"role": "assistant", "content": "5"}
    sampled = [*tok("5", add_special_tokens=False)["input_ids"], tok.eos_token_id]
    trace = Trace()
    trace.record(MESSAGES, reply, prompt, sampled, [-0.01, -3.0][: len(sampled)] + [-0.2] * (len(sampled) - 2))
    follow = [*MESSAGES, reply, {"role": "user", "content": "Sure?"}]
    again = list(tok.apply_chat_template(follow, add_generation_prompt=True, tokenize=True, return_dict=False))
    trace.record(follow, {"role": "assistant", "content": "yes"}, again, tok("yes", add_special_tokens=False)
                 ["input_ids"], None)
    assert len(trace.mismatches) == 1
    return RolloutRecord(
        id="1114-cccccc.0.0", run_id="1114-cccccc", env_name="adder", model=model,
        task=Task(prompt="What is 2 + 3?", answer="5"), task_index=0, sample_index=0, status="ok", error_kind=None,
        reward=1.0, usage=Usage(40, 3), duration_s=0.2, turns=2, completion="yes",
        messages=[*follow, {"role": "assistant", "content": "yes"}], state={},
        scores=Scores(rewards={"correct": 1.0}, total=1.0),
        calls=[ModelCall(0, 2, reply, "stop", 30, 2, 0.05), ModelCall(1, 4, None, "stop", 40, 1, 0.04)], errors=[],
        trace=trace, created_at=1_700_000_000.0)


@pytest.fixture
def mismatch_store(store_file: Path, tiny_dir: Path) -> str:
    store = Store(store_file)
    try:
        store.create_run("1114-cccccc", kind="eval", env_name="adder", model=str(tiny_dir), status="completed",
                         config={"env": "arithmetic"})
        w = store.writer()
        w.submit([_forced_mismatch_rollout(_hf_tokenizer(tiny_dir), str(tiny_dir))])
        w.close()
    finally:
        store.close()
    return "1114-cccccc.0.0"


async def test_token_view_of_a_stored_rollout_marks_the_mismatch(make_app: Callable[..., WorkbenchApp],
                                                                 mismatch_store: str) -> None:
    app = make_app(mode="traces")
    async with app.run_test(size=SIZE) as pilot:
        rollout = get_rollout(app.store.get().conn, mismatch_store)
        await app.push_screen(RolloutDetailScreen(rollout))
        await pilot.press("t")
        view = app.screen.query_one(TokenView)
        await wait_until(pilot, lambda: "⚠" in view.report_text, timeout=60, what="the marked token view")
        text = view.report_text
        assert "re-render call 0: first difference at token" in text and "(whitespace)" in text
        assert "call 1: the server's prompt re-tokenized the conversation" in text
        assert "── call 0 · sampled · " in text and "What is 2 + 3?" in text  # decoded, not ids
        assert "logprob of sampled tokens" in screen_text(app)  # the legend

        await pilot.press("d")  # the same rollout in the Debugger, read-only
        dbg = await wait_until(pilot, lambda: isinstance(app.screen, DebuggerScreen) and app.screen)
        await wait_until(pilot, lambda: f"read-only: {mismatch_store}" in screen_text(app),
                         what="the read-only view")
        assert "correct" in screen_text(app) and "turn 2" in screen_text(app)
        await pilot.press("n")
        await wait_until(pilot, lambda: "read-only" in _notes(app), what="the read-only warning")
        await pilot.press("t")
        await wait_until(pilot, lambda: "⚠" in dbg.query_one(TokenView).report_text, timeout=60,
                         what="the debugger's token view")


def test_sampled_tokens_are_coloured_by_logprob_band(tiny_dir: Path) -> None:
    tok = _hf_tokenizer(tiny_dir)
    rec = _forced_mismatch_rollout(tok, str(tiny_dir))
    text = render_report(build_report(rec.trace, tok))
    sampled = rec.trace.nodes[1]
    assert sampled.kind == "assistant" and len(sampled.logprobs) >= 2
    styles = [str(span.style) for span in text.spans]
    # logprob -0.01 (p 0.99) is the top band, -3.0 (p 0.05) the fourth; the mismatched prompt token is marked.
    assert any(s.startswith(BAND_STYLES[0]) for s in styles) and any(s.startswith(BAND_STYLES[3]) for s in styles)
    assert any(s.startswith(MARK_STYLE) for s in styles)
    # A trace with no logprobs says so instead of colouring.
    bare = Trace()
    bare.record(MESSAGES, {"role": "assistant", "content": "5"}, [1, 2, 3], [4, 5], None)
    report = build_report(bare, None)
    assert not report.has_logprobs and any("no logprobs were stored" in n for n in report.notes)
    assert any("token ids are shown" in n for n in report.notes)
