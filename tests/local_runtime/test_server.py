"""The embedded server through the official ``openai`` client: chat, n, stop, seed, logprobs, token
ids, streaming, tools, completions, batching of concurrent requests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import ARITH, SERVED, get_json, post_json

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
#: The same tool with bounded arguments: a forced call of it always fits max_tokens.
WEATHER_BOUNDED = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 16}}, "required": ["city"],
    "additionalProperties": False}}}


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_models_and_health(client: Any, server: str) -> None:
    ids = [m.id for m in client.models.list().data]
    assert ids == [SERVED]
    h = get_json(server + "/health")
    assert h["status"] == "ok" and h["model"] == SERVED and h["policy_version"] == 0
    one = client.models.retrieve(SERVED)  # GET /v1/models/{id}, as agent SDKs check a model
    assert one.id == SERVED and one.owned_by == "workbench"
    import openai

    with pytest.raises(openai.NotFoundError, match="no-such-model"):
        client.models.retrieve("no-such-model")


def test_chat_basic(client: Any) -> None:
    r = client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=8, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 10 and r.usage.completion_tokens >= 1
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.model_extra["policy_version"] == 0


def test_n_choices(client: Any) -> None:
    r = client.chat.completions.create(model=SERVED, messages=ARITH, n=4, max_tokens=6, seed=3)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert r.usage.completion_tokens >= 4  # every choice generated at least one token
    assert all(c.message.content is not None for c in r.choices)


def test_seed_reproducible_and_varies(client: Any) -> None:
    msgs = [{"role": "user", "content": "Repeat after me: apple river"}]
    a = client.chat.completions.create(model=SERVED, messages=msgs, seed=11, max_tokens=12, temperature=1.5)
    b = client.chat.completions.create(model=SERVED, messages=msgs, seed=11, max_tokens=12, temperature=1.5)
    assert a.choices[0].message.content == b.choices[0].message.content
    outs = {client.chat.completions.create(model=SERVED, messages=msgs, seed=s, max_tokens=12,
                                           temperature=1.5).choices[0].message.content for s in range(6)}
    assert len(outs) > 1


def test_stop_sequences(client: Any) -> None:
    msgs = [{"role": "user", "content": "Count to 9."}]
    full = client.chat.completions.create(model=SERVED, messages=msgs, max_tokens=20, temperature=0).choices[0]
    text = full.message.content
    assert len(text) >= 3
    stop = text[2]
    r = client.chat.completions.create(model=SERVED, messages=msgs, max_tokens=20, temperature=0, stop=[stop])
    c = r.choices[0]
    assert c.message.content == text[: text.index(stop)]
    assert c.finish_reason == "stop" and c.model_extra["stop_reason"] == stop


def test_logprobs_and_top_logprobs(client: Any) -> None:
    r = client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=5, logprobs=True, top_logprobs=3,
                                       seed=0, extra_body={"return_token_ids": True})
    c = r.choices[0]
    entries = c.logprobs.content
    assert len(entries) == len(c.model_extra["token_ids"])
    for e in entries:
        assert e.logprob <= 0.0
        assert len(e.top_logprobs) == 3
        assert e.top_logprobs[0].logprob >= e.top_logprobs[-1].logprob
        assert e.logprob <= e.top_logprobs[0].logprob + 1e-6
        assert e.bytes == list(e.token.encode())


def test_return_token_ids_decode_to_text(client: Any, tok: Any) -> None:
    r = client.chat.completions.create(model=SERVED, messages=[{"role": "user", "content": "Hi"}], max_tokens=64,
                                       seed=5, extra_body={"return_token_ids": True})
    c = r.choices[0]
    ids = c.model_extra["token_ids"]
    assert ids and tok.decode(ids, skip_special_tokens=True) == c.message.content
    prompt_ids = r.model_extra["prompt_token_ids"]
    assert tok.decode(prompt_ids) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert r.usage.prompt_tokens == len(prompt_ids) and r.usage.completion_tokens == len(ids)
    assert c.finish_reason == "stop", c  # the tiny model ends its turn well within max_tokens
    assert ids[-1] == tok.eos_token_id  # the end-of-turn token is kept for training


def test_prompt_logprobs(client: Any) -> None:
    r = client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=2,
                                       extra_body={"prompt_logprobs": 2, "return_token_ids": True})
    plp = r.model_extra["prompt_logprobs"]
    ids = r.model_extra["prompt_token_ids"]
    assert plp[0] is None and len(plp) == len(ids)
    for tid, entry in zip(ids[1:], plp[1:], strict=True):
        assert str(tid) in entry and entry[str(tid)]["logprob"] <= 0 and entry[str(tid)]["rank"] >= 1


def test_streaming_matches_non_streamed(client: Any) -> None:
    msgs = [{"role": "user", "content": "Tell me a joke."}]
    ref = client.chat.completions.create(model=SERVED, messages=msgs, seed=21, max_tokens=24,
                                         extra_body={"return_token_ids": True})
    stream = client.chat.completions.create(model=SERVED, messages=msgs, seed=21, max_tokens=24, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"return_token_ids": True})
    text, ids, finish, usage, roles = "", [], None, None, 0
    for chunk in stream:
        assert chunk.model_extra["policy_version"] == 0
        if not chunk.choices:
            usage = chunk.usage
            continue
        d = chunk.choices[0].delta
        roles += d.role == "assistant"
        text += d.content or ""
        ids += chunk.choices[0].model_extra.get("token_ids") or []
        finish = chunk.choices[0].finish_reason or finish
    assert roles == 1
    assert text == ref.choices[0].message.content
    assert ids == ref.choices[0].model_extra["token_ids"]
    assert finish == ref.choices[0].finish_reason
    assert usage.completion_tokens == ref.usage.completion_tokens


def test_streaming_holds_back_stop_string(client: Any) -> None:
    msgs = [{"role": "user", "content": "Count to 9."}]
    ref = client.chat.completions.create(model=SERVED, messages=msgs, max_tokens=20, temperature=0, stop=[" 4"])
    chunks = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=SERVED, messages=msgs, max_tokens=20, temperature=0, stop=[" 4"], stream=True) if c.choices]
    assert "".join(chunks) == ref.choices[0].message.content
    assert " 4" not in "".join(chunks)


def test_tools_end_to_end(client: Any, tok: Any) -> None:
    """A forced tool call: the template renders the tools, the grammar makes the reply a call of the named
    function (sampled, token by token, after the plain generation prompt), parsed into tool_calls."""
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = client.chat.completions.create(model=SERVED, messages=msgs, tools=[WEATHER_BOUNDED], temperature=0, max_tokens=60,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                       extra_body={"return_token_ids": True})
    prompt = tok.decode(r.model_extra["prompt_token_ids"])
    assert '"name": "get_weather"' in prompt and prompt.endswith("<|im_start|>assistant\n")
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.content is None
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert isinstance(json.loads(c.message.tool_calls[0].function.arguments)["city"], str)
    assert tok.decode(c.model_extra["token_ids"]).startswith('<tool_call>{"name": "get_weather", "arguments": {')
    # tool results go back in and render through the template
    follow = [*msgs, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
    r2 = client.chat.completions.create(model=SERVED, messages=follow, tools=[WEATHER], max_tokens=12, seed=1)
    assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_completions_endpoint(client: Any, tok: Any) -> None:
    prompt = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    r = client.completions.create(model=SERVED, prompt=prompt, max_tokens=8, temperature=0, logprobs=2,
                                  extra_body={"return_token_ids": True})
    c = r.choices[0]
    assert c.text and c.finish_reason in ("stop", "length")
    assert len(c.logprobs.tokens) == len(c.logprobs.token_logprobs) == len(c.model_extra["token_ids"])
    assert c.model_extra["prompt_token_ids"] == tok(prompt)["input_ids"]
    # token-id prompts and several prompts at once
    ids = tok(prompt)["input_ids"]
    r2 = client.completions.create(model=SERVED, prompt=[ids, ids], max_tokens=8, temperature=0, n=2)
    assert [ch.index for ch in r2.choices] == [0, 1, 2, 3]
    assert {ch.text for ch in r2.choices} == {c.text}
    s = "".join(ch.choices[0].text for ch in client.completions.create(
        model=SERVED, prompt=prompt, max_tokens=8, temperature=0, stream=True))
    assert s == c.text


async def test_concurrent_requests_are_batched(aclient: Any, server: str) -> None:
    before = get_json(server + "/health")
    msgs = [{"role": "user", "content": "Count to 5."}]

    async def one(i: int) -> Any:
        return await aclient.chat.completions.create(model=SERVED, messages=msgs, max_tokens=16, seed=i)

    results = await asyncio.gather(*(one(i) for i in range(16)))
    assert all(r.choices[0].message.content is not None for r in results)
    after = get_json(server + "/health")
    assert after["sequences"] - before["sequences"] == 16
    assert after["batches"] - before["batches"] < 16  # they shared batches
    assert after["max_batch_seen"] >= 8


async def test_identical_prompts_are_prefilled_once_and_sample_as_they_would_alone(aclient: Any,
                                                                                  server: str) -> None:
    """The rollouts of one group share their prompt: a batch prefills it once and copies its KV cache,
    and each seeded request samples the same tokens, with the same logprobs, as it does alone."""
    msgs = [{"role": "user", "content": "What number comes next?\n17"}]

    async def one(seed: int, messages: list[dict[str, str]] = msgs) -> Any:
        return await aclient.chat.completions.create(model=SERVED, messages=messages, max_tokens=8, seed=seed,
                                                     temperature=1.0, logprobs=True)

    alone = [await one(s) for s in range(6)]
    before = get_json(server + "/health")
    together = await asyncio.gather(*(one(s) for s in range(6)), one(0, ARITH), one(1, ARITH))
    after = get_json(server + "/health")
    sequences, prefilled = after["sequences"] - before["sequences"], after["prefill_rows"] - before["prefill_rows"]
    assert sequences == 8 and prefilled <= sequences - 4, (sequences, prefilled, after["batch_sizes"])
    assert after["prompt_cache_hits"] - before["prompt_cache_hits"] >= 7  # all but the first ARITH were rendered before
    for a, b in zip(alone, together, strict=False):
        assert a.choices[0].message.content == b.choices[0].message.content
        la = [t.logprob for t in a.choices[0].logprobs.content]
        lb = [t.logprob for t in b.choices[0].logprobs.content]
        assert la == pytest.approx(lb, abs=1e-4)


@pytest.mark.parametrize("variant", [
    {}, {"tools": [WEATHER]}, {"extra_body": {"add_generation_prompt": False}},
    {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
])
def test_a_cached_prompt_is_the_one_the_template_renders(client: Any, server: str, variant: dict[str, Any]) -> None:
    """The prompt cache keys on everything the rendering depends on: each variant of the same messages
    gets its own prompt, the one /tokenize renders."""
    msgs = [{"role": "user", "content": "What number comes next?\n41"}]
    body = {"messages": msgs, **variant.get("extra_body", {}), **({"tools": variant["tools"]} if "tools" in variant
                                                                    else {})}
    status, rendered = _post(server, "/tokenize", {"model": SERVED, **body})
    assert status == 200
    for _ in range(2):  # the second is a cache hit
        r = client.chat.completions.create(model=SERVED, messages=msgs, max_tokens=2, **variant)
        assert r.usage.prompt_tokens == rendered["count"]


async def test_event_loop_stays_responsive_during_generation(aclient: Any, server: str) -> None:
    """Generation runs on a worker thread: /health answers, again and again, while a long batch is running
    (how fast it answers is scripts/bench_server.py's to measure)."""
    loop = asyncio.get_running_loop()
    long = asyncio.create_task(aclient.chat.completions.create(
        model=SERVED, messages=ARITH, max_tokens=800, extra_body={"ignore_eos": True}))
    during = 0
    while not long.done():
        h = await loop.run_in_executor(None, get_json, server + "/health")  # get_json's 5 s timeout: a hang guard
        during += bool(h["running"]) and not long.done()
        await asyncio.sleep(0.02)
    assert during >= 3, during
    r = await long
    assert r.usage.completion_tokens == 800 and r.choices[0].finish_reason == "length"


def _post(server: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return post_json(server + path, body)


def test_tokenize_renders_the_chat_template_and_detokenize_inverts(server: str, tok: Any) -> None:
    status, out = _post(server, "/tokenize", {"model": SERVED, "messages": ARITH})
    assert status == 200
    expected = tok.apply_chat_template(ARITH, add_generation_prompt=True, tokenize=True, return_dict=False)
    assert out["tokens"] == list(expected) and out["count"] == len(expected) and out["max_model_len"] > 0
    _, closed = _post(server, "/tokenize", {"messages": ARITH, "add_generation_prompt": False})
    assert closed["tokens"] == out["tokens"][: len(closed["tokens"])] and closed["count"] < out["count"]
    _, plain = _post(server, "/tokenize", {"prompt": "hello world", "return_token_strs": True})
    assert plain["tokens"] == tok("hello world", add_special_tokens=False)["input_ids"]
    assert len(plain["token_strs"]) == plain["count"]
    _, back = _post(server, "/detokenize", {"tokens": plain["tokens"]})
    assert back["prompt"] == "hello world"
    # Bad input: one clear 400 each.
    assert _post(server, "/tokenize", {"messages": ARITH, "prompt": "x"})[0] == 400
    assert _post(server, "/tokenize", {})[0] == 400
    status, err = _post(server, "/detokenize", {"tokens": [-1]})
    assert status == 400 and "tokens" in err["error"]["message"]


def test_chat_tokens_route_uses_the_given_ids_as_the_prompt(server: str, tok: Any) -> None:
    rendered = list(tok.apply_chat_template(ARITH, add_generation_prompt=True, tokenize=True, return_dict=False))
    body = {"model": SERVED, "messages": ARITH, "max_tokens": 6, "seed": 3, "return_token_ids": True, "logprobs": True}
    _, via_messages = _post(server, "/v1/chat/completions", body)
    status, via_tokens = _post(server, "/v1/chat/completions/tokens", {**body, "tokens": rendered})
    assert status == 200
    assert via_tokens["prompt_token_ids"] == rendered == via_messages["prompt_token_ids"]
    assert via_tokens["choices"][0]["token_ids"] == via_messages["choices"][0]["token_ids"]  # same seed, same prompt
    # Ids that no template would produce are taken as they are (that is the point of the route).
    odd = [*rendered[:-1], *tok("7", add_special_tokens=False)["input_ids"], rendered[-1]]
    _, r = _post(server, "/v1/chat/completions/tokens", {**body, "tokens": odd})
    assert r["prompt_token_ids"] == odd
    vocab = len(tok)
    status, err = _post(server, "/v1/chat/completions/tokens", {**body, "tokens": [vocab + 5]})
    assert status == 400 and err["error"]["param"] == "tokens"
    status, err = _post(server, "/v1/chat/completions/tokens", {**body, "tokens": []})
    assert status == 400 and "tokens" in err["error"]["message"]
