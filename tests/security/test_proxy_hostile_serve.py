"""``workbench serve`` (the embedded server) against hostile or sloppy clients, and the proxy in front of it:
malformed Responses and Messages bodies are 400s in the API's own shape, the prompt cache never answers
one request with another's prompt, token continuation renders exactly the tools a call sends, the
Responses and Messages endpoints the SDKs call are served, and a capped context is said aloud.

Real server subprocesses on the tiny model, driven with the official ``openai`` and ``anthropic`` SDKs.
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

import workbench as wb
from tests.local_runtime.helpers import ROOT, SERVED, free_port, get_json, post_json, run_server, server_env
from tests.security.test_proxy_hostile import _PATHS, MALFORMED, SEEDS, _assert_shape, _mutate
from workbench.records.rollout import Rollout
from workbench.rollouts.client import ChatClient
from workbench.rollouts.continuation import TokenContinuation
from workbench.rollouts.proxy import InterceptionProxy

pytest.importorskip("torch")
pytest.importorskip("transformers")

TOOL = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
REORDERED = {"function": {"parameters": {"required": ["a", "b"], "properties": {"b": {"type": "integer"},
                                                                               "a": {"type": "integer"}},
                                         "type": "object"},
                          "description": "Add two integers.", "name": "add"}, "type": "function"}
ASK = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="module")
def served(tiny_dir: Path) -> Iterator[str]:
    with run_server(tiny_dir, "--served-model-name", SERVED) as root:
        yield root


def _tokenize(root: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
    status, body = post_json(root + "/tokenize", {"model": SERVED, "messages": messages, "add_generation_prompt": True,
                                                 **({"tools": tools} if tools else {})})
    assert status == 200, body
    return list(body["tokens"])


# -- malformed bodies ------------------------------------------------------------------------------
SERVE_MALFORMED = [c for c in MALFORMED if c[1] != "chat"]


@pytest.mark.parametrize(("api", "body", "fragment"), [c[1:] for c in SERVE_MALFORMED],
                         ids=[c[0] for c in SERVE_MALFORMED])
def test_a_malformed_body_is_a_400_in_the_apis_own_shape(served: str, api: str, body: dict[str, Any],
                                                         fragment: str) -> None:
    before = get_json(served + "/health")["sequences"]
    status, got = post_json(served + "/v1" + _PATHS[api], body)
    assert status == 400, got
    _assert_shape(api, got)
    assert fragment in got["error"]["message"] and "\n" not in got["error"]["message"]
    assert get_json(served + "/health")["sequences"] == before, "nothing was generated"


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
async def test_fuzzed_bodies_are_answered_or_refused_in_the_apis_shape_never_500(served: str, api: str) -> None:
    rng = random.Random(f"serve-fuzz-{api}")
    bad: list[tuple[int, Any]] = []
    async with aiohttp.ClientSession() as s:
        for _ in range(60):
            body = _mutate(SEEDS[api], rng)
            if isinstance(body, dict):  # short answers: the fuzz is about the request, not generation
                body["max_output_tokens" if api == "responses" else "max_tokens"] = 4
                body["model"] = SERVED
            async with s.post(served + "/v1" + _PATHS[api], data=json.dumps(body)) as resp:
                raw = await resp.read()
                if resp.status >= 500:
                    bad.append((resp.status, body))
                elif resp.status >= 400:
                    _assert_shape(api, json.loads(raw))
    assert bad == [], bad[:3]


# -- the prompt cache and token continuation render exactly what a call sends ------------------------
def test_tools_differing_only_in_key_order_are_rendered_each_as_sent(served: str) -> None:
    client = openai.OpenAI(base_url=served + "/v1", api_key="unused", max_retries=0)
    for tools in ([TOOL], [REORDERED]):
        r = client.chat.completions.create(model=SERVED, messages=ASK, tools=tools, max_tokens=1,  # type: ignore
                                           extra_body={"return_token_ids": True})
        assert r.model_dump()["prompt_token_ids"] == _tokenize(served, ASK, tools)
    assert _tokenize(served, ASK, [TOOL]) != _tokenize(served, ASK, [REORDERED])


async def test_a_follow_up_that_drops_its_tools_renders_no_tools(served: str) -> None:
    base = served + "/v1"
    client = ChatClient(None)
    params = {"logprobs": True, "return_token_ids": True, "temperature": 0, "max_tokens": 6}
    proxy = await InterceptionProxy(client, base, SERVED, params).start()
    r = Rollout(id="c.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client, base_url=proxy.url_for("c.0.0"),
                model=SERVED, params=params, continuation=TokenContinuation(client, base, SERVED))
    proxy.register(r)
    try:
        oa = openai.AsyncOpenAI(base_url=r.base_url, api_key="unused", max_retries=0)
        first = await oa.chat.completions.create(model="m", messages=ASK, tools=[TOOL],  # type: ignore[list-item]
                                                 tool_choice="none")
        reply = {"role": "assistant", "content": first.choices[0].message.content or ""}
        follow = [*ASK, reply, {"role": "user", "content": "And 3+4?"}]
        second = await oa.chat.completions.create(model="m", messages=follow)  # type: ignore[arg-type]
    finally:
        await proxy.close()
        await client.close()
    assert second.model_dump()["prompt_token_ids"] == _tokenize(served, follow)


# -- the API surface the SDKs call -------------------------------------------------------------------
def test_a_response_is_retrieved_by_its_id(served: str) -> None:
    client = openai.OpenAI(base_url=served + "/v1", api_key="unused", max_retries=0)
    made = client.responses.create(model=SERVED, input="What is 2+3?", max_output_tokens=6, temperature=0)
    got = client.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == made.output_text
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nosuch")


async def test_count_tokens_counts_the_rendered_prompt_on_serve_and_through_the_proxy(served: str) -> None:
    tool = {"name": "add", "description": "Add two integers.", "input_schema": TOOL["function"]["parameters"]}
    want = _tokenize(served, [{"role": "system", "content": "Be brief."}, *ASK], [TOOL])
    direct = anthropic.Anthropic(base_url=served, api_key="unused", max_retries=0)
    got = direct.messages.count_tokens(model=SERVED, system="Be brief.", messages=ASK, tools=[tool])  # type: ignore
    assert got.input_tokens == len(want)
    client = ChatClient(None)
    proxy = await InterceptionProxy(client, served + "/v1", SERVED, {}).start()
    r = Rollout(id="k.0.0", task=wb.Task(prompt="x"), sample_index=0, client=client, base_url=proxy.url_for("k.0.0"),
                model=SERVED, params={})
    proxy.register(r)
    try:
        claude = anthropic.AsyncAnthropic(base_url=r.base_url.removesuffix("/v1"), api_key="x", max_retries=0)
        via = await claude.messages.count_tokens(model="claude", system="Be brief.", messages=ASK,  # type: ignore
                                                 tools=[tool])  # type: ignore[list-item]
    finally:
        await proxy.close()
        await client.close()
    assert via.input_tokens == len(want) and r.calls == []


@contextlib.contextmanager
def _server_lines(model: Path, *args: str) -> Iterator[tuple[str, list[str]]]:
    """A server subprocess; yields (root URL, the lines it wrote: up to serving, and the rest once it ends)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "workbench_local.server", "--model", str(model), "--port", str(port),
                             "--threads", "1", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=server_env(), cwd=ROOT)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "serving " in line:
                break
        assert proc.poll() is None, lines
        yield f"http://127.0.0.1:{port}", lines
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            lines.extend(proc.stderr.read().splitlines())
            proc.stderr.close()


def test_a_capped_max_model_len_is_said_at_start_and_in_health(tiny_dir: Path) -> None:
    with _server_lines(tiny_dir, "--max-model-len", "1000000") as (root, lines):
        health = get_json(root + "/health")
    ctx = health["context_len"]
    assert ctx < 1000000
    said = [ln for ln in lines if "--max-model-len 1000000" in ln]
    assert len(said) == 1 and said[0].startswith("workbench serve: warning:") and str(ctx) in said[0], lines
    assert any("--max-model-len 1000000" in w and str(ctx) in w for w in health["warnings"]), health


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_client_cutting_a_stream_leaves_nothing_on_serves_stderr(tiny_dir: Path, api: str) -> None:
    bodies = {"chat": {"model": SERVED, "messages": ASK, "stream": True, "max_tokens": 400, "ignore_eos": True},
              "responses": {"model": SERVED, "input": "hi", "stream": True, "max_output_tokens": 400},
              "messages": {"model": SERVED, "max_tokens": 400, "messages": ASK, "stream": True}}
    with _server_lines(tiny_dir, "--served-model-name", SERVED) as (root, lines):
        req = urllib.request.Request(root + "/v1" + _PATHS[api], data=json.dumps(bodies[api]).encode(),
                                     headers={"Content-Type": "application/json"})
        resp = urllib.request.urlopen(req, timeout=60)
        resp.readline()  # the stream has begun: hang up
        resp.close()
        status, _ = post_json(root + "/v1/chat/completions", {"model": SERVED, "messages": ASK, "max_tokens": 2})
        assert status == 200
    assert not [ln for ln in lines if "Traceback" in ln or "Error handling request" in ln], lines
