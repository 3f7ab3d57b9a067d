"""The interception proxy speaks the APIs agents use: the Anthropic Messages API and the OpenAI Responses
API, streamed and not, each translated to chat completions upstream and recorded in the rollout's trace.

Real HTTP on 127.0.0.1: the proxy in this test's event loop, the scripted mock upstream as a subprocess,
and the official ``anthropic`` and ``openai`` SDKs as the harness's clients. What the upstream received
(``mock.bodies()``) is checked as closely as what the harness got back.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import openai
import pytest

import workbench as wb
from tests.helpers import MockServer
from workbench.records.rollout import Rollout
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy import InterceptionProxy
from workbench.testing.mock_openai import toy_render, toy_tokens

# slow: a mock upstream process and SDK clients per case of each API
pytestmark = pytest.mark.slow

PARAMS = {"logprobs": True, "return_token_ids": True}


@contextlib.asynccontextmanager
async def _proxy(upstream: str, *rollout_ids: str) -> AsyncIterator[tuple[InterceptionProxy, list[Rollout]]]:
    """The proxy in front of ``upstream`` with one registered rollout per id; closed after."""
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, upstream, "mock-model", dict(PARAMS)).start()
    rollouts = []
    for rid in rollout_ids or ("run.0.0",):
        r = Rollout(id=rid, task=wb.Task(prompt="hi"), sample_index=0, client=client, base_url=proxy.url_for(rid),
                    model="mock-model", params=dict(PARAMS))
        proxy.register(r)
        rollouts.append(r)
    try:
        yield proxy, rollouts
    finally:
        await proxy.close()
        await client.close()


def _claude(r: Rollout) -> anthropic.AsyncAnthropic:
    """The Anthropic SDK as an agent configures it from ANTHROPIC_BASE_URL: the rollout's URL without /v1."""
    return anthropic.AsyncAnthropic(base_url=r.base_url.removesuffix("/v1"), api_key="x", max_retries=0)


def _openai(r: Rollout) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=r.base_url, api_key="x", max_retries=0)


def _completion_tokens(message: dict[str, Any]) -> int:
    """How many tokens the mock's toy tokenizer gives ``message`` as a reply (its words and an end token)."""
    words = [message.get("content") or ""]
    for tc in message.get("tool_calls") or ():
        words.append(f"{tc['function']['name']} {tc['function']['arguments']}")
    return len(toy_tokens(" ".join(w for w in words if w))) + 1


# -- the Anthropic Messages API ---------------------------------------------------------------------
WEATHER_CALL = {"id": "toolu_01", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                                 "required": ["city"]}}
CHAT_WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_TOOL["input_schema"],
                                                      "description": "The weather in a city."}}
SUNNY = "It is sunny in Paris."


def _weather_upstream_conversation() -> list[dict[str, Any]]:
    """The chat conversation the upstream must see for the second call of the weather exchange."""
    return [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "toolu_01", "content": "sunny, 24C"}]


def _normalized(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments parsed, so a re-serialization ('{"city":"Paris"}') compares equal."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**tc, "function": {**tc["function"], "arguments": json.loads(tc["function"]["arguments"])}}
                               for tc in m["tool_calls"]]
        out.append(m)
    return out


async def test_anthropic_tool_use_then_tool_result(mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [WEATHER_CALL]}, SUNNY])
    async with _proxy(mock.base_url) as (_, [r]):
        claude = _claude(r)
        user = {"role": "user", "content": "Weather in Paris?"}
        first = await claude.messages.create(model="claude-sonnet-4-5", max_tokens=256, system="You are terse.",
                                             tools=[WEATHER_TOOL], messages=[user])
        [block] = first.content
        assert block.type == "tool_use" and block.name == "get_weather" and block.id == "toolu_01"
        assert block.input == {"city": "Paris"}  # parsed from the chat call's argument string
        assert first.stop_reason == "tool_use" and first.role == "assistant"
        assert first.model == "claude-sonnet-4-5"  # the name the harness asked for
        second = await claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=256, system="You are terse.", tools=[WEATHER_TOOL],
            messages=[user, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id,
                                                    "content": "sunny, 24C"}]}])
    assert [b.type for b in second.content] == ["text"] and second.content[0].text == SUNNY
    assert second.stop_reason == "end_turn" and second.stop_sequence is None
    upstream_conversation = _weather_upstream_conversation()
    b1, b2 = mock.bodies()
    # Usage is the upstream's own count (the toy tokenizer's) in Anthropic's names.
    assert second.usage.input_tokens == len(toy_render(b2["messages"]))
    assert second.usage.output_tokens == _completion_tokens({"content": SUNNY})
    assert b1["messages"] == upstream_conversation[:2]  # the system prompt first
    assert b1["tools"] == [CHAT_WEATHER_TOOL] and b1["max_tokens"] == 256 and b1["model"] == "mock-model"
    assert _normalized(b2["messages"]) == _normalized(upstream_conversation)
    assert "stream" not in b1 and "stream" not in b2
    assert [c.finish_reason for c in r.calls] == ["tool_calls", "stop"]
    assert r.calls[0].message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert r.calls[1].message["content"] == SUNNY and r.calls[1].n_messages == 4
    assert [(c.extra or {}).get("api") for c in r.calls] == ["messages", "messages"]
    assert r.trace.calls == 2 and r.trace.mismatches == []


async def test_anthropic_streamed_text_and_tool_use(mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [WEATHER_CALL]}, SUNNY])
    async with _proxy(mock.base_url) as (_, [r]):
        claude = _claude(r)
        user = {"role": "user", "content": "Weather in Paris?"}
        events: list[str] = []
        async with claude.messages.stream(model="claude-x", max_tokens=128, system="You are terse.",
                                          tools=[WEATHER_TOOL], messages=[user]) as s:
            async for event in s:
                events.append(event.type)
            first = await s.get_final_message()
        [block] = first.content
        assert block.type == "tool_use" and block.input == {"city": "Paris"} and first.stop_reason == "tool_use"
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert {"content_block_start", "input_json", "content_block_stop", "message_delta"} <= set(events)

        async with claude.messages.stream(
                model="claude-x", max_tokens=128, system="You are terse.", tools=[WEATHER_TOOL],
                messages=[user, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                          {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01",
                                                        "content": [{"type": "text", "text": "sunny, 24C"}]}]}]) as s:
            pieces = [t async for t in s.text_stream]
            second = await s.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == SUNNY  # streamed word by word, as the upstream sent it
    assert [b.type for b in second.content] == ["text"] and second.content[0].text == SUNNY
    assert second.stop_reason == "end_turn"
    assert second.usage.output_tokens == _completion_tokens({"content": SUNNY})
    b1, b2 = mock.bodies()
    assert second.usage.input_tokens == len(toy_render(b2["messages"]))
    assert b1["stream"] is True and b1["stream_options"] == {"include_usage": True}
    assert _normalized(b2["messages"]) == _normalized(_weather_upstream_conversation())
    assert [c.finish_reason for c in r.calls] == ["tool_calls", "stop"]
    assert r.calls[1].message["content"] == SUNNY
    assert r.calls[1].completion_tokens == _completion_tokens({"content": SUNNY})
    assert r.trace.calls == 2 and r.trace.mismatches == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_anthropic_tool_use_round_trip_continues_one_conversation(
        stream: bool, mock_server: Callable[..., MockServer]) -> None:
    """The assistant turn the harness sends back (its tool_use block, ``input`` an object) is the reply the
    upstream gave, so the second call continues the first call's conversation in the trace: one branch, the
    tool call's sampled tokens in it. The upstream wrote the arguments as servers do (``json.dumps``: with
    spaces); a proxy that re-serializes ``input`` its own way sends another assistant message than the one
    recorded, and the trace splits into two conversations."""
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [WEATHER_CALL]}, SUNNY])
    user = {"role": "user", "content": "Weather in Paris?"}
    args: dict[str, Any] = {"model": "claude-x", "max_tokens": 64, "tools": [WEATHER_TOOL]}
    async with _proxy(mock.base_url) as (_, [r]):
        claude = _claude(r)

        async def call(messages: list[dict[str, Any]]) -> Any:
            if not stream:
                return await claude.messages.create(messages=messages, **args)
            async with claude.messages.stream(messages=messages, **args) as s:
                return await s.get_final_message()

        first = await call([user])
        await call([user, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"}]}])
    sent = mock.bodies()[1]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    branches = r.trace.branches()
    assert len(branches) == 1, (f"the upstream answered arguments {WEATHER_CALL['function']['arguments']!r}, the "
                                f"proxy sent them back as {sent!r}: the trace split into {len(branches)} conversations")
    assert [n.kind for n in branches[0]] == ["env", "assistant", "env", "assistant"]

ROME_CALL = {"id": "toolu_02", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_anthropic_text_and_parallel_tool_uses(stream: bool, mock_server: Callable[..., MockServer]) -> None:
    """A reply with text and two tool calls is a text block and two tool_use blocks; both tool_results in the
    next user turn reach the upstream as two tool messages after the one assistant message."""
    mixed = {"content": "Checking both.", "tool_calls": [WEATHER_CALL, ROME_CALL]}
    mock = mock_server("script", "--tokens", script=[mixed, "Both sunny."])
    user = {"role": "user", "content": "Weather in Paris and Rome?"}
    args: dict[str, Any] = {"model": "claude-x", "max_tokens": 64, "tools": [WEATHER_TOOL]}
    async with _proxy(mock.base_url) as (_, [r]):
        claude = _claude(r)
        if stream:
            async with claude.messages.stream(messages=[user], **args) as s:
                first = await s.get_final_message()
        else:
            first = await claude.messages.create(messages=[user], **args)
        assert [b.type for b in first.content] == ["text", "tool_use", "tool_use"]
        assert first.content[0].text == "Checking both." and first.stop_reason == "tool_use"
        assert [(b.id, b.input) for b in first.content[1:]] == [("toolu_01", {"city": "Paris"}),
                                                                 ("toolu_02", {"city": "Rome"})]
        second = await claude.messages.create(messages=[
            user, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny"},
                                         {"type": "tool_result", "tool_use_id": "toolu_02", "content": "rain",
                                          "is_error": True}]}], **args)
    assert second.content[0].text == "Both sunny."
    sent = mock.bodies()[1]["messages"]
    assert _normalized(sent) == _normalized([
        user, {"role": "assistant", "content": "Checking both.", "tool_calls": [WEATHER_CALL, ROME_CALL]},
        {"role": "tool", "tool_call_id": "toolu_01", "content": "sunny"},
        {"role": "tool", "tool_call_id": "toolu_02", "content": "Error: rain"}])
    assert [c.finish_reason for c in r.calls] == ["tool_calls", "stop"]
    assert [len(c.message.get("tool_calls") or ()) for c in r.calls] == [2, 0]
    assert all((c.extra or {}).get("api") == "messages" for c in r.calls)


async def test_anthropic_request_options_reach_the_upstream_as_chat(mock_server: Callable[..., MockServer]) -> None:
    """System blocks, an image, tool_choice and stop_sequences become their chat forms; a server tool
    (run by Anthropic's API itself) is left out: the model has the tools the harness runs."""
    mock = mock_server("script", "--tokens", script=["ok"])
    async with _proxy(mock.base_url) as (_, [r]):
        reply = await _claude(r).messages.create(
            model="claude-x", max_tokens=32, system=[{"type": "text", "text": "Be brief."}],
            tools=[WEATHER_TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
            tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            stop_sequences=["END"],
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "Look."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert reply.content[0].text == "ok" and reply.stop_reason == "end_turn"
    [body] = mock.bodies()
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [
        {"type": "text", "text": "Look."}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]
    assert body["tools"] == [CHAT_WEATHER_TOOL]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
    assert (body["stop"], body["max_tokens"]) == (["END"], 32)
    assert len(r.calls) == 1 and (r.calls[0].extra or {}).get("api") == "messages"


# -- the OpenAI Responses API -----------------------------------------------------------------------
ADD_CALL = {"id": "call_7", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
ADD_TOOL = {"type": "function", "name": "add", "description": "Add two integers.", "strict": True,
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"], "additionalProperties": False}}
FIVE = "The sum is 5."
ADD_CONVERSATION = [{"role": "system", "content": "Use the add tool."},
                    {"role": "user", "content": "What is 2 + 3?"},
                    {"role": "assistant", "content": None, "tool_calls": [ADD_CALL]},
                    {"role": "tool", "tool_call_id": "call_7", "content": "5"}]


async def test_responses_function_call_then_previous_response_id(mock_server: Callable[..., MockServer]) -> None:
    """A follow-up naming previous_response_id sends the whole conversation upstream; the same conversation
    sent as a full input list (message, reasoning, function_call, function_call_output items) reaches the
    upstream identically."""
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [ADD_CALL]}, FIVE])
    async with _proxy(mock.base_url) as (_, [r]):
        oa = _openai(r)
        first = await oa.responses.create(model="gpt-5", instructions="Use the add tool.", input="What is 2 + 3?",
                                          tools=[ADD_TOOL])
        [item] = first.output
        assert item.type == "function_call" and item.name == "add" and item.call_id == "call_7"
        assert json.loads(item.arguments) == {"a": 2, "b": 3} and first.status == "completed"
        second = await oa.responses.create(
            model="gpt-5", instructions="Use the add tool.", previous_response_id=first.id, tools=[ADD_TOOL],
            input=[{"type": "function_call_output", "call_id": item.call_id, "output": "5"}])
        assert second.output_text == FIVE and second.previous_response_id == first.id
        assert second.usage is not None
        assert second.usage.input_tokens == len(toy_render(ADD_CONVERSATION))
        assert second.usage.output_tokens == _completion_tokens({"content": FIVE})
        stateless = await oa.responses.create(model="gpt-5", instructions="Use the add tool.", tools=[ADD_TOOL], input=[
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is 2 + 3?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "I should add."}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_7", "name": "add", "arguments": '{"a": 2, "b": 3}'},
            {"type": "function_call_output", "call_id": "call_7", "output": "5"}])
        assert stateless.output[0].type == "function_call"  # the script cycles: this answer is its first again
    b1, b2, b3 = mock.bodies()
    assert b1["messages"] == ADD_CONVERSATION[:2]
    assert b1["tools"] == [{"type": "function", "function": {
        "name": "add", "parameters": ADD_TOOL["parameters"], "description": "Add two integers.", "strict": True}}]
    assert b2["messages"] == ADD_CONVERSATION
    assert b3["messages"] == b2["messages"] and b3["tools"] == b2["tools"]
    assert [c.finish_reason for c in r.calls] == ["tool_calls", "stop", "tool_calls"]
    assert [(c.extra or {}).get("api") for c in r.calls] == ["responses"] * 3
    assert r.trace.calls == 3 and r.trace.mismatches == []
    # The stateless call is the same conversation: it adds its reply only, beside the second call's.
    assert [n.kind for n in r.trace.nodes] == ["env", "assistant", "env", "assistant", "assistant"]


async def test_responses_streamed(mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", "--tokens", script=[FIVE, {"tool_calls": [ADD_CALL]}, FIVE])
    async with _proxy(mock.base_url) as (_, [r]):
        oa = _openai(r)
        events: list[Any] = []
        async with oa.responses.stream(model="gpt-5", instructions="Be brief.", input="What is 2 + 3?") as s:
            async for event in s:
                events.append(event)
            text_response = await s.get_final_response()
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
        deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
        assert len(deltas) > 1 and "".join(deltas) == FIVE == text_response.output_text
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert text_response.status == "completed" and text_response.usage is not None
        assert text_response.usage.output_tokens == _completion_tokens({"content": FIVE})

        stream = await oa.responses.create(model="gpt-5", instructions="Use the add tool.", input="What is 2 + 3?",
                                           tools=[ADD_TOOL], stream=True)
        tool_events = [e async for e in stream]
        assert tool_events[0].type == "response.created" and tool_events[-1].type == "response.completed"
        final = tool_events[-1].response
        [item] = final.output
        assert item.type == "function_call" and item.call_id == "call_7"
        assert json.loads(item.arguments) == {"a": 2, "b": 3}
        args = "".join(e.delta for e in tool_events if e.type == "response.function_call_arguments.delta")
        assert json.loads(args) == {"a": 2, "b": 3}
        # A streamed response's id continues the conversation like any other.
        follow = await oa.responses.create(model="gpt-5", instructions="Use the add tool.", tools=[ADD_TOOL],
                                           previous_response_id=final.id,
                                           input=[{"type": "function_call_output", "call_id": "call_7", "output": "5"}])
        assert follow.output_text == FIVE
    b1, b2, b3 = mock.bodies()
    assert b1["stream"] is True and b1["messages"] == [{"role": "system", "content": "Be brief."},
                                                      {"role": "user", "content": "What is 2 + 3?"}]
    assert b2["stream"] is True and "stream" not in b3
    assert b3["messages"] == ADD_CONVERSATION
    assert [c.finish_reason for c in r.calls] == ["stop", "tool_calls", "stop"]
    assert r.calls[0].message["content"] == FIVE
    assert r.trace.calls == 3 and r.trace.mismatches == []
    # The follow-up continued the streamed tool call's conversation; the first call was another one.
    assert len(r.trace.branches()) == 2 and len(r.trace.branches()[-1]) == 4


ADD_CALL2 = {"id": "call_8", "type": "function", "function": {"name": "add", "arguments": '{"a": 4, "b": 4}'}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_responses_text_and_parallel_function_calls(stream: bool, mock_server: Callable[..., MockServer]) -> None:
    """A reply with text and two calls is a message item and two function_call items; the follow-up (by
    previous_response_id, and the same as a full input list) is one assistant message with both calls,
    then both outputs."""
    mixed = {"content": "Adding twice.", "tool_calls": [ADD_CALL, ADD_CALL2]}
    mock = mock_server("script", "--tokens", script=[mixed, FIVE, FIVE])
    async with _proxy(mock.base_url) as (_, [r]):
        oa = _openai(r)
        if stream:
            events = [e async for e in await oa.responses.create(model="m", input="What is 2 + 3 and 4 + 4?",
                                                                 tools=[ADD_TOOL], stream=True)]
            assert events[-1].type == "response.completed"
            first = events[-1].response
        else:
            first = await oa.responses.create(model="m", input="What is 2 + 3 and 4 + 4?", tools=[ADD_TOOL])
        assert [i.type for i in first.output] == ["message", "function_call", "function_call"]
        assert first.output_text == "Adding twice."
        assert [(i.call_id, json.loads(i.arguments)) for i in first.output[1:]] == [("call_7", {"a": 2, "b": 3}),
                                                                                    ("call_8", {"a": 4, "b": 4})]
        outputs = [{"type": "function_call_output", "call_id": "call_7", "output": "5"},
                   {"type": "function_call_output", "call_id": "call_8", "output": "8"}]
        await oa.responses.create(model="m", input=outputs, previous_response_id=first.id, tools=[ADD_TOOL])
        await oa.responses.create(model="m", tools=[ADD_TOOL], input=[
            {"type": "message", "role": "user", "content": "What is 2 + 3 and 4 + 4?"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Adding twice."}]},
            *[{"type": "function_call", "call_id": i.call_id, "name": i.name, "arguments": i.arguments}
              for i in first.output[1:]], *outputs])
    _, by_id, stateless = mock.bodies()
    expected = [{"role": "user", "content": "What is 2 + 3 and 4 + 4?"},
                {"role": "assistant", "content": "Adding twice.", "tool_calls": [ADD_CALL, ADD_CALL2]},
                {"role": "tool", "tool_call_id": "call_7", "content": "5"},
                {"role": "tool", "tool_call_id": "call_8", "content": "8"}]
    assert by_id["messages"] == expected and stateless["messages"] == expected
    assert len(r.calls) == 3 and all((c.extra or {}).get("api") == "responses" for c in r.calls)


async def test_responses_request_options_reach_the_upstream_as_chat(mock_server: Callable[..., MockServer]) -> None:
    """A developer message, tool_choice, text.format and max_output_tokens become their chat forms; a hosted
    tool (run at OpenAI) is left out: the model has the tools the harness runs."""
    mock = mock_server("script", "--tokens", script=['{"sum": 5}'])
    schema = {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"],
              "additionalProperties": False}
    async with _proxy(mock.base_url) as (_, [r]):
        reply = await _openai(r).responses.create(
            model="m", tools=[{"type": "web_search"}, ADD_TOOL], tool_choice="required", max_output_tokens=20,
            text={"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}},
            input=[{"type": "message", "role": "developer", "content": "Answer in JSON."},
                   {"role": "user", "content": "What is 2 + 3?"}])
    assert reply.output_text == '{"sum": 5}'
    [body] = mock.bodies()
    assert body["messages"] == [{"role": "system", "content": "Answer in JSON."},
                                {"role": "user", "content": "What is 2 + 3?"}]
    assert [t["function"]["name"] for t in body["tools"]] == ["add"]
    assert body["tool_choice"] == "required" and body["max_tokens"] == 20
    assert body["response_format"] == {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    assert len(r.calls) == 1


async def test_previous_response_id_stays_within_its_rollout(mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", "--tokens", script=[FIVE])
    async with _proxy(mock.base_url, "run.0.0", "run.1.0") as (_, [mine, other]):
        first = await _openai(mine).responses.create(model="m", input="What is 2 + 3?")
        with pytest.raises(openai.BadRequestError) as e:
            await _openai(other).responses.create(model="m", input="and then?", previous_response_id=first.id)
        assert e.value.status_code == 400
        assert e.value.body["param"] == "previous_response_id" and first.id in e.value.body["message"]
        # In its own rollout the id is still good.
        again = await _openai(mine).responses.create(model="m", input="and then?", previous_response_id=first.id)
        assert again.output_text == FIVE
    assert len(mock.bodies()) == 2
    assert other.calls == [] and len(mine.calls) == 2


# -- bad input: one clear error in the API's own shape, nothing sent upstream, nothing recorded --------
NOT_JSON = b'{"model": "m", "messages": ['
MSG = {"role": "user", "content": "hi"}


def _anthropic_body(**over: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 16, "messages": [MSG], **over}


BAD_INPUT: list[tuple[str, str, str, dict[str, Any] | bytes, int, str]] = [
    # (id, api, rollout, body, status, a fragment of the message)
    ("messages-unknown-rollout", "messages", "nope", _anthropic_body(), 404, "no running rollout"),
    ("messages-not-json", "messages", "run.0.0", NOT_JSON, 400, "not JSON"),
    ("messages-no-max-tokens", "messages", "run.0.0", {"model": "claude-x", "messages": [MSG]}, 400, "max_tokens"),
    ("messages-tool-without-schema", "messages", "run.0.0",
     _anthropic_body(tools=[WEATHER_TOOL, {"name": "lookup", "description": "no input_schema"}]), 400, "tools[1]"),
    ("messages-bad-tool-choice", "messages", "run.0.0",
     _anthropic_body(tools=[WEATHER_TOOL], tool_choice={"type": "sometimes"}), 400, "tool_choice"),
    ("messages-bad-role", "messages", "run.0.0", _anthropic_body(messages=[{"role": "tool", "content": "x"}]),
     400, "messages[0].role"),
    ("messages-document-block", "messages", "run.0.0",
     _anthropic_body(messages=[{"role": "user", "content": [
         {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]),
     400, "messages[0].content[0]"),
    ("messages-no-messages", "messages", "run.0.0", _anthropic_body(messages=[]), 400, "messages"),
    ("responses-unknown-rollout", "responses", "nope", {"model": "m", "input": "hi"}, 404, "no running rollout"),
    ("responses-not-json", "responses", "run.0.0", NOT_JSON, 400, "not JSON"),
    ("responses-nameless-function", "responses", "run.0.0",
     {"model": "m", "input": "hi", "tools": [ADD_TOOL, {"type": "function", "parameters": {}}]}, 400, "tools[1]"),
    ("responses-untyped-tool", "responses", "run.0.0", {"model": "m", "input": "hi", "tools": [{"name": "add"}]},
     400, "tools[0]"),
    ("responses-unknown-previous", "responses", "run.0.0",
     {"model": "m", "input": "hi", "previous_response_id": "resp_doesnotexist"}, 400, "resp_doesnotexist"),
    ("responses-file-part", "responses", "run.0.0",
     {"model": "m", "input": [{"type": "message", "role": "user", "content": [
         {"type": "input_file", "file_id": "file-123"}]}]}, 400, "input[0].content[0]"),
    ("responses-item-type-not-a-string", "responses", "run.0.0",
     {"model": "m", "input": [{"type": 5, "call_id": "c", "output": {}}]}, 400, "input[0].type"),
    ("responses-nothing-a-chat-model-reads", "responses", "run.0.0",
     {"model": "m", "input": [{"type": "computer_call_output", "call_id": "c", "output": {}}]}, 400, "input"),
    ("responses-no-input", "responses", "run.0.0", {"model": "m"}, 400, "input"),
    ("chat-unknown-rollout", "chat", "nope", {"model": "m", "messages": [MSG]}, 404, "no running rollout"),
    ("chat-not-json", "chat", "run.0.0", NOT_JSON, 400, "not JSON"),
    ("chat-no-messages", "chat", "run.0.0", {"model": "m"}, 400, "messages"),
    ("completions-unknown-rollout", "completions", "nope", {"model": "m", "prompt": "hi"}, 404, "no running rollout"),
    ("completions-not-json", "completions", "run.0.0", NOT_JSON, 400, "not JSON"),
    ("completions-prompt-list", "completions", "run.0.0", {"model": "m", "prompt": ["a", "b"]}, 400, "prompt"),
    ("completions-streamed", "completions", "run.0.0", {"model": "m", "prompt": "hi", "stream": True}, 400, "stream"),
]

_PATHS = {"messages": "/v1/messages", "responses": "/responses", "chat": "/chat/completions",
          "completions": "/completions"}
_SDK_ERRORS = {("messages", 404): anthropic.NotFoundError, ("messages", 400): anthropic.BadRequestError,
               (None, 404): openai.NotFoundError, (None, 400): openai.BadRequestError}


@pytest.mark.parametrize(("api", "rid", "body", "status", "fragment"), [c[1:] for c in BAD_INPUT],
                         ids=[c[0] for c in BAD_INPUT])
async def test_bad_input_is_one_clear_error_and_nothing_recorded(
        api: str, rid: str, body: dict[str, Any] | bytes, status: int, fragment: str,
        mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", "--tokens", script=[FIVE])
    async with _proxy(mock.base_url) as (proxy, [r]):
        base = proxy.url_for(rid)
        sdk: Any = anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="x", max_retries=0) \
            if api == "messages" else openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
        raw = {"content": body} if isinstance(body, bytes) else {"body": body}
        expected = _SDK_ERRORS[("messages" if api == "messages" else None, status)]
        with pytest.raises(expected) as e:
            await sdk.post(_PATHS[api], cast_to=object, options={"headers": {"Content-Type": "application/json"}},
                           **raw)
        assert e.value.status_code == status
        got = e.value.response.json()
        if api == "messages":  # Anthropic's error shape
            kind = {400: "invalid_request_error", 404: "not_found_error"}[status]
            assert got["type"] == "error" and got["error"]["type"] == kind, got
            message = got["error"]["message"]
        else:  # OpenAI's
            assert set(got) == {"error"} and got["error"]["type"] in ("invalid_request_error", "not_found_error"), got
            message = got["error"]["message"]
        assert fragment.lower() in message.lower(), message
        assert "\n" not in message and "Traceback" not in message
    assert r.calls == [] and r.trace.calls == 0
    assert mock.bodies() == []  # nothing reached the upstream


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_anthropic_api_upstream_answers_a_chat_harness(stream: bool, tmp_path: Any) -> None:
    """A run's model registered with the Anthropic API: the harness's chat call goes upstream as one Messages
    request (validated by a mock of the Messages API) and comes back as chat, streamed from the whole answer
    when the harness streams; the call is in the rollout's trace."""
    server = MockServer(["--script", json.dumps(["Hello from Claude."]), "--models", "claude-mock"],
                        tmp_path / "anthropic.log", module="workbench.testing.mock_anthropic")
    client = ChatClient(None, provider="anthropic")
    proxy = await InterceptionProxy(client, server.base_url, "claude-mock", {"temperature": 0.5}).start()
    try:
        r = Rollout(id="run.0.0", task=wb.Task(prompt="hi"), sample_index=0, client=client,
                    base_url=proxy.url_for("run.0.0"), model="claude-mock", params={})
        proxy.register(r)
        ask = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
        if stream:
            chunks = await _openai(r).chat.completions.create(model="m", messages=ask, stream=True)  # type: ignore[arg-type, call-overload]
            text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        else:
            reply = await _openai(r).chat.completions.create(model="m", messages=ask)  # type: ignore[arg-type]
            text = reply.choices[0].message.content or ""
        assert text == "Hello from Claude."
        [body] = server.bodies()
        assert body["model"] == "claude-mock" and body["system"] == "be brief" and body["temperature"] == 0.5
        assert "stream" not in body
        assert [c.message["content"] for c in r.calls] == ["Hello from Claude."]
    finally:
        await proxy.close()
        await client.close()
        server.stop()
