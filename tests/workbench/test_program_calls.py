"""What a wb.Program rollout keeps of its program's calls: each call's tools in the stored trace, the
whole conversation (or every conversation) as the rollout's messages, and both APIs' placeholder keys."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from tests.helpers import CliResult, MockServer, agent_script, last_json
from workbench.records.conversations import Conversations
from workbench.records.trace import Trace
from workbench.testing.mock_openai import toy_render, toy_tokens

LOOKUP = {"type": "function", "function": {"name": "lookup", "description": "Look a word up.", "parameters": {
    "type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}
SPELL = {"type": "function", "function": {"name": "spell", "parameters": {"type": "object", "properties": {}}}}


def _u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _a(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


# -- the trace keeps each call's tools -----------------------------------------------------------------
def test_each_calls_tools_survive_packing_and_repeat_once() -> None:
    t = Trace()
    t.record([_u("q")], _a("a"), toy_render([_u("q")]), [*toy_tokens("a"), 5], tools=[LOOKUP])
    t.record([_u("q"), _a("a"), _u("r")], _a("b"), toy_render([_u("q"), _a("a"), _u("r")]), [*toy_tokens("b"), 5],
             tools=[LOOKUP])
    t.record([_u("other")], _a("c"), toy_render([_u("other")]), [*toy_tokens("c"), 5])
    t.record([_u("more")], _a("d"), toy_render([_u("more")]), [*toy_tokens("d"), 5], tools=[LOOKUP, SPELL])
    nodes, *arrays = t.pack()
    doc = orjson.loads(nodes)
    assert doc["tool_sets"] == [[LOOKUP], [LOOKUP, SPELL]] and doc["call_tools"] == [0, 0, None, 1]
    back = Trace.unpack(nodes, *arrays)
    assert back.call_tools == [[LOOKUP], [LOOKUP], None, [LOOKUP, SPELL]]
    assert [back.tools_of(c, [SPELL]) for c in range(4)] == [[LOOKUP], [LOOKUP], None, [LOOKUP, SPELL]]


def test_a_trace_stored_before_calls_tools_were_kept_falls_back_to_the_declared_ones() -> None:
    t = Trace()
    t.record([_u("q")], _a("a"), toy_render([_u("q")]), [*toy_tokens("a"), 5], tools=[LOOKUP])
    nodes, *arrays = t.pack()
    old = orjson.loads(nodes)
    del old["tool_sets"], old["call_tools"]
    back = Trace.unpack(orjson.dumps(old), *arrays)
    assert back.call_tools is None
    assert back.tools_of(0, [SPELL]) == [SPELL] and back.tools_of(0) is None


# -- conversations rebuilt from calls ------------------------------------------------------------------
def test_calls_that_extend_each_other_are_one_conversation() -> None:
    c = Conversations()
    c.add([_u("q")], _a("a"))
    # An SDK sends the reply back with fields of its own: still the same conversation.
    c.add([_u("q"), {**_a("a"), "refusal": None, "annotations": [], "tool_calls": None}, _u("r")], _a("b"))
    c.add([_u("q"), _a("a"), _u("r"), _a("b"), _u("s")], _a("c"))
    assert len(c) == 1 and c.lengths() == [6]
    assert [m["content"] for m in c.messages()] == ["q", "a", "r", "b", "s", "c"]


def test_independent_conversations_are_all_kept_in_the_order_they_last_spoke() -> None:
    c = Conversations()
    c.add([_u("main")], _a("m1"))
    c.add([_u("sub")], _a("s1"))  # a sub-agent: no extension of the main conversation
    c.add([_u("sub"), _a("s1"), _u("sub 2")], _a("s2"))
    c.add([_u("main"), _a("m1"), _u("main 2")], _a("m2"))  # the main one goes on, and speaks last
    c.add([_u("sub")], _a("s1 again"))  # the same prompt once more: another sample, kept
    c.add([_u("main"), _a("m1"), _u("main 2"), _a("m2"), _u("main 3")], _a("m3"))
    assert c.lengths() == [4, 2, 6]
    assert [m["content"] for m in c.messages()] == ["sub", "s1", "sub 2", "s2", "sub", "s1 again",
                                                     "main", "m1", "main 2", "m2", "main 3", "m3"]


# -- end to end: a program through the proxy, stored -------------------------------------------------
ONE_CONVERSATION = f'''
import json, os, sys
from openai import OpenAI
client = OpenAI()
tools = [{LOOKUP!r}]
msgs = [{{"role": "system", "content": "be brief"}}, {{"role": "user", "content": sys.stdin.read()}}]
for turn in range(3):
    if turn == 1:  # the second call streams
        text = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model="x", messages=msgs, tools=tools, stream=True) if c.choices)
        msgs.append({{"role": "assistant", "content": text}})
    else:
        r = client.chat.completions.create(model="x", messages=msgs, tools=tools)
        msgs.append(r.choices[0].message.model_dump())  # with the SDK's own fields (refusal, annotations, ...)
    msgs.append({{"role": "user", "content": "again %d" % turn}})
print(json.dumps({{k: os.environ.get(k) for k in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}}))
'''

TWO_CONVERSATIONS = '''
from openai import OpenAI
client = OpenAI()
def ask(msgs):
    return {"role": "assistant", "content": client.chat.completions.create(model="x", messages=msgs)
            .choices[0].message.content}
main = [{"role": "user", "content": "main question"}]
main.append(ask(main))
sub = [{"role": "system", "content": "you are a helper"}, {"role": "user", "content": "sub question"}]
sub.append(ask(sub))
sub.append({"role": "user", "content": "sub follow-up"})
sub.append(ask(sub))
main.append({"role": "user", "content": "main follow-up"})
main.append(ask(main))
print(main[-1]["content"])
'''


def _program_env(write_env: Callable[..., Path], agent: Path) -> Path:
    return write_env(f'''
        import workbench as wb
        def load_environment():
            return wb.Environment(name="prog", tasks=wb.TaskSet.from_records([{{"prompt": "hello there"}}]),
                                  harness=wb.Program([{sys.executable!r}, {str(agent)!r}]), rubric=wb.Rubric())
        ''')


def _stored(store_path: Path) -> tuple[list[dict[str, Any]], dict[str, Any], Trace]:
    db = sqlite3.connect(store_path)
    messages, state = db.execute("SELECT messages, state FROM rollout").fetchone()
    trace = Trace.unpack(*db.execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchone())
    return json.loads(messages), json.loads(state), trace


def test_a_programs_rollout_holds_its_whole_conversation_and_each_calls_tools(
        tmp_path: Path, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult], store_path: Path,
        write_env: Callable[..., Path]) -> None:
    env = _program_env(write_env, agent_script(tmp_path, "one.py", ONE_CONVERSATION))
    res = cli("eval", env, "--base-url", mock_server("echo", "--tokens").base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["errors"] == 0
    messages, state, trace = _stored(store_path)
    # The echo mock repeats the last user message: every reply is known.
    assert [(m["role"], m["content"]) for m in messages] == [
        ("system", "be brief"), ("user", "hello there"), ("assistant", "hello there"), ("user", "again 0"),
        ("assistant", "again 0"), ("user", "again 1"), ("assistant", "again 1")]
    assert "conversations" not in state
    assert json.loads(state["stdout"]) == {"OPENAI_API_KEY": "workbench-proxy", "ANTHROPIC_API_KEY": "workbench-proxy"}
    # Every call's tools, streamed or not, are stored with the trace.
    assert trace.calls == 3 and trace.call_tools == [[LOOKUP]] * 3


def test_a_program_holding_two_conversations_keeps_both(
        tmp_path: Path, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult], store_path: Path,
        write_env: Callable[..., Path]) -> None:
    env = _program_env(write_env, agent_script(tmp_path, "two.py", TWO_CONVERSATIONS))
    res = cli("eval", env, "--base-url", mock_server("echo", "--tokens").base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    messages, state, trace = _stored(store_path)
    assert [m["content"] for m in messages] == [
        "you are a helper", "sub question", "sub question", "sub follow-up", "sub follow-up",
        "main question", "main question", "main follow-up", "main follow-up"]
    assert state["conversations"] == [5, 4]
    assert "final_output" not in state  # the completion is the reply to the program's last call, as it printed
    assert trace.call_tools == [None] * 4  # it sent no tools


def test_a_harness_calling_the_model_directly_records_its_tools(
        mock_server: Callable[..., MockServer], cli: Callable[..., CliResult], store_path: Path,
        write_env: Callable[..., Path]) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"word": "x"}'}}
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [call]}, "done"])
    env = write_env('''
        import workbench as wb
        def lookup(word: str) -> str:
            """Look a word up."""
            return word.upper()
        def load_environment():
            return wb.Environment(name="tools", tasks=wb.TaskSet.from_records([{"prompt": "look x up"}]),
                                  harness=wb.ToolLoop([lookup]), rubric=wb.Rubric())
        ''')
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    _, _, trace = _stored(store_path)
    assert trace.calls == 2 and trace.call_tools is not None
    assert [[t["function"]["name"] for t in tools or []] for tools in trace.call_tools] == [["lookup"], ["lookup"]]
    db = sqlite3.connect(store_path)
    doc = orjson.loads(db.execute("SELECT nodes FROM trace").fetchone()[0])
    assert len(doc["tool_sets"]) == 1 and doc["call_tools"] == [0, 0]  # the same schemas are stored once


def test_a_program_killed_by_a_signal_exits_as_a_shell_reports_it(
        tmp_path: Path, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult], store_path: Path,
        write_env: Callable[..., Path]) -> None:
    """A program that dies of signal N ends its rollout with exit code 128+N, as a shell says it."""
    agent = agent_script(tmp_path, "killed.py", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    env = _program_env(write_env, agent)
    res = cli("eval", env, "--base-url", mock_server("echo", "--tokens").base_url, "-m", "mock-model", "--json")
    assert last_json(res.stdout)["errors"] == 1, res.stderr
    (state,) = sqlite3.connect(store_path).execute("SELECT state FROM rollout").fetchone()
    assert json.loads(state)["exit_code"] == 137
