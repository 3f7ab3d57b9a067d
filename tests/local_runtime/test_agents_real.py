"""Real agent frameworks as ``wb.Program`` s, end to end through the CLI: the OpenAI Agents SDK on its default
model (the Responses API) and on chat completions, and a script on the official ``anthropic`` SDK, each
unchanged agent code that reads only its SDK's environment (``OPENAI_BASE_URL``/``OPENAI_API_KEY``,
``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``), against the scripted mock and against the embedded tiny model;
and what only a real model server can answer (several choices, ``/v1/completions``, a stop sequence, a
token budget) through the interception proxy in process."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import workbench as wb
from tests.helpers import CliResult, MockServer, agent_script, cli_environment, last_json
from workbench.records.rollout import Rollout
from workbench.records.trace import Trace
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy import InterceptionProxy

from .helpers import ARITH, SERVED

# slow: real agent frameworks (the OpenAI Agents SDK, the anthropic SDK) run as programs through the CLI
pytestmark = pytest.mark.slow

# -- the agents --------------------------------------------------------------------------------------
#: The OpenAI Agents SDK, its documented hello-world with a function tool. ``chat`` as the first argument
#: puts the same agent on chat completions; otherwise it runs on the SDK's default model (the Responses API).
AGENTS_SDK = '''
import json, sys
import agents
from agents import Agent, Runner, function_tool
from openai import AsyncOpenAI

ran = []


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    ran.append([a, b])
    return a + b


model = {}
if sys.argv[1:] == ["chat"]:
    model = {"model": agents.OpenAIChatCompletionsModel(model="x", openai_client=AsyncOpenAI())}
agent = Agent(name="adder", instructions="You add numbers with the add tool.", tools=[add], **model)
result = Runner.run_sync(agent, sys.stdin.read(), max_turns=4)
print(json.dumps({"final": result.final_output, "ran": ran, "calls": len(result.raw_responses)}))
'''

#: The official Anthropic SDK in a usual tool loop: whole calls and streamed calls by turns.
ANTHROPIC_SDK = '''
import json, sys
import anthropic

client = anthropic.Anthropic()
tools = [{"name": "get_weather", "description": "The weather in a city.",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
messages = [{"role": "user", "content": sys.stdin.read()}]
stops, ran, calls, text = [], [], 0, ""
for turn in range(4):
    args = dict(model="claude-sonnet-4-5", max_tokens=48, system="Be brief.", tools=tools, messages=messages)
    if turn % 2:
        with client.messages.stream(**args) as s:
            streamed = "".join(s.text_stream)
            reply = s.get_final_message()
        assert streamed == "".join(b.text for b in reply.content if b.type == "text")
    else:
        reply = client.messages.create(**args)
    calls += 1
    stops.append(reply.stop_reason)
    text = "".join(b.text for b in reply.content if b.type == "text")
    uses = [b for b in reply.content if b.type == "tool_use"]
    if not uses:
        break
    ran += [b.input for b in uses]
    messages += [{"role": "assistant", "content": [b.model_dump() for b in reply.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": "sunny"}
                                              for b in uses]}]
print(json.dumps({"stops": stops, "ran": ran, "calls": calls, "text": text}))
'''


def _program_env(write_env: Callable[..., Path], agent: Path, *args: str, prompt: str = "What is 2 + 3?") -> Path:
    """An environment whose harness is the agent program; its rubric reads what the program printed."""
    return write_env(f'''
        import json
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.metric
            def printed(state: dict) -> dict:
                out = json.loads(state["stdout"].strip().splitlines()[-1])
                return {{"calls": float(out["calls"]), "ran": float(len(out["ran"]))}}
            return wb.Environment(name="agent", tasks=wb.TaskSet.from_records([{{"prompt": {prompt!r}}}]),
                                  harness=wb.Program([{sys.executable!r}, {str(agent)!r}, *{list(args)!r}]),
                                  rubric=rubric)
        ''')


def _stored(store_path: Path) -> tuple[int, Trace, dict[str, Any]]:
    """(the model_call rows, the one rollout's trace, its state) from the store."""
    db = sqlite3.connect(store_path)
    (calls,) = db.execute("SELECT COUNT(*) FROM model_call").fetchone()
    [row] = db.execute("SELECT nodes, token_ids, logprobs, mask FROM trace").fetchall()
    state = json.loads(db.execute("SELECT state FROM rollout").fetchone()[0])
    return calls, Trace.unpack(*row), state


def _printed(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(state["stdout"].strip().splitlines()[-1])


ADD_CALL = {"id": "call_add_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
FIVE = "The answer is 5."


# -- against the scripted mock -----------------------------------------------------------------------
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_openai_agents_sdk_agent_is_recorded(api: str, tmp_path: Path, mock_server: Callable[..., MockServer],
                                                cli: Callable[..., CliResult], store_path: Path,
                                                write_env: Callable[..., Path]) -> None:
    """The Agents SDK agent calls its tool, gets the answer, ends: every call reaches the upstream as chat with
    the whole conversation, and every call is in the store and the trace, token-exact."""
    agent = agent_script(tmp_path, "agents_sdk.py", AGENTS_SDK)
    env = _program_env(write_env, agent, *(["chat"] if api == "chat" else []))
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [ADD_CALL]}, FIVE])
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["errors"] == 0, summary
    assert summary["metrics"]["token_mismatch"] == 0.0
    calls, trace, state = _stored(store_path)
    out = _printed(state)
    assert out == {"final": FIVE, "ran": [[2, 3]], "calls": 2}, out  # the tool ran with the model's arguments
    assert calls == 2 and trace.calls == 2 and trace.mismatches == []
    [branch] = trace.branches()  # one conversation: the follow-up continues the tool call's
    assert [n.kind for n in branch] == ["env", "assistant", "env", "assistant"]
    first, second = mock.bodies()
    system = {"role": "system", "content": "You add numbers with the add tool."}
    user = {"role": "user", "content": "What is 2 + 3?"}
    assert first["messages"] == [system, user]
    assert [t["function"]["name"] for t in first["tools"]] == ["add"]
    assert second["messages"][:2] == [system, user]
    assert second["messages"][2]["tool_calls"][0]["function"] == ADD_CALL["function"]
    assert second["messages"][3] == {"role": "tool", "tool_call_id": "call_add_1", "content": "5"}
    assert len(second["messages"]) == 4


WEATHER = {"id": "toolu_w1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
WEATHER2 = {"id": "toolu_w2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}


def test_an_anthropic_sdk_agent_is_recorded(tmp_path: Path, mock_server: Callable[..., MockServer],
                                            cli: Callable[..., CliResult], store_path: Path,
                                            write_env: Callable[..., Path]) -> None:
    """The Anthropic SDK from ANTHROPIC_BASE_URL: a tool use answered whole, one streamed, then the answer."""
    agent = agent_script(tmp_path, "claude_agent.py", ANTHROPIC_SDK)
    env = _program_env(write_env, agent, prompt="Weather in Oslo and Rome?")
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [WEATHER]}, {"tool_calls": [WEATHER2]},
                                                     "Sunny in both."])
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["errors"] == 0, summary
    calls, trace, state = _stored(store_path)
    out = _printed(state)
    assert out == {"stops": ["tool_use", "tool_use", "end_turn"], "ran": [{"city": "Oslo"}, {"city": "Rome"}],
                   "calls": 3, "text": "Sunny in both."}, out
    assert calls == 3 and trace.calls == 3 and trace.mismatches == []
    bodies = mock.bodies()
    assert ["stream" in b for b in bodies] == [False, True, False]
    last = bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [m.get("tool_call_id") for m in last if m["role"] == "tool"] == ["toolu_w1", "toolu_w2"]
    # One conversation, each call continuing the last: the tool_use blocks the agent sends back are the
    # replies recorded, whatever the proxy's JSON for their input.
    assert "conversations" not in state, f"the agent's one conversation was split into {state['conversations']}"
    assert len(trace.branches()) == 1


# -- against the embedded tiny model ---------------------------------------------------------------
@pytest.fixture(scope="module")
def embedded_home(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """XDG dirs with the tiny model in the cache: an eval without --base-url starts the embedded server
    there (once; the module's evals share it), stopped after."""
    home = tmp_path_factory.mktemp("embedded-home")
    shutil.copytree(tiny_dir, home / "xdg-cache" / "workbench" / "models" / "workbench-tiny-v1")
    dirs = {k: v for k, v in cli_environment(home).items() if k.startswith("XDG_")}
    yield dirs
    with pytest.MonkeyPatch.context() as mp:
        for k, v in dirs.items():
            mp.setenv(k, v)
        from workbench_local.server.embedded import stop_server

        stop_server(None)


@pytest.mark.parametrize("agent", ["agents-responses", "agents-chat", "anthropic"])
def test_agents_on_the_embedded_model(agent: str, tmp_path: Path, embedded_home: dict[str, str],
                                      cli: Callable[..., CliResult], store_path: Path,
                                      write_env: Callable[..., Path]) -> None:
    """The same unchanged agents on the default (embedded) model. The tiny model may or may not call the
    tool; what must hold: the program ran to its end, every call it made is stored and traced, and the
    trace's tokens are the server's own, exact."""
    code, args = (ANTHROPIC_SDK, []) if agent == "anthropic" else (AGENTS_SDK, ["chat"] if agent == "agents-chat" else [])
    program = agent_script(tmp_path, f"embedded_{agent.replace('-', '_')}.py", code)
    env = _program_env(write_env, program, *args)
    res = cli("eval", env, "--max-tokens", "24", "--json", env=embedded_home, timeout=300)
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["model"] == "workbench-tiny" and summary["errors"] == 0, summary
    assert summary["metrics"]["token_mismatch"] == 0.0
    calls, trace, state = _stored(store_path)
    made = _printed(state)["calls"]
    assert made >= 1 and calls == made and trace.calls == made
    assert trace.has_tokens and trace.mismatches == []
    assert all(n.tokens for n in trace.nodes), "every node holds the server's token ids"


# -- through the proxy, what only a real model server answers ----------------------------------------
async def _proxied(server: str, params: dict[str, Any]) -> tuple[ChatClient, InterceptionProxy, Rollout]:
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, server + "/v1", SERVED, params).start()
    r = Rollout(id="x.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client, base_url=proxy.url_for("x.0.0"),
                model=SERVED, params=params)
    proxy.register(r)
    return client, proxy, r


TRAINING = {"logprobs": True, "return_token_ids": True}


async def test_every_choice_of_an_n_call_is_recorded(server: str) -> None:
    params = {**TRAINING, "temperature": 1.0, "seed": 3, "max_tokens": 8}
    client, proxy, r = await _proxied(server, params)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        whole = await oa.chat.completions.create(model="m", messages=ARITH, n=3)
        stream = await oa.chat.completions.create(model="m", messages=ARITH, n=3, stream=True,
                                                  stream_options={"include_usage": True})
        texts: dict[int, str] = {}
        usage = None
        async for chunk in stream:
            usage = chunk.usage or usage
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
    finally:
        await proxy.close()
        await client.close()
    assert len(whole.choices) == 3 and sorted(texts) == [0, 1, 2]
    assert len(r.calls) == 6
    assert [c.message["content"] for c in r.calls[:3]] == [c.message.content for c in whole.choices]
    assert [c.message["content"] for c in r.calls[3:]] == [texts[i] for i in range(3)]
    # The prompt counts once per call; each choice its own completion tokens.
    assert [c.prompt_tokens > 0 for c in r.calls] == [True, False, False] * 2
    assert sum(c.prompt_tokens for c in r.calls[:3]) == whole.usage.prompt_tokens
    assert sum(c.completion_tokens for c in r.calls[:3]) == whole.usage.completion_tokens
    assert usage is not None and sum(c.completion_tokens for c in r.calls[3:]) == usage.completion_tokens
    assert r.trace.calls == 6 and r.trace.mismatches == []
    # One prompt, six replies beside each other, each with the server's sampled ids.
    env_nodes = [n for n in r.trace.nodes if n.kind == "env"]
    replies = [n for n in r.trace.nodes if n.kind == "assistant"]
    assert len(env_nodes) == 1 and len(replies) == 6 and all(n.parent == env_nodes[0].id for n in replies)
    assert [list(n.tokens) for n in replies[:3]] == [c.model_extra["token_ids"] for c in whole.choices]
    assert all(len(n.logprobs) == len(n.tokens) > 0 for n in replies)


async def test_completions_through_the_proxy_are_recorded(server: str) -> None:
    params = {**TRAINING, "temperature": 1.0, "seed": 5, "max_tokens": 6}
    prompt = "The capital of France is"
    client, proxy, r = await _proxied(server, params)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        got = await oa.completions.create(model="m", prompt=prompt, n=2)
        direct = await openai.AsyncOpenAI(base_url=server + "/v1", api_key="unused", max_retries=0).completions.create(
            model=SERVED, prompt=prompt, max_tokens=6, seed=5, temperature=1.0, n=2,
            extra_body={"return_token_ids": True})
    finally:
        await proxy.close()
        await client.close()
    assert [c.text for c in got.choices] == [c.text for c in direct.choices]  # the run's settings applied
    assert all("token_ids" not in (c.model_extra or {}) for c in got.choices)  # the harness did not ask for them
    assert len(r.calls) == 2 and [c.message["content"] for c in r.calls] == [c.text for c in got.choices]
    assert all((c.extra or {}).get("api") == "completions" for c in r.calls)
    raw = direct.model_dump()
    env_node, *replies = r.trace.nodes
    assert env_node.kind == "env" and list(env_node.tokens) == raw["choices"][0]["prompt_token_ids"]
    assert [list(n.tokens) for n in replies] == [c["token_ids"] for c in raw["choices"]]


async def test_anthropic_stop_reasons_from_a_real_server(server: str) -> None:
    """``max_tokens`` reached is ``max_tokens``; a stop sequence met is ``stop_sequence`` naming it; streamed
    and not. Greedy sampling (the run's temperature 0) makes the free answer the one the stop cuts."""
    client, proxy, r = await _proxied(server, {**TRAINING, "temperature": 0.0, "seed": 1})
    try:
        claude = anthropic.AsyncAnthropic(base_url=r.base_url.removesuffix("/v1"), api_key="x", max_retries=0)
        args: dict[str, Any] = {"model": "claude-x", "system": ARITH[0]["content"], "messages": ARITH[1:]}
        free = await claude.messages.create(max_tokens=24, **args)
        text = "".join(b.text for b in free.content if b.type == "text")
        assert free.usage.output_tokens > 1 and len(text.strip()) > 1, free  # something to cut
        cut = await claude.messages.create(max_tokens=1, **args)
        assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 1
        async with claude.messages.stream(max_tokens=1, **args) as s:
            assert (await s.get_final_message()).stop_reason == "max_tokens"
        stop = next(ch for ch in text[1:] if not ch.isspace())
        expected = text[: text.index(stop)]
        stopped = await claude.messages.create(max_tokens=24, stop_sequences=[stop, "never-in-text"], **args)
        assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == stop, stopped
        assert "".join(b.text for b in stopped.content if b.type == "text") == expected
        async with claude.messages.stream(max_tokens=24, stop_sequences=[stop], **args) as s:
            streamed = await s.get_final_message()
        assert streamed.stop_reason == "stop_sequence" and streamed.stop_sequence == stop, streamed
        assert "".join(b.text for b in streamed.content if b.type == "text") == expected
    finally:
        await proxy.close()
        await client.close()
    assert [c.finish_reason for c in r.calls] == ["stop", "length", "length", "stop", "stop"]


async def test_responses_token_budget_is_an_incomplete_response(server: str) -> None:
    client, proxy, r = await _proxied(server, {**TRAINING, "temperature": 0.0, "seed": 1})
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        whole = await oa.responses.create(model="m", instructions=ARITH[0]["content"], input=ARITH[1]["content"],
                                          max_output_tokens=1)
        async with oa.responses.stream(model="m", instructions=ARITH[0]["content"], input=ARITH[1]["content"],
                                       max_output_tokens=1) as s:
            events = [e async for e in s]
    finally:
        await proxy.close()
        await client.close()
    # The SDK's get_final_response() wants response.completed; an incomplete response ends with its own event.
    kinds = [e.type for e in events]
    streamed = events[-1].response
    for resp in (whole, streamed):
        assert resp.status == "incomplete" and resp.incomplete_details is not None
        assert resp.incomplete_details.reason == "max_output_tokens" and resp.usage.output_tokens == 1
    assert kinds[0] == "response.created" and kinds[-1] == "response.incomplete"
    assert [c.finish_reason for c in r.calls] == ["length", "length"] and r.trace.calls == 2
