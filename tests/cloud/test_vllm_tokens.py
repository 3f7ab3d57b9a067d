"""The token-in chat route for vLLM (``workbench_cloud.vllm_tokens``) and the continuation probe.

The translation is tested as pure functions, then end to end: the adapter gate serves the route on
top of the embedded server's ``/v1/completions`` (vLLM's public route, same wire format), and its
answers match the embedded server's own ``/v1/chat/completions/tokens`` token for token. vLLM
itself is not installed here: nothing in this file ran against vLLM.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.vllm_gate import AdapterGate, run_gate
from workbench_cloud.vllm_tokens import TokenRouteError, chat_response, completion_request

from tests.local_runtime.helpers import post_json
from workbench.rollouts.client import ChatClient, preflight
from workbench.rollouts.continuation import continuation_for, serves_token_route

TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]


# -- the translation -------------------------------------------------------------------------------------
def test_a_token_request_becomes_a_completion_with_the_same_sampling() -> None:
    body = {"model": "step-3", "messages": [{"role": "user", "content": "ignored"}], "tokens": [5, 6, 7],
            "temperature": 0.7, "top_p": 0.9, "seed": 1, "stop": ["\n"], "logprobs": True, "top_logprobs": 2,
            "return_token_ids": True, "max_completion_tokens": 32, "chat_template_kwargs": {"x": 1}}
    up, ctx = completion_request(body, max_model_len=100)
    assert up == {"model": "step-3", "temperature": 0.7, "top_p": 0.9, "seed": 1, "stop": ["\n"],
                  "return_token_ids": True, "prompt": [5, 6, 7], "stream": False, "max_tokens": 32, "logprobs": 2}
    assert ctx.want_logprobs and ctx.want_token_ids and not ctx.tools_active and ctx.prefix == ""
    # No limit given: what is left of the context (vLLM's completions would default to 16 tokens).
    assert completion_request({"tokens": [1] * 40}, max_model_len=100)[0]["max_tokens"] == 60
    assert "logprobs" not in completion_request({"tokens": [1]})[0]
    # A forced tool call: its prefix ids follow the prompt, and its text opens the reply.
    forced = {"tokens": [1, 2], "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "add"}}}
    up, ctx = completion_request(forced, prefix_ids=[90, 91])
    assert up["prompt"] == [1, 2, 90, 91] and ctx.prefix.startswith("<tool_call>") and ctx.tools_active


@pytest.mark.parametrize(("body", "message"), [
    ({"tokens": []}, "non-empty list"),
    ({"messages": []}, "non-empty list"),
    ({"tokens": [1, -2]}, "non-negative integer"),
    ({"tokens": [1, True]}, "non-negative integer"),
    ({"tokens": [1], "stream": True}, "stream: false"),
    ({"tokens": [1], "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "mul"}}}, "not in 'tools'"),
    ({"tokens": [1] * 10}, "leaves nothing of the context of 10"),
])
def test_bad_token_requests_are_refused_with_the_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(TokenRouteError, match=message) as err:
        completion_request(body, max_model_len=10)
    assert err.value.body()["error"]["code"] == 400


def test_a_completion_becomes_a_chat_reply_with_tool_calls_tokens_and_logprobs() -> None:
    _, ctx = completion_request({"model": "m", "tokens": [1], "tools": TOOLS, "logprobs": True, "top_logprobs": 1,
                                 "return_token_ids": True})
    completion = {"id": "cmpl-1", "object": "text_completion", "created": 7, "model": "m", "usage": {"total_tokens": 9},
                  "choices": [{"index": 0, "finish_reason": "stop", "stop_reason": None,
                               "text": 'ok <tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',
                               "token_ids": [11, 12], "prompt_token_ids": [1],
                               "logprobs": {"tokens": ["ok", " <"], "token_logprobs": [-0.1, -0.2],
                                            "top_logprobs": [{"ok": -0.1}, {" <": -0.2}], "text_offset": [0, 2]}}]}
    out = chat_response(completion, ctx, policy_version=3)
    assert out["object"] == "chat.completion" and out["model"] == "m" and out["policy_version"] == 3
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] == "ok"
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "add" and json.loads(call["arguments"]) == {"a": 1}
    assert choice["token_ids"] == [11, 12] and out["prompt_token_ids"] == [1]  # where vLLM's chat route puts them
    lp = choice["logprobs"]["content"]
    assert [t["token"] for t in lp] == ["ok", " <"] and lp[1]["logprob"] == -0.2
    assert lp[0]["top_logprobs"] == [{"token": "ok", "logprob": -0.1, "bytes": [111, 107]}]
    # Without tools the text stays text; a version the server states wins over the gate's.
    _, plain = completion_request({"tokens": [1]})
    again = chat_response({**completion, "policy_version": 5}, plain, policy_version=3)
    assert again["choices"][0]["message"]["content"].startswith("ok <tool_call>") and again["policy_version"] == 5
    assert "token_ids" not in again["choices"][0] and again["choices"][0]["logprobs"] is None


# -- end to end: the gate on top of the embedded server ------------------------------------------------------
@pytest.fixture(scope="module")
def embedded(tiny_dir: Path) -> Iterator[str]:
    pytest.importorskip("torch")
    from tests.local_runtime.helpers import SERVED, run_server

    with run_server(tiny_dir, "--served-model-name", SERVED, "--max-batch", "8") as root:
        yield root


@pytest.fixture(scope="module")
def gate(embedded: str) -> Iterator[str]:
    from tests.local_runtime.helpers import SERVED, free_port

    port = free_port()
    stop = run_gate(AdapterGate([embedded], base_model=SERVED), "127.0.0.1", port)
    yield f"http://127.0.0.1:{port}"
    stop()


def _post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return post_json(url, body, timeout=120)


@pytest.mark.slow
def test_the_gate_route_matches_the_embedded_servers_own(embedded: str, gate: str) -> None:
    from tests.local_runtime.helpers import ARITH, SERVED

    _, tok = _post(embedded + "/tokenize", {"model": SERVED, "messages": ARITH, "add_generation_prompt": True})
    body = {"model": SERVED, "messages": ARITH, "tokens": tok["tokens"], "temperature": 0.0, "max_tokens": 12,
            "logprobs": True, "top_logprobs": 2, "return_token_ids": True}
    s1, native = _post(embedded + "/v1/chat/completions/tokens", body)
    s2, routed = _post(gate + "/v1/chat/completions/tokens", body)
    assert s1 == s2 == 200, (native, routed)
    a, b = native["choices"][0], routed["choices"][0]
    assert b["message"] == a["message"] and b["finish_reason"] == a["finish_reason"]
    assert b["token_ids"] == a["token_ids"] and len(b["token_ids"]) > 0
    assert routed["prompt_token_ids"] == native["prompt_token_ids"] == tok["tokens"]
    assert [t["logprob"] for t in b["logprobs"]["content"]] == pytest.approx(
        [t["logprob"] for t in a["logprobs"]["content"]], abs=1e-4)
    assert [t["token"] for t in b["logprobs"]["content"]] == [t["token"] for t in a["logprobs"]["content"]]
    assert routed["policy_version"] == 0 and routed["object"] == "chat.completion"
    status, err = _post(gate + "/v1/chat/completions/tokens", {"model": SERVED, "tokens": []})
    assert status == 400 and "non-empty" in err["error"]["message"]


async def test_the_probe_finds_the_route_where_it_is_served(embedded: str, gate: str) -> None:
    from tests.local_runtime.helpers import SERVED, free_port
    from workbench.testing.mock_openai import MockOpenAI, serve

    runner, port = await serve(MockOpenAI(tokens=True, models=[SERVED]))
    no_route = free_port()
    stop = run_gate(AdapterGate([f"http://127.0.0.1:{port}"], tool_call_parser=None), "127.0.0.1", no_route)
    try:
        async with ChatClient(None) as client:
            assert await serves_token_route(client, embedded + "/v1", SERVED)
            assert await serves_token_route(client, gate + "/v1", SERVED)  # vLLM's stand-in behind the gate
            assert not await serves_token_route(client, f"http://127.0.0.1:{port}/v1", SERVED)  # plain OpenAI API
            assert not await serves_token_route(client, f"http://127.0.0.1:{no_route}/v1", SERVED)
            info = await preflight(client, f"http://127.0.0.1:{port}/v1", SERVED)  # owned_by "vllm": token ids, no route
            assert info.returns_tokens and not info.continues_tokens
            assert await continuation_for(client, f"http://127.0.0.1:{port}/v1", SERVED, info) is None
            assert await continuation_for(client, gate + "/v1", SERVED, info) is not None
    finally:
        stop()
        await runner.cleanup()


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    """A vLLM-like upstream: adapters load, whole chat answers carry no policy version."""
    from aiohttp import web

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="Success")

    async def chat(request: web.Request) -> web.Response:
        return web.json_response({"object": "chat.completion", "model": (await request.json())["model"], "choices": []})

    app = web.Application()
    app.router.add_post("/v1/load_lora_adapter", ok)
    app.router.add_post("/v1/unload_lora_adapter", ok)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_the_gate_stamps_whole_answers_with_the_adapters_policy_version(upstream: str, tmp_path: Path) -> None:
    import aiohttp

    from tests.local_runtime.helpers import free_port

    port = free_port()
    stop = run_gate(AdapterGate([upstream], base_model="base"), "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/load_lora_adapter",
                              json={"lora_name": "step-4", "lora_path": str(tmp_path), "policy_version": 4}) as r:
                assert r.status == 200
            versions = {}
            for model in ("step-4", "base", "other"):
                async with s.post(url + "/v1/chat/completions", json={"model": model, "messages": []}) as r:
                    versions[model] = (await r.json()).get("policy_version")
            assert versions == {"step-4": 4, "base": 0, "other": None}
            async with s.post(url + "/v1/unload_lora_adapter", json={"lora_name": "step-4"}) as r:
                assert r.status == 200
            async with s.post(url + "/v1/chat/completions", json={"model": "step-4", "messages": []}) as r:
                assert "policy_version" not in await r.json()
    finally:
        stop()
