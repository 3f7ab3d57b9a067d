"""``workbench serve`` speaks the Responses API and the Anthropic Messages API besides chat completions:
the official ``openai`` and ``anthropic`` clients against a real server subprocess on the tiny model.
The same request answered in each API is the same sampled reply (greedy), streamed or not."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from .helpers import SERVED

ADD = {"name": "add", "description": "Add two integers.",
       "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                        "required": ["a", "b"]}}


@pytest.fixture()
def claude(server: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=60)


def _chat_text(client: Any, messages: list[dict[str, Any]], **kw: Any) -> str:
    r = client.chat.completions.create(model=SERVED, messages=messages, temperature=0, **kw)
    return r.choices[0].message.content or ""


def test_a_response_is_the_chat_reply_and_its_stream_adds_up(client: Any) -> None:
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+3?"}]
    want = _chat_text(client, messages, max_tokens=24)
    r = client.responses.create(model=SERVED, instructions="Answer briefly.", input="What is 2+3?",
                                temperature=0, max_output_tokens=24)
    assert r.object == "response" and r.model == SERVED and r.output_text == want
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    assert r.status == ("incomplete" if r.usage.output_tokens >= 24 else "completed")
    events = []
    with client.responses.stream(model=SERVED, instructions="Answer briefly.", input="What is 2+3?",
                                 temperature=0, max_output_tokens=24) as stream:
        for ev in stream:
            events.append(ev)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want == final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_previous_response_id_carries_the_conversation(client: Any) -> None:
    first = client.responses.create(model=SERVED, input="Say a number.", temperature=0, max_output_tokens=8)
    follow = client.responses.create(model=SERVED, previous_response_id=first.id, input="And another.",
                                     temperature=0, max_output_tokens=8)
    whole = [{"role": "user", "content": "Say a number."}, {"role": "assistant", "content": first.output_text},
             {"role": "user", "content": "And another."}]
    assert follow.output_text == _chat_text(client, whole, max_tokens=8)
    assert follow.previous_response_id == first.id
    with pytest.raises(openai.BadRequestError, match="resp_nope"):
        client.responses.create(model=SERVED, previous_response_id="resp_nope", input="x")


def test_a_message_is_the_chat_reply_and_its_stream_adds_up(client: Any, claude: anthropic.Anthropic) -> None:
    want = _chat_text(client, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}],
                      max_tokens=20)
    m = claude.messages.create(model=SERVED, max_tokens=20, system="Be brief.", extra_body={"temperature": 0},
                               messages=[{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}])
    assert m.type == "message" and m.role == "assistant" and m.model == SERVED
    assert "".join(b.text for b in m.content if b.type == "text") == want
    assert m.stop_reason in ("end_turn", "max_tokens") and m.usage.input_tokens > 0
    with claude.messages.stream(model=SERVED, max_tokens=20, system="Be brief.", extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Hi there"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == want and final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens


def test_a_message_with_tools_renders_them_and_tool_results(client: Any, claude: anthropic.Anthropic) -> None:
    """Tools, an assistant tool_use turn and its tool_result reach the chat template as chat would send them."""
    history = [{"role": "user", "content": "add 2 and 3"},
               {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "add",
                                                  "input": {"a": 2, "b": 3}}]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "5"}]}]
    m = claude.messages.create(model=SERVED, max_tokens=16, extra_body={"temperature": 0}, tools=[ADD], messages=history)
    chat = [{"role": "user", "content": "add 2 and 3"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "5"}]
    tools = [{"type": "function", "function": {"name": "add", "description": ADD["description"],
                                               "parameters": ADD["input_schema"]}}]
    r = client.chat.completions.create(model=SERVED, messages=chat, tools=tools, max_tokens=16, temperature=0)
    assert m.usage.input_tokens == r.usage.prompt_tokens
    assert m.stop_reason == {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}[
        r.choices[0].finish_reason]


@pytest.mark.parametrize("body, status, needle", [
    ({"messages": [{"role": "user", "content": "x"}]}, 400, "max_tokens"),
    ({"max_tokens": 5, "messages": []}, 400, "messages"),
    ({"max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "document"}]}]}, 400, "document"),
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]}, 400, "input_schema"),
    ({"max_tokens": 5, "model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}, 404,
     "no-such-model"),
])
def test_bad_messages_are_one_clear_anthropic_error(server: str, body: dict[str, Any], status: int, needle: str) -> None:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(server + "/v1/messages", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as got:
        urllib.request.urlopen(req, timeout=30)
    assert got.value.code == status
    err = json.loads(got.value.read())
    assert err["type"] == "error" and needle in err["error"]["message"], err
    assert err["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")


@pytest.mark.parametrize("body, needle", [
    ({"model": SERVED}, "input"),
    ({"model": SERVED, "input": 5}, "input"),
    ({"model": SERVED, "input": "x", "tools": [{"type": "namespace", "name": "ns"}]}, "namespace"),
    ({"model": SERVED, "input": [{"type": 7}]}, "input[0].type"),
    ({"model": SERVED, "input": [{"type": "computer_call_output"}]}, "nothing a chat model reads"),
    ({"model": SERVED, "input": "x", "text": {"format": {"type": "yaml"}}}, "text.format"),
])
def test_bad_responses_requests_are_one_clear_error(client: Any, body: dict[str, Any], needle: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.post("/responses", body=body, cast_to=dict)
    assert needle in str(e.value) and e.value.code == "invalid_value" and e.value.param, e.value.body
