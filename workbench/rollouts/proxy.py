"""The interception proxy: every rollout gets ``http://127.0.0.1:PORT/r/<rollout>/v1``.

Harness code written for the plain OpenAI API — or an external agent program that only sees
``OPENAI_BASE_URL`` — calls it like any endpoint. The proxy forwards to the run's upstream (the
embedded server, vLLM, or any OpenAI-compatible API) with what training needs (token ids,
logprobs, the run's sampling settings) where the upstream supports it, and records every call,
streamed ones included, into the rollout's token-exact trace. The harness never knows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from workbench.rollouts.client import ChatClient, ChatResponse, ModelError, parse_chat_body
from workbench.rollouts.rollout import Rollout


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.Response(body=orjson.dumps({"error": {"message": message, "type": kind}}), status=status,
                        content_type="application/json")


class InterceptionProxy:
    """An aiohttp server in the run's event loop; rollouts are registered while they run."""

    def __init__(self, client: ChatClient, upstream: str, model: str, params: dict[str, Any],
                 host: str = "127.0.0.1") -> None:
        self.client, self.upstream, self.model, self.params, self.host = client, upstream.rstrip("/"), model, params, host
        self.rollouts: dict[str, Rollout] = {}
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.requests = 0

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, port: int = 0) -> InterceptionProxy:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/r/{rid}/v1/chat/completions", self._chat)
        app.router.add_get("/r/{rid}/v1/models", self._models)
        app.router.add_get("/r/{rid}/v1/models/{model_id}", self._model)
        app.router.add_post("/r/{rid}/v1/completions", self._passthrough)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def serve_unix(self, path: Path) -> Path:
        """Also serve on a Unix socket at ``path`` (in a sandbox pool's bridge folder: a program inside the
        sandbox reaches the proxy through it, and nothing else of the host). Writable by any uid: the
        sandbox's user must connect to it; only the sandboxes of this pool see the folder."""
        assert self._runner is not None, "start() first"
        path.unlink(missing_ok=True)
        site = web.UnixSite(self._runner, str(path))
        await site.start()
        os.chmod(path, 0o777)
        return path

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> InterceptionProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def bridge_into(self, pool: Any) -> None:
        """Make the proxy reachable from inside the sandboxes of ``pool`` (a program there reaches it through
        ``bridge.py`` and the socket in the pool's bridge folder); a no-op for a pool without one."""
        folder = getattr(pool, "bridge_dir", None)
        if folder is None:
            return
        src = Path(__file__).with_name("bridge.py")
        tmp = folder / ".bridge.py.part"
        tmp.write_bytes(src.read_bytes())
        os.chmod(tmp, 0o644)
        os.replace(tmp, folder / "bridge.py")
        await self.serve_unix(folder / "proxy.sock")

    def url_for(self, rollout_id: str) -> str:
        return f"http://{self.host}:{self.port}/r/{rollout_id}/v1"

    def register(self, rollout: Rollout) -> Callable[[], None]:
        self.rollouts[rollout.id] = rollout
        return lambda: self.rollouts.pop(rollout.id, None)

    # -- handlers ------------------------------------------------------------------------------
    def _rollout(self, request: web.Request) -> Rollout | None:
        return self.rollouts.get(request.match_info["rid"])

    def _model_entry(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": 0, "owned_by": "workbench-proxy"}

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_entry()]})

    async def _model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{id}``: the run's model, whatever name the harness asks for (every call goes to it)."""
        if self._rollout(request) is None:
            return _error(404, "unknown rollout", "not_found")
        return web.json_response({**self._model_entry(), "id": request.match_info["model_id"]})

    def _prepare(self, body: dict[str, Any], rollout: Rollout) -> dict[str, Any]:
        # The run decides the model and the sampling settings; the harness's own values are replaced.
        out = {**body, **self.params, **rollout.params, "model": self.model}
        return out

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        rollout = self._rollout(request)
        if rollout is None:
            return _error(404, f"no running rollout {request.match_info['rid']!r} behind this URL")
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise ValueError("the body must be a JSON object with a 'messages' list")
        except (orjson.JSONDecodeError, ValueError) as e:
            return _error(400, f"malformed request: {e}")
        payload = self._prepare(body, rollout)
        messages = body["messages"]
        route = "/chat/completions"
        ids = await rollout.continued_prompt(messages, body.get("tools"))
        if ids is not None:
            payload["tokens"] = ids
            route += "/tokens"
        if payload.get("stream"):
            return await self._stream(request, rollout, payload, messages, route)
        t0 = time.perf_counter()
        try:
            raw = await self.client.post_json(self.upstream + route, payload, self.model)
            resp = parse_chat_body(raw)
        except ModelError as e:
            return _error(e.status or 502, e.message, "upstream_error")
        rollout.record_call(messages, resp, time.perf_counter() - t0)
        return web.Response(body=raw, content_type="application/json")

    async def _passthrough(self, request: web.Request) -> web.Response:
        rollout = self._rollout(request)
        if rollout is None:
            return _error(404, f"no running rollout {request.match_info['rid']!r} behind this URL")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return _error(400, f"malformed request: {e}")
        try:
            raw = await self.client.post_json(self.upstream + "/completions", {**body, "model": self.model}, self.model)
        except ModelError as e:
            return _error(e.status or 502, e.message, "upstream_error")
        return web.Response(body=raw, content_type="application/json")

    async def _stream(self, request: web.Request, rollout: Rollout, payload: dict[str, Any],
                      messages: list[dict[str, Any]], route: str) -> web.StreamResponse:
        # The trace needs the usage, so it is asked for upstream; the harness gets it only if it asked too.
        wants_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        payload["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
        acc = _StreamAccumulator()
        t0 = time.perf_counter()
        session = await self.client.session()
        try:
            upstream = await session.post(self.upstream + route, data=orjson.dumps(payload),
                                          headers=self.client.headers)
        except Exception as e:  # connection refused, ...
            return _error(502, f"upstream unreachable: {e}", "upstream_error")
        async with upstream:
            if upstream.status >= 400:
                return web.Response(body=await upstream.read(), status=upstream.status,
                                    content_type="application/json")
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await out.prepare(request)
            buf = b""
            async for chunk in upstream.content.iter_any():
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    acc.feed(line)
                # Whole lines only, so a usage chunk can be told apart; the harness sees the same events.
                kept = lines if wants_usage else [k for k in map(_without_usage, lines) if k is not None]
                if kept:
                    await out.write(b"".join(k + b"\n" for k in kept))
            if buf:
                acc.feed(buf)
                kept_last = buf if wants_usage else _without_usage(buf)
                if kept_last is not None:
                    await out.write(kept_last)
            await out.write_eof()
        rollout.record_call(messages, acc.response(), time.perf_counter() - t0)
        return out


def _without_usage(line: bytes) -> bytes | None:
    """An SSE line as the harness gets it when it did not ask for usage: a usage-only chunk (no choices)
    is dropped, a usage field on a chunk with choices removed; every other line passes as it is."""
    if b'"usage"' not in line or not line.lstrip().startswith(b"data:"):
        return line
    try:
        chunk = orjson.loads(line.lstrip()[5:].strip())
    except orjson.JSONDecodeError:
        return line
    if not isinstance(chunk, dict) or "usage" not in chunk:
        return line
    if not chunk.get("choices"):
        return None
    del chunk["usage"]
    return b"data: " + orjson.dumps(chunk)


class _StreamAccumulator:
    """Rebuilds a whole chat response from OpenAI/vLLM SSE chunks."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[dict[str, Any]] = []
        self.token_ids: list[int] = []
        self.prompt_token_ids: list[int] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.policy_version: Any = None

    def feed(self, line: bytes) -> None:
        line = line.strip()
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if chunk.get("policy_version") is not None:
            self.policy_version = chunk["policy_version"]
        for ch in chunk.get("choices") or ():
            if ch.get("index", 0) != 0:
                continue
            delta = ch.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
            for tc in delta.get("tool_calls") or ():
                slot = self.tool_calls.setdefault(tc.get("index", 0), {"id": "", "type": "function",
                                                                        "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
            lp = ch.get("logprobs")
            if isinstance(lp, dict) and lp.get("content"):
                self.logprobs.extend(lp["content"])
            if ch.get("token_ids"):
                self.token_ids.extend(ch["token_ids"])
            if ch.get("prompt_token_ids") is not None:
                self.prompt_token_ids = ch["prompt_token_ids"]
            if ch.get("finish_reason"):
                self.finish_reason = ch["finish_reason"]

    def response(self) -> ChatResponse:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) if self.content or not
                                   self.tool_calls else None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        extra: dict[str, Any] = {}
        if self.logprobs:
            extra["logprobs"] = {"content": self.logprobs}
        if self.token_ids:
            extra["token_ids"] = self.token_ids
        if self.prompt_token_ids is not None:
            extra["prompt_token_ids"] = self.prompt_token_ids
        if self.policy_version is not None:
            extra["policy_version"] = self.policy_version
        return ChatResponse(message, self.finish_reason, int(self.usage.get("prompt_tokens") or 0),
                            int(self.usage.get("completion_tokens") or 0), extra or None)
