"""The rollout debugger (workbench/runs/debug_session.py) and ``workbench debug``, against the real mock server.

Bundled environments run as they do under ``workbench eval``: the coding env's tools execute in a
real sandbox, wordle's turns go through its MultiTurn harness; rollouts land in a real store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, assert_user_error, last_json, query
from workbench.errors import ConfigError, EndpointError
from workbench.runs.debug_session import DebugSession, debug_rollout
from workbench.runs.evaluate import EvalOptions
from workbench.store import Store
from workbench.store.queries import get_rollout

# slow: bundled envs stepped against the mock, the coding env in a real sandbox
pytestmark = pytest.mark.slow

LS_THEN_DONE = [
    {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": '{"cmd": "ls -R"}'}}]},
    "I looked around; done.",
]


@pytest.fixture
def store(store_path: Path) -> Any:
    s = Store(store_path)
    yield s
    s.close()


def _opts(env: str, url: str, **kw: Any) -> EvalOptions:
    return EvalOptions(env=env, model="mock-model", base_url=url, **kw)


async def test_a_sandboxed_tool_loop_runs_one_turn_at_a_time(mock_server: Callable[..., MockServer],
                                                             store: Store) -> None:
    server = mock_server("script", script=LS_THEN_DONE)
    s = DebugSession(_opts("coding", server.base_url), 1, store)  # task 1: the `durations` repository
    try:
        await s.start()
        # Held before the first model call: the prompt is there, nothing was asked of the model yet.
        assert s.status == "paused" and [m["role"] for m in s.messages] == ["system", "user"]
        assert server.requests() == 0
        run = store.get_run(s.run_id)
        assert run["kind"] == "debug" and run["status"] == "running" and run["config"]["task_index"] == 1

        t1 = await s.next_turn()
        assert t1 is not None and t1.index == 0 and t1.call is not None and t1.call.finish_reason == "tool_calls"
        assert server.requests() == 1
        # The tool ran in the sandbox: its output is the tool message of this turn.
        assert [m["role"] for m in t1.messages] == ["assistant", "tool"]
        assert "exit code 0" in t1.messages[1]["content"] and "duration.py" in t1.messages[1]["content"]
        assert s.status == "paused" and not s.done and s.result is None
        assert query(store.path, "SELECT COUNT(*) FROM rollout")[0][0] == 0  # stored only once it ends

        t2 = await s.next_turn()
        assert t2 is not None and t2.messages == [{"role": "assistant", "content": "I looked around; done."}]
        assert s.done and s.status == "done"
        res = s.result
        assert res is not None and res.rollout_id == f"{s.run_id}.1.0" and res.status == "ok"
        by_name = {line.name: line for line in res.scores}
        # Each value carries its function: a weighted reward, a dict-returning metric split by key.
        assert by_name["hidden_tests"].kind == "reward" and by_name["hidden_tests"].weight == 1.0
        assert by_name["hidden_tests"].value == 0.0  # nothing was fixed
        assert by_name["tests.hidden"].function == "tests" and by_name["tests.hidden"].weight is None
        assert by_name["tool_calls"].value == 1.0
        assert await s.next_turn() is None
    finally:
        await s.close()
    stored = get_rollout(store.conn, res.rollout_id)
    assert [m["role"] for m in stored["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert stored["rewards"]["hidden_tests"] == 0.0 and stored["metrics"]["tool_calls"] == 1.0
    run = store.get_run(s.run_id)
    assert run["status"] == "completed" and run["summary"]["rollouts"] == 1
    assert s.status == "done"  # closing a finished session keeps its outcome


async def test_pauses_are_not_the_rollouts_time_and_turns_carry_cost(mock_server: Callable[..., MockServer],
                                                                     store: Store) -> None:
    server = mock_server("script", "--tokens", script=["<guess>crane</guess>", "<guess>slate</guess>"])
    store.set_price("mock-model", 1.0, 2.0)
    s = DebugSession(_opts("wordle", server.base_url, env_args={"max_turns": 3}), 0, store)
    try:
        await s.start()
        turns = []
        while not s.done:
            await asyncio.sleep(0.6)  # the user reading the turn
            turns.append(await s.next_turn())
    finally:
        await s.close()
    assert len(turns) == 3 and all(t is not None for t in turns)
    # Each turn: the guess and the game's feedback (the last guess's feedback is kept in state instead).
    assert [m["role"] for m in turns[0].messages] == ["assistant", "user"]
    assert [m["role"] for m in turns[2].messages] == ["assistant"]
    for t in turns:
        assert t.call is not None
        assert t.cost_usd == pytest.approx((t.call.prompt_tokens * 1.0 + t.call.completion_tokens * 2.0) / 1e6)
        assert t.wall_s < 0.6
    res = s.result
    assert res is not None and res.status == "ok"
    assert res.duration_s < 1.0, "the 1.8 s of pauses must not count as the rollout's time"
    assert res.cost_usd == pytest.approx(sum(t.cost_usd for t in turns))
    # The token trace so far is the live one; stored, it extends turn by turn without a mismatch.
    assert s.trace is not None and s.trace.has_tokens and s.trace.calls == 3
    assert {line.name: line.value for line in res.scores}["token_mismatch"] == 0.0


async def test_a_model_error_mid_rollout_is_stored_as_the_rollouts_error(mock_server: Callable[..., MockServer],
                                                                         store: Store) -> None:
    server = mock_server("script", script=[LS_THEN_DONE[0], {"status": 400}])
    s = DebugSession(_opts("coding", server.base_url), 0, store)
    try:
        await s.run_to_end()
    finally:
        await s.close()
    assert [t.call is not None for t in s.turns] == [True, False]
    res = s.result
    assert res is not None and res.status == "error" and res.scores == []
    assert res.errors[0]["kind"] == "model.bad_request"
    assert get_rollout(store.conn, res.rollout_id)["error_kind"] == "model.bad_request"


async def test_closing_midway_stores_nothing_and_releases_the_sandbox(mock_server: Callable[..., MockServer],
                                                                      store: Store) -> None:
    server = mock_server("script", script=LS_THEN_DONE)
    s = DebugSession(_opts("coding", server.base_url), 2, store)
    await s.start()
    await s.next_turn()
    await s.close()
    assert s.status == "closed" and s.result is None
    # A debug stopped before its rollout finished leaves nothing: no rollout, no run, no ledger rows.
    for table, col in (("rollout", "run_id"), ("run", "id"), ("cost_event", "run_id")):
        assert query(store.path, f"SELECT COUNT(*) FROM {table} WHERE {col}=?", (s.run_id,))[0][0] == 0, table
    assert not list(Path(store.path).parent.glob("*.locks/*"))
    await s.close()  # twice is fine


async def test_bad_task_and_unreachable_endpoint_are_clear_errors(mock_url: str, closed_port: int,
                                                                  store: Store) -> None:
    with pytest.raises(ConfigError, match=r"has 200 tasks \(0..199\); task 500 is out of range"):
        await debug_rollout(_opts("arithmetic", mock_url), 500, store)
    with pytest.raises(ConfigError, match="task must be 0 or more, not -1"):
        DebugSession(_opts("arithmetic", mock_url), -1, store)
    with pytest.raises(EndpointError, match="cannot reach the model endpoint"):
        await debug_rollout(_opts("arithmetic", f"http://127.0.0.1:{closed_port}/v1"), 0, store)
    assert query(store.path, "SELECT COUNT(*) FROM run")[0][0] == 0  # nothing half-recorded


def test_cli_prints_each_turn_and_the_scores(cli: Callable[..., CliResult], mock_server: Callable[..., MockServer],
                                             store_path: Path) -> None:
    server = mock_server("script", script=LS_THEN_DONE)
    res = cli("debug", "coding", "--task", "1", "--base-url", server.base_url, "-m", "mock-model")
    assert res.rc == 0, res.stderr
    out = res.stdout
    assert "turn 1" in out and "turn 2" in out and "tools/env" in out
    assert "run({\"cmd\": \"ls -R\"})" in out and "duration.py" in out  # the call and the sandbox's output
    assert "hidden_tests" in out and "reward" in out and "stored in run" in out

    res = cli("debug", "coding", "--task", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    doc = last_json(res.stdout)
    assert doc["done"] and len(doc["turns"]) == 2 and doc["turns"][0]["finish_reason"] == "tool_calls"
    assert doc["rewards"] == {"hidden_tests": 0.0} and doc["metrics"]["tool_calls"] == 1.0
    assert [m["role"] for m in doc["prompt"]] == ["system", "user"]
    rows = query(store_path, "SELECT r.id, run.kind FROM rollout r JOIN run ON run.id = r.run_id WHERE r.id=?",
                 (doc["rollout_id"],))
    assert rows == [(doc["rollout_id"], "debug")]


def test_cli_turn_limit_and_bad_input(cli: Callable[..., CliResult], mock_server: Callable[..., MockServer],
                                      store_path: Path) -> None:
    server = mock_server("script", script=LS_THEN_DONE)
    base = ["--base-url", server.base_url, "-m", "mock-model"]
    res = cli("debug", "coding", "--turns", "1", *base, "--json")
    assert res.rc == 0, res.stderr
    doc = last_json(res.stdout)
    assert doc["done"] is False and doc["rollout_id"] is None and len(doc["turns"]) == 1
    assert query(store_path, "SELECT COUNT(*) FROM run")[0][0] == 0, "an unfinished debug stores no run"
    fresh = mock_server("script", script=LS_THEN_DONE)  # the script is cycled per request: start it over
    res = cli("debug", "coding", "--turns", "1", "--base-url", fresh.base_url, "-m", "mock-model")
    assert res.rc == 0 and "stopped after 1 turns" in res.stdout, res.stderr

    assert_user_error(cli("debug", "arithmetic", "--task", "999", *base), "200 tasks", "--task 999")
    assert_user_error(cli("debug", "arithmetic", "--turns", "0", *base), "--turns")
    assert_user_error(cli("debug", "no_such_env", *base))
    json.dumps(doc)  # the JSON line is plain JSON (no sets, no objects)
