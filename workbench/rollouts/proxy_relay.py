"""The interception proxy's relays of one call upstream: a call in any API (``serve_call``; streamed chat
relayed event by event) and ``/v1/completions``. The gateway serves its calls through them too.

A streamed call is relayed event by event and recorded once the stream ends. An upstream that answers a
streamed request with one JSON body (some providers ignore ``stream``) is read as the answer it is, by
its Content-Type, and streamed to the harness from it; an answer that is neither is a 502 saying so. A
harness that hangs up mid-stream ends the relay quietly: the call it never received is not recorded.
An Anthropic upstream (a client of ``provider="anthropic"``) is asked with one Messages request, not streamed
(``ChatClient.complete``); a streamed call is streamed to the harness from its whole answer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

import orjson
from aiohttp import web

from workbench.records.model_reply import ModelError
from workbench.records.rollout import Rollout
from workbench.records.trace import RAW_PROMPT
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy_calls import ChatAPI, WireAPI, record_choices
from workbench.wire import WireError
from workbench.wire.chat_stream import ChatStreamAccumulator, completion_chunks


class Upstream(Protocol):
    """What a relay needs of the interception proxy (``proxy.py``): its client, the upstream URL and model,
    and a harness's request as the run sends it on."""

    client: ChatClient
    upstream: str
    model: str

    def prepare(self, body: dict[str, Any], rollout: Rollout) -> dict[str, Any]: ...


def upstream_message(raw: bytes) -> str:
    try:
        err = orjson.loads(raw).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)
    except (orjson.JSONDecodeError, AttributeError):
        return raw[:300].decode(errors="replace")


async def _one(lines: list[bytes]) -> AsyncIterator[bytes]:
    yield b"\n".join(lines) + b"\n"


def _as_stream(raw: bytes) -> list[bytes] | str:
    """A whole chat completion body as the stream's lines, or why it is none."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return f"the upstream answered a streamed request with neither a stream nor JSON: {raw[:120]!r}"
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        return f"the upstream answered a streamed request with JSON that is no chat completion: {raw[:120]!r}"
    lines = []
    for chunk in completion_chunks(data):
        lines += [b"data: " + orjson.dumps(chunk), b""]
    return [*lines, b"data: [DONE]", b""]


async def serve_call(proxy: Upstream, request: web.Request, api: WireAPI, rollout: Rollout,
                     body: dict[str, Any]) -> web.StreamResponse:
    """One call in any API for ``rollout``: translated to a chat request, sent upstream, recorded in the
    rollout, answered in kind (streamed or whole)."""
    try:
        chat = api.to_chat(body)
    except WireError as e:
        return api.error(400, e.message, param=e.param)
    messages, tools = chat["messages"], chat.get("tools")
    payload = proxy.prepare(chat, rollout)
    route = "/chat/completions"
    ids = await rollout.continued_prompt(messages, tools)
    if ids is not None:
        payload["tokens"] = ids
        route += "/tokens"
    if payload.get("stream"):
        return await relay_stream(proxy, request, rollout, api, payload, messages, tools, route)
    t0 = time.perf_counter()
    try:
        raw = await proxy.client.complete(proxy.upstream, payload, proxy.model, route)
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise orjson.JSONDecodeError("not an object", "", 0)
        api.recorded(record_choices(rollout, messages, tools, data, time.perf_counter() - t0, api=api.name))
    except ModelError as e:
        return api.error(e.status or 502, e.message, upstream=True)
    except orjson.JSONDecodeError:
        return api.error(502, f"the upstream answered with something that is not JSON: {raw[:120]!r}", upstream=True)
    return web.Response(body=api.from_chat(data, raw), content_type="application/json")


async def relay_stream(proxy: Upstream, request: web.Request, rollout: Rollout, api: WireAPI,
                       payload: dict[str, Any], messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                       route: str) -> web.StreamResponse:
    # The trace needs the usage, so it is asked for upstream; the harness gets it only if it asked too.
    api.wants_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
    payload["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
    accs: dict[int, ChatStreamAccumulator] = {0: ChatStreamAccumulator()}
    t0 = time.perf_counter()
    async with contextlib.AsyncExitStack() as held:
        source: AsyncIterator[bytes]
        if proxy.client.provider == "anthropic":  # one Messages answer, streamed from whole
            whole_payload = {k: v for k, v in payload.items() if k not in ("stream", "stream_options")}
            try:
                whole = _as_stream(await proxy.client.complete(proxy.upstream, whole_payload, proxy.model, route))
            except ModelError as e:
                return api.error(e.status or 502, e.message, upstream=True)
            if isinstance(whole, str):
                return api.error(502, whole, upstream=True)
            source = _one(whole)
        else:
            session = await proxy.client.session()
            try:
                upstream = await session.post(proxy.upstream + route, data=orjson.dumps(payload),
                                              headers=proxy.client.headers)
            except Exception as e:  # connection refused, ...
                return api.error(502, f"upstream unreachable: {e}", upstream=True)
            await held.enter_async_context(upstream)
            if upstream.status >= 400:
                raw = await upstream.read()
                if api.name == "chat":  # the upstream's own error body, its code and param kept
                    return web.Response(body=raw, status=upstream.status, content_type="application/json")
                return api.error(upstream.status, upstream_message(raw), upstream=True)
            source = upstream.content.iter_any()
            if "text/event-stream" not in upstream.headers.get("Content-Type", ""):
                whole = _as_stream(await upstream.read())
                if isinstance(whole, str):
                    return api.error(502, whole, upstream=True)
                source = _one(whole)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            await out.prepare(request)
            head = api.start()
            if head:
                await out.write(head)
            buf = b""
            async for chunk in source:
                buf += chunk
                *lines, buf = buf.split(b"\n")  # whole lines only, so each event is seen whole
                sent = api.lines(lines, accs)
                if sent:
                    await out.write(sent)
            tail = api.lines([buf], accs) if buf else b""
            await out.write(tail + api.finish(accs[0]))
            await out.write_eof()
        except ConnectionResetError:  # the harness hung up: nothing to answer, nothing it saw to record
            return out
    api.recorded(record_choices(rollout, messages, tools, {i: a for i, a in sorted(accs.items())},
                                time.perf_counter() - t0, api=api.name))
    return out


async def relay_completions(proxy: Upstream, rollout: Rollout, api: ChatAPI,
                            body: dict[str, Any]) -> web.Response:
    """``/v1/completions``: forwarded with the run's model and settings and token ids asked for; each
    choice recorded as a call whose one message is the prompt, marked as a raw prompt (no chat
    template made its tokens, so none re-renders them)."""
    if body.get("stream"):
        return api.error(400, "streamed /v1/completions is not served through the proxy; use stream: false "
                              "or chat completions", param="stream")
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        return api.error(400, "the proxy records completions of one text prompt: 'prompt' must be a string",
                         param="prompt")
    payload = {**proxy.prepare(body, rollout), "return_token_ids": True}
    t0 = time.perf_counter()
    try:
        raw = await proxy.client.post_json(proxy.upstream + "/completions", payload, proxy.model)
        data = orjson.loads(raw)
        if not isinstance(data, dict):
            raise orjson.JSONDecodeError("not an object", "", 0)
    except ModelError as e:
        return api.error(e.status or 502, e.message, upstream=True)
    except orjson.JSONDecodeError:
        return api.error(502, f"the upstream answered with something that is not JSON: {raw[:120]!r}", upstream=True)
    chat_like = {**data, "choices": [{**c, "message": {"role": "assistant", "content": c.get("text", "")}}
                                     for c in data.get("choices") or () if isinstance(c, dict)]}
    if chat_like["choices"]:
        record_choices(rollout, [{"role": "user", "content": prompt, RAW_PROMPT: True}], None, chat_like,
                       time.perf_counter() - t0, api="completions")
    if not body.get("return_token_ids"):
        for c in data.get("choices") or ():
            if isinstance(c, dict):
                c.pop("token_ids", None)
                c.pop("prompt_token_ids", None)
        raw = orjson.dumps(data)
    return web.Response(body=raw, content_type="application/json")
