"""The model client speaking the Anthropic Messages API (``ChatClient(provider="anthropic")``): chat requests
translated to Messages requests, Messages answers parsed back, Anthropic's errors mapped to the client's kinds,
and end to end against a real mock server process (workbench/testing/mock_anthropic.py) that validates the
requests the way the API does."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from tests.helpers import REPO, _readline, query
from workbench.records.model_reply import ModelError
from workbench.rollouts.anthropic_client import (
    classify_anthropic_status,
    from_messages_response,
    to_messages_request,
)
from workbench.rollouts.client import ChatClient

PNG = "iVBORw0KGgo="
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
                                         "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}

# -- translation -------------------------------------------------------------------------------------------

REQUESTS: list[tuple[str, list[dict[str, Any]], dict[str, Any], dict[str, Any]]] = [
    ("plain user", [{"role": "user", "content": "hi"}], {},
     {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1024}),
    ("systems joined", [{"role": "system", "content": "A"}, {"role": "user", "content": "hi"},
                        {"role": "system", "content": [{"type": "text", "text": "B"}]}], {},
     {"system": "A\n\nB", "messages": [{"role": "user", "content": "hi"}]}),
    ("multi-turn", [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"},
                    {"role": "user", "content": "3"}], {"max_tokens": 5},
     {"max_tokens": 5, "messages": [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"},
                                    {"role": "user", "content": "3"}]}),
    ("consecutive users merged", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], {},
     {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
    ("tool calls and merged results",
     [{"role": "user", "content": "go"},
      {"role": "assistant", "content": "calling", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "5"},
      {"role": "tool", "tool_call_id": "call_2", "content": "5"},
      {"role": "user", "content": "and?"}], {},
     {"messages": [
         {"role": "user", "content": "go"},
         {"role": "assistant", "content": [
             {"type": "text", "text": "calling"},
             {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2, "b": 3}},
             {"type": "tool_use", "id": "call_2", "name": "add", "input": {"a": 2, "b": 3}}]},
         {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "call_1", "content": "5"},
             {"type": "tool_result", "tool_use_id": "call_2", "content": "5"},
             {"type": "text", "text": "and?"}]}]}),
    ("tool call without text", [{"role": "user", "content": "go"},
                                {"role": "assistant", "content": None, "tool_calls": [CALL]}], {},
     {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": [
         {"type": "tool_use", "id": "call_1", "name": "add", "input": {"a": 2, "b": 3}}]}]}),
    ("image", [{"role": "user", "content": [{"type": "text", "text": "see"},
                                            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}],
     {}, {"messages": [{"role": "user", "content": [
         {"type": "text", "text": "see"},
         {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}),
    ("stop string", [{"role": "user", "content": "x"}], {"stop": "END", "temperature": 0.2, "top_p": 0.9},
     {"stop_sequences": ["END"], "temperature": 0.2, "top_p": 0.9}),
    ("stop list, OpenAI-only keys dropped", [{"role": "user", "content": "x"}],
     {"stop": ["a", "b"], "logprobs": True, "return_token_ids": True, "seed": 3, "n": 1},
     {"stop_sequences": ["a", "b"], "max_tokens": 1024}),
]


@pytest.mark.parametrize(("name", "messages", "params", "expect"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_chat_requests_become_messages_requests(name: str, messages: list[dict[str, Any]], params: dict[str, Any],
                                                expect: dict[str, Any]) -> None:
    body = to_messages_request("claude-x", messages, None, params)
    assert body["model"] == "claude-x"
    for key, value in expect.items():
        assert body[key] == value, key
    assert not {"logprobs", "return_token_ids", "seed", "n", "stop"} & body.keys()
    assert ("system" in body) == ("system" in expect)


@pytest.mark.parametrize(("choice", "expect"), [
    ("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"}),
    ({"type": "function", "function": {"name": "add"}}, {"type": "tool", "name": "add"}),
])
def test_tools_and_tool_choice(choice: Any, expect: dict[str, Any]) -> None:
    body = to_messages_request("m", [{"role": "user", "content": "x"}], [TOOL], {"tool_choice": choice})
    assert body["tools"] == [{"name": "add", "description": "Add two integers.",
                              "input_schema": TOOL["function"]["parameters"]}]
    assert body["tool_choice"] == expect


@pytest.mark.parametrize(("messages", "params", "fragment"), [
    ([{"role": "user", "content": "x"}], {"n": 4}, "Anthropic has no n"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{not json"}}]}], {}, "not JSON"),
    ([{"role": "user", "content": [{"type": "input_audio"}]}], {}, "'input_audio' part"),
])
def test_requests_it_cannot_send_are_one_clear_bad_request(messages: list[Any], params: dict[str, Any],
                                                           fragment: str) -> None:
    with pytest.raises(ModelError) as e:
        to_messages_request("m", messages, None, params)
    assert e.value.kind == "bad_request" and fragment in e.value.message


# -- responses ---------------------------------------------------------------------------------------------


def message(content: list[dict[str, Any]], stop_reason: str = "end_turn", **usage: int) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": content,
            "stop_reason": stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 4, **usage}}


def test_a_text_answer_and_its_usage() -> None:
    r = from_messages_response(json.dumps(message([{"type": "thinking", "thinking": "hmm", "signature": "s"},
                                                   {"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
                                                  )).encode())
    assert r.message == {"role": "assistant", "content": "Hello there"}
    assert (r.finish_reason, r.prompt_tokens, r.completion_tokens) == ("stop", 10, 4)
    assert r.extra == {"api": "anthropic", "thinking": "hmm"}


def test_tool_use_blocks_become_tool_calls() -> None:
    r = from_messages_response(message([{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}],
                                       "tool_use"))
    assert r.message["content"] is None
    assert r.message["tool_calls"] == [{"id": "toolu_1", "type": "function",
                                        "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}]
    assert r.finish_reason == "tool_calls"


@pytest.mark.parametrize(("reason", "finish"), [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"),
                                                ("tool_use", "tool_calls"), ("refusal", "content_filter"),
                                                ("pause_turn", "stop")])
def test_each_stop_reason(reason: str, finish: str) -> None:
    assert from_messages_response(message([{"type": "text", "text": "x"}], reason)).finish_reason == finish


def test_cache_tokens_count_as_prompt_tokens_and_are_kept_apart() -> None:
    r = from_messages_response(message([{"type": "text", "text": "x"}], cache_read_input_tokens=100,
                                       cache_creation_input_tokens=7))
    assert r.prompt_tokens == 117
    assert r.extra == {"api": "anthropic", "cache_read_tokens": 100, "cache_write_tokens": 7}


@pytest.mark.parametrize("body", [b"not json", b'{"choices": []}', b'{"type": "message"}', b"[1]"])
def test_a_body_that_is_not_a_messages_response_is_bad_response(body: bytes) -> None:
    with pytest.raises(ModelError) as e:
        from_messages_response(body)
    assert e.value.kind == "bad_response"


# -- errors ------------------------------------------------------------------------------------------------

ERRORS = [
    (401, "authentication_error", "invalid x-api-key", "auth"),
    (403, "permission_error", "no access", "auth"),
    (404, "not_found_error", "model: claude-nope", "unknown_model"),
    (404, "not_found_error", "no such route", "bad_request"),
    (429, "rate_limit_error", "slow down", "rate_limit"),
    (529, "overloaded_error", "Overloaded", "server"),
    (500, "api_error", "internal", "server"),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context_length"),
    (400, "invalid_request_error", "max_tokens: Field required", "bad_request"),
    (413, "request_too_large", "Request exceeds the maximum size", "bad_request"),
]


@pytest.mark.parametrize(("status", "kind", "text", "expect"), ERRORS, ids=[f"{e[0]}-{e[1]}-{e[3]}" for e in ERRORS])
def test_anthropic_errors_map_to_the_clients_kinds(status: int, kind: str, text: str, expect: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": text}}).encode()
    err = classify_anthropic_status(status, body, "claude-nope")
    assert err.kind == expect and err.status == status
    assert text in err.message  # the server's own words


def test_an_error_body_that_is_not_anthropics_still_maps_by_status() -> None:
    err = classify_anthropic_status(502, b"<html>bad gateway</html>", "m")
    assert err.kind == "server" and "bad gateway" in err.message


# -- end to end, against the mock server process -------------------------------------------------------------


class AnthropicMock:
    def __init__(self, tmp: Path, *args: str) -> None:
        self.log = open(tmp / "mock-anthropic.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "workbench.testing.mock_anthropic", "--port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL, cwd=REPO)
        line = _readline(self.proc.stdout, 60)
        assert line.startswith("READY"), (line, (tmp / "mock-anthropic.log").read_text())
        self.root = f"http://127.0.0.1:{int(line.split()[1])}"
        self.base_url = self.root + "/v1"

    def bodies(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.root + "/requests", timeout=30) as resp:
            return list(json.loads(resp.read())["requests"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.log.close()


@pytest.fixture
def anthropic_mock(tmp_path: Path) -> Iterator[Any]:
    started: list[AnthropicMock] = []

    def start(*args: str, script: list[Any] | None = None) -> AnthropicMock:
        started.append(AnthropicMock(tmp_path, *args, *(["--script", json.dumps(script)] if script else [])))
        return started[-1]

    yield start
    for m in started:
        m.stop()


async def test_a_plain_answer_end_to_end(anthropic_mock: Any) -> None:
    mock = anthropic_mock("--require-key", "sk-ant-test", "--cache-read", "40", script=["Paris."])
    async with ChatClient("sk-ant-test", provider="anthropic") as client:
        assert "Authorization" not in client.headers
        r = await client.chat(base_url=mock.base_url, model="claude-mock",
                              messages=[{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Capital of France?"}],
                              params={"temperature": 0, "logprobs": True})
    assert r.message == {"role": "assistant", "content": "Paris."} and r.finish_reason == "stop"
    assert r.extra == {"api": "anthropic", "cache_read_tokens": 40}
    assert r.prompt_tokens == 40 + 5 and r.completion_tokens == 1
    [body] = mock.bodies()
    assert body == {"model": "claude-mock", "max_tokens": 1024, "system": "Be brief.", "temperature": 0,
                    "messages": [{"role": "user", "content": "Capital of France?"}]}


async def test_a_tool_loop_end_to_end_with_the_mock_validating_each_request(anthropic_mock: Any) -> None:
    mock = anthropic_mock(script=[{"tool_use": {"name": "add", "input": {"a": 2, "b": 3}}, "text": "Let me add."},
                                  "The answer is 5."])
    messages: list[Any] = [{"role": "user", "content": "What is 2+3?"}]
    async with ChatClient("k", provider="anthropic") as client:
        first = await client.chat(base_url=mock.base_url, model="claude-mock", messages=messages, tools=[TOOL],
                                  params={"tool_choice": "auto"})
        assert first.finish_reason == "tool_calls" and first.message["content"] == "Let me add."
        [call] = first.message["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
        messages += [first.message, {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
        final = await client.chat(base_url=mock.base_url, model="claude-mock", messages=messages, tools=[TOOL])
    assert final.message["content"] == "The answer is 5." and final.finish_reason == "stop"
    second = mock.bodies()[1]
    assert second["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call["id"], "content": "5"}]}


async def test_errors_end_to_end(anthropic_mock: Any) -> None:
    mock = anthropic_mock("--require-key", "right", script=[{"status": 429}, "ok"])
    async with ChatClient("wrong", provider="anthropic", max_retries=0) as client:
        with pytest.raises(ModelError) as e:
            await client.chat(base_url=mock.base_url, model="claude-mock", messages=[{"role": "user", "content": "x"}])
    assert e.value.kind == "auth" and "invalid x-api-key" in e.value.message
    async with ChatClient("right", provider="anthropic", backoff_base=0.01) as client:
        r = await client.chat(base_url=mock.base_url, model="claude-mock", messages=[{"role": "user", "content": "x"}])
        assert r.message["content"] == "ok" and client.retries == 1  # the 429 (retry-after: 0) was retried
        with pytest.raises(ModelError) as e:  # the mock validates what a broken conversation would send
            await client.chat(base_url=mock.base_url, model="claude-mock",
                              messages=[{"role": "assistant", "content": "I start"}])
        assert e.value.kind == "bad_request" and "first message" in e.value.message
        with pytest.raises(ModelError) as e:
            await client.chat(base_url=mock.base_url, model="claude-nope", messages=[{"role": "user", "content": "x"}])
        assert e.value.kind == "unknown_model"
        with pytest.raises(ModelError) as e:
            await client.chat(base_url=mock.base_url, model="claude-mock", messages=[], prompt_ids=[1, 2])
        assert e.value.kind == "bad_request" and "prompt_ids" in e.value.message


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_a_tool_loop_environment_runs_on_the_engine_with_an_anthropic_client(anthropic_mock: Any,
                                                                                   tmp_path: Path) -> None:
    from workbench.rollouts.engine import RolloutEngine
    from workbench.store import Store

    mock = anthropic_mock(script=[{"tool_use": {"name": "add", "input": {"a": 2, "b": 3}}}, "5"])
    rubric = wb.Rubric()

    @rubric.reward
    def correct(completion: str, answer: str) -> float:
        return float(completion.strip() == answer)

    env = wb.Environment(name="calc", tasks=wb.TaskSet.from_records([{"prompt": "What is 2+3?", "answer": "5"}]),
                         harness=wb.ToolLoop(tools=[add]), rubric=rubric)
    store = Store(tmp_path / "db.sqlite")
    store.create_run("a", env_name="calc")
    writer = store.writer()
    async with ChatClient("k", provider="anthropic") as client:
        engine = RolloutEngine(env=env, client=client, writer=writer, run_id="a", model="claude-mock",
                               base_url=mock.base_url, concurrency=1, timeout_s=60)
        try:
            await engine.run(list(env.tasks))
        finally:
            writer.close()
    rows = query(tmp_path / "db.sqlite", "SELECT status, error_kind, reward FROM rollout")
    store.close()
    assert rows == [("ok", None, 1.0)]
    first, second = mock.bodies()
    assert first["tools"][0]["name"] == "add" and first["tools"][0]["input_schema"]["type"] == "object"
    tool_use = second["messages"][1]["content"][-1]
    assert tool_use["type"] == "tool_use" and tool_use["input"] == {"a": 2, "b": 3}
    assert second["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": tool_use["id"], "content": "5"}
