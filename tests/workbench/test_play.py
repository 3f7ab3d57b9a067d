"""A person as the policy: ``wb.Human`` and ``workbench play``. The environment's own harness, tools and
rubric run exactly as for a model; the person's replies come from stdin (one per line when it is not a
terminal; a tool call is ``/call NAME {json}``); the rollout is stored with ``source = human`` and the
person's name, scored, and exported as SFT rows. Bad input is one clear line and nothing stored."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from tests.helpers import CliResult, MockServer, assert_user_error, last_json, workbench_argv
from workbench.rollouts.human import ReplyError, parse_reply

# slow: played rollouts through the CLI with a person's replies on stdin
pytestmark = pytest.mark.slow

CALC = '''
import workbench as wb

def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

def load_environment():
    rubric = wb.Rubric()
    @rubric.reward
    def correct(completion: str, answer: str) -> float:
        return float(completion.strip() == answer)
    @rubric.metric
    def tool_calls(messages: list) -> float:
        return float(sum(len(m.get("tool_calls") or []) for m in messages))
    return wb.Environment(name="calc", tasks=wb.TaskSet.from_records([{"prompt": "What is 2+3?", "answer": "5"}]),
                          harness=wb.ToolLoop(tools=[add]), rubric=rubric)
'''

GUESS = '''
import workbench as wb

class Guess(wb.MultiTurn):
    max_turns = 4
    async def respond(self, messages, state):
        guess = (messages[-1].get("content") or "").strip()
        if guess == "7":
            state["solved"] = True
            return None
        return [{"role": "user", "content": "higher" if guess.isdigit() and int(guess) < 7 else "lower"}]

def load_environment():
    rubric = wb.Rubric()
    @rubric.reward
    def solved(state: dict) -> float:
        return float(state.get("solved", False))
    return wb.Environment(name="guess", tasks=wb.TaskSet.from_records([{"prompt": "Guess my number (1-10)."}]),
                          harness=Guess(), rubric=rubric)
'''


@pytest.fixture
def play(cli_env: dict[str, str], tmp_path: Path) -> Callable[..., CliResult]:
    """``play(env_file, stdin_text, *args)``: ``workbench play`` with that text on a pipe as stdin."""

    def run(env: Path, replies: str, *args: str) -> CliResult:
        p = subprocess.run([*workbench_argv(), "play", str(env), *args], input=replies, text=True,
                           capture_output=True, timeout=120, cwd=tmp_path,
                           env={**cli_env, "WORKBENCH_USER_NAME": "alice"})
        return CliResult(p.returncode, p.stdout, p.stderr)

    return run


def test_a_person_plays_a_tool_env_and_the_rollout_is_stored_as_human(
        play: Callable[..., CliResult], write_env: Callable[..., Path], store_path: Path,
        cli: Callable[..., CliResult]) -> None:
    env = write_env(CALC, "calc.py")
    res = play(env, '/call add {"a": 2, "b": 3}\n5\n', "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["reward"] == 1.0 and out["rewards"] == {"correct": 1.0} and out["metrics"] == {"tool_calls": 1.0}
    assert out["source"] == "human" and out["human"] == "alice"
    db = sqlite3.connect(store_path)
    source, state, messages = db.execute("SELECT source, state, messages FROM rollout WHERE id = ?",
                                         (out["rollout_id"],)).fetchone()
    assert source == "human" and json.loads(state)["human"] == "alice"
    msgs = json.loads(messages)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2]["content"] == "5"  # the environment's own tool ran on the person's call
    kind, model = db.execute("SELECT kind, model FROM run WHERE id = ?", (out["run_id"],)).fetchone()
    assert (kind, model) == ("play", "human:alice")
    calls = db.execute("SELECT finish_reason, prompt_tokens, extra FROM model_call ORDER BY idx").fetchall()
    assert [(f, p, json.loads(x)["api"]) for f, p, x in calls] == [("tool_calls", 0, "human"), ("stop", 0, "human")]
    # SFT rows of everything people played, across runs
    exp = cli("export", "--source", "human")
    assert exp.rc == 0, exp.stderr
    [row] = [json.loads(x) for x in exp.stdout.splitlines() if x.strip()]
    exported = [{k: v for k, v in m.items() if not (k == "tool_calls" and v == [])} for m in row["messages"]]
    assert exported == msgs and json.loads(row["metadata"])["source"] == "human" \
        and json.loads(row["metadata"])["human"] == "alice"
    assert cli("export", "--source", "model").stdout.strip() == ""


def test_a_person_plays_a_multi_turn_game_against_its_own_respond(
        play: Callable[..., CliResult], write_env: Callable[..., Path], store_path: Path) -> None:
    env = write_env(GUESS, "guess.py")
    res = play(env, "3\n9\n7\n", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["reward"] == 1.0, out
    msgs = json.loads(sqlite3.connect(store_path).execute("SELECT messages FROM rollout").fetchone()[0])
    assert [m["content"] for m in msgs] == ["Guess my number (1-10).", "3", "higher", "9", "lower", "7"]


def test_a_person_plays_against_a_simulated_user_and_mcp_tools(
        play: Callable[..., CliResult], store_path: Path, mock_server: Callable[..., Any]) -> None:
    """support_desk as the agent: the person calls the CRM's MCP tools and answers; the simulated customer is
    the model given with --base-url/-m (here a scripted mock that is satisfied at once)."""
    mock = mock_server("script", script=["Great, thanks. [DONE]"])
    res = play("support_desk", '/call find_customer {"email": "ana@example.com"}\nI will look into it.\n',
               "--task", "0", "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["status"] == "ok" and out["errors"] == [] and out["metrics"] == {"tool_calls": 1.0}
    msgs = json.loads(sqlite3.connect(store_path).execute("SELECT messages FROM rollout").fetchone()[0])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant"]
    assert "Ana" in msgs[3]["content"], "the person's call reached the env's own MCP server"
    body = mock.bodies()[0]
    assert body["model"] == "mock-model" and "I will look into it." in json.dumps(body["messages"])


@pytest.mark.parametrize("replies, args, fragments", [
    ('/call add {"a": "x", "b": 3}\n', (), ("line 1", "add", "'a'", "integer", "nothing was stored")),
    ('/call add {"a": 1}\n', (), ("line 1", "'b'", "required")),
    ('/call add {"a": 1, "b": 2, "c": 3}\n', (), ("line 1", "no field 'c'")),
    ("/call mul {}\n", (), ("line 1", "no tool 'mul'", "add")),
    ("/call add {a: 1}\n", (), ("line 1", "not JSON")),
    ("\n", (), ("line 1", "empty")),
    ('/call add {"a": 2, "b": 3}\n', (), ("input ended after 1 replies", "nothing was stored")),
    ("", (), ("input ended after 0 replies",)),
    ("5\n", ("--task", "3"), ("has 1 tasks", "--task 3")),
])
def test_bad_input_is_one_line_and_nothing_is_stored(play: Callable[..., CliResult], write_env: Callable[..., Path],
                                                      store_path: Path, replies: str, args: tuple[str, ...],
                                                      fragments: tuple[str, ...]) -> None:
    env = write_env(CALC, "calc.py")
    res = play(env, replies, *args)
    assert_user_error(res, *fragments)
    if store_path.exists():
        db = sqlite3.connect(store_path)
        assert db.execute("SELECT COUNT(*) FROM rollout").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM run").fetchone() == (0,)


TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
    "additionalProperties": False}}}]


@pytest.mark.parametrize("text, want", [
    ("hello", {"role": "assistant", "content": "hello"}),
    ('/call add {"a": 1, "b": 2}', {"role": "assistant", "content": None, "calls": [("add", {"a": 1, "b": 2})]}),
    ('thinking\n/call add {"a": 1, "b": 2}\n/call add {"a": 3, "b": 4}',
     {"role": "assistant", "content": "thinking", "calls": [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]}),
])
def test_a_written_reply_becomes_the_assistant_message(text: str, want: dict[str, Any]) -> None:
    msg = parse_reply(text, TOOLS)
    assert msg["content"] == want["content"]
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls") or []]
    assert got == want.get("calls", [])


@pytest.mark.parametrize("text, field", [('/call add {"a": 1}', "b"), ('/call add {"a": "one", "b": 2}', "a")])
def test_a_bad_tool_call_names_its_field(text: str, field: str) -> None:
    with pytest.raises(ReplyError) as e:
        parse_reply(text, TOOLS)
    assert e.value.field == field


def test_a_human_harness_without_a_person_fails_each_rollout_clearly(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], mock_server: Callable[..., MockServer]) -> None:
    env = write_env(CALC.replace("harness=wb.ToolLoop(tools=[add])", "harness=wb.Human(wb.ToolLoop(tools=[add]))"),
                    "calc.py")
    res = cli("eval", env, "--base-url", mock_server().base_url, "-m", "mock-model", "--json")
    assert res.rc != 0 and "workbench play" in res.stderr, res.stderr
    with pytest.raises(wb.EnvLoadError, match="agent program"):
        wb.Human(wb.Program(["true"]))
