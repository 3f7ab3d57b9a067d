"""The interception proxy against a hostile or sloppy program: a rollout cannot reach another rollout's
trace, malformed bodies in any of its three APIs are 400s in that API's own error shape (never a 500),
an upstream that ignores ``stream`` is read as the answer it is, and the API surface agents call
(``responses.retrieve``, ``messages.count_tokens``, every Responses item type) is served.

Real HTTP on 127.0.0.1: the proxy in this test's event loop, the mock upstream as a subprocess, the
official ``openai`` and ``anthropic`` SDKs as clients, and ``workbench eval`` as a subprocess running a
``wb.Program`` in its sandbox.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

import workbench as wb
from tests.helpers import CliResult, MockServer, last_json
from workbench.records.rollout import Rollout
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy import InterceptionProxy

# slow: fifty cases through the proxy against the mock upstream process (SDK clients, a CLI eval)
pytestmark = pytest.mark.slow

PARAMS = {"logprobs": True, "return_token_ids": True}
IDS = ("run.0.0", "run.1.0")
USER = {"role": "user", "content": "hello there"}


@contextlib.asynccontextmanager
async def _proxy(upstream: str) -> AsyncIterator[tuple[InterceptionProxy, dict[str, Rollout], dict[str, Any]]]:
    """The proxy in front of ``upstream`` with two running rollouts; (proxy, rollouts, unregister by id)."""
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, upstream, "mock-model", dict(PARAMS)).start()
    rollouts, unregister = {}, {}
    for rid in IDS:
        r = Rollout(id=rid, task=wb.Task(prompt="hi"), sample_index=0, client=client, base_url=proxy.url_for(rid),
                    model="mock-model", params=dict(PARAMS))
        unregister[rid] = proxy.register(r)
        rollouts[rid] = r
    try:
        yield proxy, rollouts, unregister
    finally:
        await proxy.close()
        await client.close()


def _state(proxy: InterceptionProxy) -> dict[str, Any]:
    """What the proxy holds: the keys of each of its dicts and the size of each rollout's own state."""
    out: dict[str, Any] = {}
    for name, value in vars(proxy).items():
        if isinstance(value, dict):
            out[name] = sorted(value)
    for rid, live in getattr(proxy, "rollouts", {}).items():
        if not isinstance(live, Rollout):
            out[f"{rid}.responses"] = len(live.responses._items)
            out[f"{rid}.tool_arguments"] = len(live.tool_arguments)
    return out


async def _call(api: str, base_url: str) -> tuple[int, Any]:
    """One call in ``api`` with the official SDK; (HTTP status, the error body or None)."""
    try:
        if api == "messages":
            c = anthropic.AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key="x", max_retries=0)
            await c.messages.create(model="claude", max_tokens=8, messages=[USER])
        elif api == "responses":
            o = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
            await o.responses.create(model="gpt", input="hello there")
        else:
            o = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
            await o.chat.completions.create(model="gpt", messages=[USER])  # type: ignore[list-item]
    except (openai.APIStatusError, anthropic.APIStatusError) as e:
        return e.status_code, e.response.json()
    return 200, None


def _foreign_urls(proxy: InterceptionProxy) -> dict[str, str]:
    """URLs a program of rollout 0 could make up to reach rollout 1, or itself without its secret."""
    own = proxy.url_for("run.0.0")
    root, key = own.split("/r/")[0], own.split("/r/")[1].split("/")[0]
    secret = key.rpartition("~")[2]
    return {"other-bare": f"{root}/r/run.1.0/v1", "other-with-own-secret": f"{root}/r/run.1.0~{secret}/v1",
            "other-wrong-secret": f"{root}/r/run.1.0~{'0' * 32}/v1", "own-bare": f"{root}/r/run.0.0/v1",
            "unknown": f"{root}/r/run.7.0~{secret}/v1"}


# -- a rollout reaches only its own trace -----------------------------------------------------------
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("case", ["other-bare", "other-with-own-secret", "other-wrong-secret", "own-bare", "unknown",
                                  "finished"])
async def test_a_rollout_cannot_call_through_another_rollouts_url(
        api: str, case: str, mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("echo", "--tokens")
    async with _proxy(mock.base_url) as (proxy, rollouts, unregister):
        if case == "finished":  # rollout 1's own URL, after it ended
            url = proxy.url_for("run.1.0")
            unregister["run.1.0"]()
        else:
            url = _foreign_urls(proxy)[case]
        before = _state(proxy)
        status, body = await _call(api, url)
        assert status == 404, (case, body)
        if api == "messages":
            assert body["type"] == "error" and body["error"]["type"] == "not_found_error", body
        else:
            assert set(body) == {"error"} and body["error"]["type"] == "not_found_error", body
        assert _state(proxy) == before, "a refused request allocates nothing"
        # the rollouts' own URLs still work, and each trace holds only its own call
        for rid in IDS if case != "finished" else IDS[:1]:
            assert (await _call(api, rollouts[rid].base_url))[0] == 200
    assert [len(r.calls) for r in rollouts.values()] == ([1, 1] if case != "finished" else [1, 0])
    assert mock.requests() == (2 if case != "finished" else 1)


HOSTILE_AGENT = '''
import os, sys
import anthropic, openai
base = os.environ["OPENAI_BASE_URL"]
root, key = base.split("/r/")[0], base.split("/r/")[1].split("/")[0]
rid, _, secret = key.rpartition("~") if "~" in key else (key, "", "")
run, task, sample = rid.rsplit(".", 2)
other = f"{run}.{1 - int(task)}.{sample}"
target = {"other-bare": f"{root}/r/{other}/v1", "other-with-own-secret": f"{root}/r/{other}~{secret}/v1",
          "own-bare": f"{root}/r/{rid}/v1"}[sys.argv[1]]
try:
    if sys.argv[2] == "messages":
        anthropic.Anthropic(base_url=target.removesuffix("/v1"), max_retries=0).messages.create(
            model="c", max_tokens=8, messages=[{"role": "user", "content": "injected"}])
    else:
        openai.OpenAI(base_url=target, max_retries=0).chat.completions.create(
            model="x", messages=[{"role": "user", "content": "injected"}])
    print("served", file=sys.stderr)
except (openai.APIStatusError, anthropic.APIStatusError) as e:
    print(f"refused {e.status_code}", file=sys.stderr)
r = openai.OpenAI(max_retries=0).chat.completions.create(model="x", messages=[{"role": "user", "content": "own"}])
print(r.choices[0].message.content)
'''


@pytest.mark.parametrize("case", ["other-bare-chat", "other-bare-messages", "other-with-own-secret-chat",
                                  "own-bare-chat"])
def test_a_program_in_its_sandbox_reaches_only_its_own_rollout(
        case: str, tmp_path: Path, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult],
        store_path: Path, write_env: Callable[..., Path]) -> None:
    target, _, api = case.rpartition("-")
    folder = tmp_path / "agents"
    folder.mkdir(mode=0o755)
    agent = folder / "agent.py"
    agent.write_text(HOSTILE_AGENT)
    env = write_env(f'''
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def said_own(completion: str) -> float:
                return float(completion == "own")
            return wb.Environment(name="hostile", tasks=wb.TaskSet.from_records([{{"prompt": "a"}}, {{"prompt": "b"}}]),
                                  harness=wb.Program([{sys.executable!r}, {str(agent)!r}, {target!r}, {api!r}]),
                                  rubric=rubric)
        ''')
    mock = mock_server("echo", "--tokens")
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["rewards"]["said_own"] == 1.0
    db = sqlite3.connect(store_path)
    rows = db.execute("SELECT r.pk, r.state, COUNT(c.id) FROM rollout r LEFT JOIN model_call c "
                      "ON c.rollout_pk = r.pk GROUP BY r.pk").fetchall()
    assert len(rows) == 2
    for _, state, calls in rows:
        assert calls == 1, "each rollout's trace holds its own call only"
        assert "refused 404" in json.loads(state)["stderr"]
    assert not any("injected" in json.dumps(b) for b in mock.bodies())


# -- malformed bodies: 400s in the API's own shape, never 500 ----------------------------------------
_PATHS = {"chat": "/chat/completions", "responses": "/responses", "messages": "/messages"}
MSG = [{"role": "user", "content": "hi"}]
MALFORMED = [
    ("responses-text-format-number", "responses", {"model": "m", "input": "hi", "text": {"format": 5}}, "text.format"),
    ("responses-text-number", "responses", {"model": "m", "input": "hi", "text": 5}, "text"),
    ("responses-content-part-number", "responses",
     {"model": "m", "input": [{"type": "message", "role": "user", "content": [5]}]}, "input[0].content[0]"),
    ("responses-tools-object", "responses", {"model": "m", "input": "hi", "tools": {"a": 1}}, "tools"),
    ("responses-input-object", "responses", {"model": "m", "input": {"a": 1}}, "input"),
    ("messages-image-source-number", "messages",
     {"model": "c", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": 5}]}]},
     "source"),
    ("messages-tool-result-content-number", "messages",
     {"model": "c", "max_tokens": 8, "messages": [{"role": "user", "content": [
         {"type": "tool_result", "tool_use_id": "t", "content": 5}]}]}, "malformed request"),
    ("messages-system-number", "messages", {"model": "c", "max_tokens": 8, "system": 5, "messages": MSG}, "system"),
    ("messages-tool-choice-string", "messages",
     {"model": "c", "max_tokens": 8, "messages": MSG, "tools": [{"name": "t", "input_schema": {}}],
      "tool_choice": "auto"}, "tool_choice"),
    ("chat-message-number", "chat", {"model": "m", "messages": [5]}, "messages[0]"),
    ("chat-tool-calls-string", "chat",
     {"model": "m", "messages": [{"role": "assistant", "tool_calls": "x"}]}, "tool_calls"),
]


@pytest.mark.parametrize(("api", "body", "fragment"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
async def test_a_malformed_body_is_a_400_in_the_apis_own_shape(
        api: str, body: dict[str, Any], fragment: str, mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("echo", "--tokens")
    async with _proxy(mock.base_url) as (proxy, rollouts, _):
        base = rollouts["run.0.0"].base_url
        sdk: Any = anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="x", max_retries=0) \
            if api == "messages" else openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0)
        bad = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
        with pytest.raises(bad) as e:
            await sdk.post("/v1/messages" if api == "messages" else _PATHS[api], cast_to=object, body=body)
        got = e.value.response.json()
        _assert_shape(api, got)
        message = got["error"]["message"]
        assert fragment in message and "\n" not in message, message
    assert all(r.calls == [] for r in rollouts.values())
    assert mock.bodies() == []


def _assert_shape(api: str, got: Any) -> None:
    if api == "messages":
        assert set(got) == {"type", "error"} and got["type"] == "error", got
        assert isinstance(got["error"]["type"], str) and isinstance(got["error"]["message"], str), got
    else:
        assert set(got) == {"error"}, got
        assert isinstance(got["error"]["type"], str) and isinstance(got["error"]["message"], str), got


# -- fuzz: random bodies through the three APIs ------------------------------------------------------
SEEDS = {
    "chat": {"model": "m", "messages": [{"role": "system", "content": "terse"}, USER,
                                        {"role": "assistant", "content": None, "tool_calls": [
                                            {"id": "c1", "type": "function",
                                             "function": {"name": "f", "arguments": "{}"}}]},
                                        {"role": "tool", "tool_call_id": "c1", "content": "ok"}],
             "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
             "stream_options": {"include_usage": True}, "n": 1},
    "responses": {"model": "m", "instructions": "terse", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"},
                                                        {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}, {"type": "reasoning", "summary": []}],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": "auto",
        "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}}},
    "messages": {"model": "c", "max_tokens": 8, "system": [{"type": "text", "text": "terse"}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": "AA"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "text", "text": "ok"}]}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"},
        "stop_sequences": ["x"]},
}
FUZZ_PER_API = 120


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["null", "bool", "int", "float", "str", "list", "dict"] if depth < 4 else ["null", "int", "str"]
    kind = rng.choice(kinds)
    if kind == "null":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.choice([0, -1, 1, 2**63, -(2**40), 7])
    if kind == "float":
        return rng.choice([0.5, -1e308, 1e-9, 3.0])
    if kind == "str":
        return rng.choice(["", "x", "text", "function", "user", "assistant", "image", "tool_use", "message",
                           "json_schema", "\u0000", "é" * 3])
    if kind == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["type", "role", "content", "text", "source", "name", "format", "input", "tools", "x"]):
            _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _mutate(seed: dict[str, Any], rng: random.Random) -> Any:
    """The seed body with one to three random subtrees replaced by random JSON (or, rarely, any JSON)."""
    if rng.random() < 0.05:
        return _random_json(rng)
    body = json.loads(json.dumps(seed))
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(body) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = body
        for k in path[:-1]:
            parent = parent[k]
        if rng.random() < 0.15 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = _random_json(rng)
    if rng.random() < 0.3:
        body["stream"] = True
    return body


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_fuzzed_bodies_are_answered_or_refused_in_the_apis_shape_never_500(
        api: str, mock_server: Callable[..., MockServer]) -> None:
    rng = random.Random(f"proxy-fuzz-{api}")
    mock = mock_server("instant")
    bad: list[tuple[int, Any]] = []
    statuses: dict[int, int] = {}
    async with _proxy(mock.base_url) as (proxy, rollouts, _), aiohttp.ClientSession() as s:
        url = rollouts["run.0.0"].base_url + _PATHS[api]
        for _ in range(FUZZ_PER_API):
            body = _mutate(SEEDS[api], rng)
            async with s.post(url, data=json.dumps(body)) as resp:
                raw = await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                if resp.status >= 500:
                    bad.append((resp.status, body))
                elif resp.status >= 400:
                    _assert_shape(api, json.loads(raw))
    assert bad == [], bad[:3]
    assert statuses.get(400, 0) > 0 and statuses.get(200, 0) > 0, statuses


# -- an upstream that answers a streamed request with one JSON body ----------------------------------
WHOLE = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "mock-model",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": "the whole answer"},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}


async def _streamed_text(api: str, base_url: str) -> str:
    if api == "messages":
        c = anthropic.AsyncAnthropic(base_url=base_url.removesuffix("/v1"), api_key="x", max_retries=0)
        async with c.messages.stream(model="c", max_tokens=8, messages=[USER]) as s:
            return "".join([t async for t in s.text_stream])
    o = openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    if api == "responses":
        events = await o.responses.create(model="gpt", input="hello there", stream=True)
        return "".join([e.delta async for e in events if e.type == "response.output_text.delta"])
    chunks = await o.chat.completions.create(model="gpt", messages=[USER], stream=True)  # type: ignore[list-item]
    return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_json_answer_to_a_streamed_request_is_the_answer(
        api: str, mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", script=[{"raw": json.dumps(WHOLE)}])
    async with _proxy(mock.base_url) as (_, rollouts, _unregister):
        r = rollouts["run.0.0"]
        assert await _streamed_text(api, r.base_url) == "the whole answer"
    [call] = r.calls
    assert call.message["content"] == "the whole answer" and call.finish_reason == "stop"
    assert r.usage.prompt_tokens == 3 and r.usage.completion_tokens == 3


@pytest.mark.parametrize(("raw", "fragment"), [("not json at all", "neither a stream nor JSON"),
                                               ('{"choices": 5}', "no chat completion")])
async def test_a_streamed_request_answered_with_neither_fails_with_that_reason(
        raw: str, fragment: str, mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("script", script=[{"raw": raw}])
    async with _proxy(mock.base_url) as (_, rollouts, _unregister):
        r = rollouts["run.0.0"]
        with pytest.raises(openai.APIStatusError) as e:
            await _streamed_text("chat", r.base_url)
        assert e.value.status_code == 502 and fragment in e.value.response.json()["error"]["message"]
    assert r.calls == []


# -- the API surface agents call ----------------------------------------------------------------------
async def test_a_response_is_retrieved_by_its_id_within_its_rollout(mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("echo", "--tokens")
    async with _proxy(mock.base_url) as (_, rollouts, _unregister):
        own = openai.AsyncOpenAI(base_url=rollouts["run.0.0"].base_url, api_key="x", max_retries=0)
        other = openai.AsyncOpenAI(base_url=rollouts["run.1.0"].base_url, api_key="x", max_retries=0)
        whole = await own.responses.create(model="gpt", input="hello there")
        events = await own.responses.create(model="gpt", input="streamed", stream=True)
        streamed = [e.response async for e in events if e.type == "response.completed"][0]
        for made in (whole, streamed):
            got = await own.responses.retrieve(made.id)
            assert got.id == made.id and got.output_text == made.output_text and got.status == "completed"
            with pytest.raises(openai.NotFoundError):  # another rollout's responses are not its own
                await other.responses.retrieve(made.id)
        with pytest.raises(openai.NotFoundError) as e:
            await own.responses.retrieve("resp_nosuch")
        assert "resp_nosuch" in e.value.response.json()["error"]["message"]


ITEM_TYPES = [
    {"type": "additional_tools", "tools": [{"type": "function", "name": "f", "parameters": {}}]},
    {"type": "item_reference", "id": "msg_1"},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    {"type": "mcp_list_tools", "id": "mcp_1", "server_label": "s", "tools": []},
    {"type": "compaction", "id": "cmp_1", "encrypted_content": "x"},
]


@pytest.mark.parametrize("item", ITEM_TYPES, ids=[i["type"] for i in ITEM_TYPES])
async def test_every_responses_item_type_is_accepted(item: dict[str, Any],
                                                     mock_server: Callable[..., MockServer]) -> None:
    """Codex sends items without a chat equivalent (``additional_tools`` first of all): left out."""
    mock = mock_server("echo", "--tokens")
    async with _proxy(mock.base_url) as (_, rollouts, _unregister):
        o = openai.AsyncOpenAI(base_url=rollouts["run.0.0"].base_url, api_key="x", max_retries=0)
        got = await o.responses.create(model="gpt", input=[item, {"type": "message", "role": "user",  # type: ignore
                                                                  "content": "hello there"}])
        assert got.output_text == "hello there"
    assert mock.bodies()[0]["messages"] == [USER]


# -- a harness that hangs up mid-stream ---------------------------------------------------------------
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_a_client_cutting_a_stream_prints_nothing(api: str, mock_server: Callable[..., MockServer],
                                                        capfd: pytest.CaptureFixture[str],
                                                        caplog: pytest.LogCaptureFixture) -> None:
    long = " ".join(f"w{i}" for i in range(20000))
    mock = mock_server("script", script=[long, "short"])
    bodies = {"chat": {"messages": [USER], "stream": True}, "responses": {"input": "hi", "stream": True},
              "messages": {"max_tokens": 8, "messages": [USER], "stream": True}}
    async with _proxy(mock.base_url) as (_, rollouts, _unregister):
        r = rollouts["run.0.0"]
        async with aiohttp.ClientSession() as s:
            resp = await s.post(r.base_url + _PATHS[api], json=bodies[api])
            assert resp.status == 200
            await resp.content.readline()  # the stream has begun: hang up
            resp.close()
        assert await _streamed_text(api, r.base_url) == "short"  # the rollout goes on
    out, err = capfd.readouterr()
    assert not [ln for ln in (out + err).splitlines() if "Traceback" in ln or "Error handling request" in ln]
    assert [rec for rec in caplog.records if rec.levelno >= 30 and rec.name.startswith(("aiohttp", "workbench"))] == []
    assert [c.message["content"] for c in r.calls] == ["short"]
