"""Comparing two rollouts: word spans, message alignment, scores and fields with deltas, the store
lookup, and ``workbench diff`` (text, --json, unknown ids) run as the real command."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json
from workbench.analysis.diff import (
    MAX_WORD_TOKENS,
    align_messages,
    diff_rollouts,
    load_diff,
    message_text,
    text_spans,
)
from workbench.analysis.diff_render import SAME_LINES, message_body, values_table
from workbench.authoring.rubric import Scores
from workbench.errors import NotFoundError
from workbench.records.rollout import ModelCall, RolloutError, Usage
from workbench.records.task import Task
from workbench.store import RolloutRecord, Store

RUN = "0101-abcdef"


def _joined(spans: list[tuple[str, bool]]) -> str:
    return "".join(t for t, _ in spans)


def _changed(spans: list[tuple[str, bool]]) -> list[str]:
    return [t for t, c in spans if c]


# -- text ---------------------------------------------------------------------------------------
def test_changed_words_are_marked_and_the_rest_kept() -> None:
    a, b = text_spans("The answer is 41, I think.", "The answer is 42, I think.")
    assert _changed(a) == ["41"] and _changed(b) == ["42"]
    assert _joined(a) == "The answer is 41, I think." and _joined(b) == "The answer is 42, I think."


def test_neighbouring_changed_words_make_one_phrase() -> None:
    a, b = text_spans("so the total is five apples", "so the sum was six apples")
    assert _changed(a) == ["total is five"] and _changed(b) == ["sum was six"]


def test_unrelated_texts_are_changed_whole_not_matched_on_stray_words() -> None:
    a, b = text_spans('→ add({"a": 2, "b": 3})', "The answer is 3")
    assert a == [('→ add({"a": 2, "b": 3})', True)] and b == [("The answer is 3", True)]


def test_lines_first_then_words() -> None:
    a_text = "line one\nline two stays\nx = 1\nlast line\n"
    b_text = "line one\nline two stays\nx = 2\nan added line\nlast line\n"
    a, b = text_spans(a_text, b_text)
    assert _joined(a) == a_text and _joined(b) == b_text
    assert _changed(a) == ["1"]
    assert "".join(_changed(b)).split() == ["2", "an", "added", "line"]
    kept = "".join(t for t, c in b if not c)
    assert kept.startswith("line one\nline two stays\nx = ") and kept.endswith("last line\n")


def test_changed_lines_pair_up_and_huge_ones_are_marked_whole() -> None:
    a, b = text_spans("a = 1\nb = 2\n", "a = 10\nb = 20\n")  # as many lines changed: word diff per line
    assert _changed(a) == ["1", "2"] and _changed(b) == ["10", "20"]
    long_a, long_b = "word " * MAX_WORD_TOKENS + "1", "word " * MAX_WORD_TOKENS + "2"
    assert text_spans(long_a, long_b) == ([(long_a, True)], [(long_b, True)])  # too costly to compare word by word


def test_identical_and_empty_texts() -> None:
    assert text_spans("same", "same") == ([("same", False)], [("same", False)])
    assert text_spans("", "") == ([], [])
    assert text_spans("", "new") == ([], [("new", True)])


def test_spans_always_rebuild_both_texts() -> None:
    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", " ", "  ", "\n", ",", "(", ")", "δ", "12", "\t"]
    for _ in range(300):
        a = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        b = "".join(rng.choice(words) for _ in range(rng.randint(0, 30)))
        sa, sb = text_spans(a, b)
        assert _joined(sa) == a and _joined(sb) == b
        same_a, same_b = text_spans(a, a)  # a text against itself: nothing changed
        assert _joined(same_a) == _joined(same_b) == a and not _changed(same_a) and not _changed(same_b)


# -- messages -----------------------------------------------------------------------------------
SYSTEM = {"role": "system", "content": "Use the tools."}
USER = {"role": "user", "content": "What is 2 + 3?"}


def _call(args: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": args}}]}


def test_message_text_shows_tool_calls() -> None:
    assert message_text(_call('{"a": 2}')) == '→ add({"a": 2})'
    assert message_text({"role": "assistant", "content": [{"type": "text", "text": "hi"}]}) == "hi"


def test_an_extra_turn_does_not_shift_the_rest() -> None:
    tool = {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "5"}
    answer = {"role": "assistant", "content": "The answer is 5"}
    a = [SYSTEM, USER, _call('{"a": 2, "b": 3}'), tool, answer]
    b = [SYSTEM, USER, answer]
    pairs = align_messages(a, b)
    assert [p.status for p in pairs] == ["same", "same", "only_a", "only_a", "same"]
    assert [(p.a and p.a.index, p.b and p.b.index) for p in pairs] == [(0, 0), (1, 1), (2, None), (3, None), (4, 2)]
    assert pairs[3].a.title() == "tool (add)"


def test_the_final_answers_face_each_other() -> None:
    a = [SYSTEM, USER, _call('{"a": 2, "b": 3}'), {"role": "tool", "name": "add", "content": "5"},
         {"role": "assistant", "content": "The answer is 5"}]
    b = [SYSTEM, USER, {"role": "assistant", "content": "The answer is 6"}]
    pairs = align_messages(a, b)
    assert [p.status for p in pairs] == ["same", "same", "only_a", "only_a", "changed"]
    assert _changed(pairs[4].a.spans) == ["5"] and _changed(pairs[4].b.spans) == ["6"]


def test_changed_tool_arguments_and_results() -> None:
    a = [USER, _call('{"a": 2, "b": 3}'), {"role": "tool", "name": "add", "content": "5"}]
    b = [USER, _call('{"a": 2, "b": 4}'), {"role": "tool", "name": "add", "content": "6"}]
    pairs = align_messages(a, b)
    assert [p.status for p in pairs] == ["same", "changed", "changed"]
    assert _changed(pairs[1].a.spans) == ["3"] and _changed(pairs[1].b.spans) == ["4"]
    assert _changed(pairs[2].b.spans) == ["6"]


def test_messages_only_b_has() -> None:
    pairs = align_messages([USER], [USER, {"role": "assistant", "content": "hi"}])
    assert [p.status for p in pairs] == ["same", "only_b"]
    assert pairs[1].a is None and pairs[1].b.spans == [("hi", True)]


# -- whole rollouts -----------------------------------------------------------------------------
def _rollout(rid: str, **over: Any) -> dict[str, Any]:
    r = {"id": rid, "run_id": RUN, "env_name": "adder", "model": "m", "task_id": "t1", "task_index": 1,
         "sample_index": 0, "status": "ok", "error_kind": None, "reward": 1.0, "turns": 1, "prompt_tokens": 12,
         "completion_tokens": 3, "duration_s": 0.5, "cost_usd": 0.001, "messages": [USER],
         "rewards": {"correct": 1.0}, "metrics": {"words": 4.0},
         "calls": [{"latency_ms": 50.0}], "errors": []}
    r.update(over)
    return r


def test_scores_and_fields_with_deltas() -> None:
    a = _rollout("r.1.0")
    b = _rollout("r.1.1", sample_index=1, reward=0.25, completion_tokens=7, duration_s=1.25,
                 rewards={"correct": 0.0, "format": 0.5}, metrics={}, status="error", error_kind="timeout",
                 errors=[{"kind": "timeout", "source": "model", "message": "slow"}])
    d = diff_rollouts(a, b)
    fields = {f.name: f for f in d.fields}
    assert fields["reward"].delta == -0.75 and fields["completion_tokens"].delta == 4
    assert fields["duration_s"].delta == 0.75 and fields["status"].b == "timeout"
    assert fields["status"].delta is None and fields["model"].changed is False
    scores = {(s.name, s.kind): s for s in d.scores}
    assert list(scores) == [("correct", "reward"), ("format", "reward"), ("words", "metric")]
    assert scores["correct", "reward"].delta == -1.0
    assert scores["format", "reward"].a is None and scores["format", "reward"].delta is None
    assert scores["words", "metric"].b is None
    assert d.same_task and d.changed_messages == 0
    out = json.loads(json.dumps(d.to_json()))
    assert out["fields"]["reward"] == {"a": 1.0, "b": 0.25, "delta": -0.75}
    assert out["scores"]["format"] == {"kind": "reward", "a": None, "b": 0.5, "delta": None}
    assert out["errors"]["b"][0]["kind"] == "timeout" and out["errors"]["a"] == []


def test_rendering_clips_shared_messages_and_marks_changes() -> None:
    long = {"role": "system", "content": "\n".join(f"rule {i}" for i in range(10))}
    d = diff_rollouts(_rollout("a", messages=[long, USER]), _rollout("b", messages=[long, {**USER, "content": "Hi"}]))
    same = d.messages[0].a
    clipped = message_body(same, "red", same=True)
    assert clipped.plain.splitlines()[:SAME_LINES] == ["rule 0", "rule 1", "rule 2"]
    assert clipped.plain.endswith(f"… {10 - SAME_LINES} more lines")
    assert message_body(same, "red", same=True, full=True).plain == long["content"]
    marked = message_body(d.messages[1].b, "green", same=False, marks=("{+", "+}"))
    assert marked.plain == "{+Hi+}"
    table = values_table(d.fields)
    assert table.row_count == len(d.fields)


# -- the store and the command ------------------------------------------------------------------
def _record(i: int, sample: int, answer: str, reward: float, *, error: str | None = None) -> RolloutRecord:
    """Task ``i`` asks for 2 + (3 + i)."""
    prompt = f"What is 2 + {3 + i}?"
    messages = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": prompt}]
    if error is None:
        messages.append({"role": "assistant", "content": f"The answer is {answer}"})
    return RolloutRecord(
        id=f"{RUN}.{i}.{sample}", run_id=RUN, env_name="adder", model="mock-model",
        task=Task(prompt=prompt, answer=str(5 + i)), task_index=i, sample_index=sample,
        status="ok" if error is None else "error", error_kind=error, reward=None if error else reward,
        usage=Usage(12, 3 + sample, 0.0001), duration_s=0.25 + sample, turns=1,
        completion="" if error else f"The answer is {answer}", messages=messages, state={},
        scores=Scores(rewards={} if error else {"correct": reward}, metrics={}, total=reward),
        calls=[ModelCall(0, 2, None, "stop", 12, 3 + sample, 0.05)],
        errors=[] if error is None else [RolloutError(error, "model", f"{error} happened")], created_at=1.7e9 + sample)


@pytest.fixture
def diff_store(store_path: Path) -> Path:
    with Store(store_path) as store:
        store.create_run(RUN, kind="eval", env_name="adder", model="mock-model", status="completed")
        w = store.writer()
        w.submit([_record(0, 0, "5", 1.0), _record(0, 1, "6", 0.0), _record(0, 2, "", 0.0, error="timeout"),
                  _record(1, 0, "5", 0.0)])
        w.close()
    return store_path


def test_load_diff_reads_ids_and_prefixes(diff_store: Path) -> None:
    with Store(diff_store) as store:
        d = load_diff(store.conn, f"{RUN}.0.0", f"{RUN}.0.1")
        assert (d.a["id"], d.b["id"]) == (f"{RUN}.0.0", f"{RUN}.0.1")
        assert [p.status for p in d.messages] == ["same", "same", "changed"]
        with pytest.raises(NotFoundError, match="no rollout 'nope'"):
            load_diff(store.conn, f"{RUN}.0.0", "nope")
        with pytest.raises(NotFoundError, match="matches several rollouts"):
            load_diff(store.conn, f"{RUN}.0", f"{RUN}.1.0")


def test_cli_diff_text(diff_store: Path, cli: Callable[..., CliResult]) -> None:
    res = cli("diff", f"{RUN}.0.0", f"{RUN}.0.1")
    assert res.rc == 0, res.stderr
    out = res.stdout
    assert f"A {RUN}.0.0   B {RUN}.0.1" in out
    assert "different tasks" not in out
    assert "The answer is [-5-]" in out and "The answer is {+6+}" in out  # no colours: bracketed words
    assert "system  (same in both)" in out
    assert "1 of 3 messages differ" in out
    reward = next(ln for ln in out.splitlines() if ln.startswith("correct"))
    assert reward.split() == ["correct", "reward", "1.000", "0.000", "-1.000"]


def test_cli_diff_of_a_failed_rollout_shows_its_error(diff_store: Path, cli: Callable[..., CliResult]) -> None:
    res = cli("diff", f"{RUN}.0.0", f"{RUN}.0.2")
    assert res.rc == 0, res.stderr
    assert "B timeout in model: timeout happened" in res.stdout
    assert "(no message here)" in res.stdout


def test_cli_diff_json(diff_store: Path, cli: Callable[..., CliResult]) -> None:
    res = cli("diff", f"{RUN}.0.0", f"{RUN}.1.0", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["a"], out["b"], out["same_task"]) == (f"{RUN}.0.0", f"{RUN}.1.0", False)
    assert out["fields"]["task"]["a"].startswith("#0 ") and out["fields"]["task"]["b"].startswith("#1 ")
    assert out["changed_messages"] == 1 and [m["status"] for m in out["messages"]] == ["same", "changed", "same"]
    assert out["messages"][1]["a"]["spans"] == [["What is 2 + ", False], ["3", True], ["?", False]]
    res = cli("diff", f"{RUN}.0.0", f"{RUN}.0.1", "--json")
    out = last_json(res.stdout)
    assert out["fields"]["completion_tokens"] == {"a": 3, "b": 4, "delta": 1}
    last = out["messages"][-1]
    assert last["status"] == "changed" and last["b"]["spans"] == [["The answer is ", False], ["6", True]]


def test_cli_diff_unknown_id_is_one_clear_line(diff_store: Path, cli: Callable[..., CliResult]) -> None:
    line = assert_user_error(cli("diff", f"{RUN}.0.0", "0101-zzzzzz.0.0"), "no rollout '0101-zzzzzz.0.0'")
    assert "workbench runs" in line
    assert_user_error(cli("diff", f"{RUN}.0", f"{RUN}.0.0", "--json"), "matches several rollouts")
