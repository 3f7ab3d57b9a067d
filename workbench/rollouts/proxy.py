"""The interception proxy: every rollout gets ``http://127.0.0.1:PORT/r/<rollout>/v1``.

Harness code written for the plain OpenAI API — or an external agent program that only sees
``OPENAI_BASE_URL`` or ``ANTHROPIC_BASE_URL`` (``/r/<rollout>``) — calls it like any endpoint: chat
completions, completions, the Responses API (``/v1/responses``) and the Anthropic Messages API
(``/v1/messages``), streamed or not. The proxy forwards to the run's upstream (the embedded server,
vLLM, or any OpenAI-compatible API) as chat completions (:mod:`workbench.wire` translates), with what
training needs (token ids, logprobs, the run's sampling settings) where the upstream supports it, and
records every call, every choice of it, into the rollout's token-exact trace. What the harness gets
back has the shape it asked for: the harness never knows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from workbench.rollouts.client import ChatClient, ModelError
from workbench.rollouts.proxy_calls import ChatAPI, MessagesAPI, ResponsesAPI, WireAPI, record_choices
from workbench.rollouts.rollout import Rollout
from workbench.rollouts.trace import RAW_PROMPT
from workbench.wire import WireError
from workbench.wire.chat_stream import ChatStreamAccumulator
from workbench.wire.responses import ResponseStore


def _error(status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
           param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")


class InterceptionProxy:
    """An aiohttp server in the run's event loop; rollouts are registered while they run."""

    def __init__(self, client: ChatClient, upstream: str, model: str, params: dict[str, Any],
                 host: str = "127.0.0.1") -> None:
        self.client, self.upstream, self.model, self.params, self.host = client, upstream.rstrip("/"), model, params, host
        self.rollouts: dict[str, Rollout] = {}
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.requests = 0
        self.responses: dict[str, ResponseStore] = {}  # per rollout: previous_response_id stays within it
        # per rollout: each tool call's arguments as the model wrote them (a Messages tool_use sent back
        # carries them parsed, as ``input``; the call going upstream gets the exact text again)
        self.tool_arguments: dict[str, dict[str, str]] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, port: int = 0) -> InterceptionProxy:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/r/{rid}/v1/chat/completions", self._chat)
        app.router.add_get("/r/{rid}/v1/models", self._models)
        app.router.add_get("/r/{rid}/v1/models/{model_id}", self._model)
        app.router.add_post("/r/{rid}/v1/completions", self._completions)
        app.router.add_post("/r/{rid}/v1/responses", self._responses)
        app.router.add_post("/r/{rid}/v1/messages", self._messages)
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

        def unregister() -> None:
            self.rollouts.pop(rollout.id, None)
            self.responses.pop(rollout.id, None)
            self.tool_arguments.pop(rollout.id, None)

        return unregister

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
        return {**body, **self.params, **rollout.params, "model": self.model}

    async def _body(self, request: web.Request, api: WireAPI) -> tuple[Rollout, dict[str, Any]] | web.Response:
        self.requests += 1
        rollout = self._rollout(request)
        if rollout is None:
            return api.error(404, f"no running rollout {request.match_info['rid']!r} behind this URL")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return api.error(400, f"malformed request: the body is not JSON ({e})")
        if not isinstance(body, dict):
            return api.error(400, "malformed request: the body must be a JSON object")
        return rollout, body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, ChatAPI())

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        store = self.responses.setdefault(request.match_info["rid"], ResponseStore(capacity=256))
        return await self._serve(request, ResponsesAPI(self.model, store))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        arguments = self.tool_arguments.setdefault(request.match_info["rid"], {})
        return await self._serve(request, MessagesAPI(self.model, arguments))

    async def _serve(self, request: web.Request, api: WireAPI) -> web.StreamResponse:
        """One call in any API: translated to a chat request, sent upstream, recorded, answered in kind."""
        got = await self._body(request, api)
        if isinstance(got, web.Response):
            return got
        rollout, body = got
        try:
            chat = api.to_chat(body)
        except WireError as e:
            return api.error(400, e.message, param=e.param)
        messages, tools = chat["messages"], chat.get("tools")
        payload = self._prepare(chat, rollout)
        route = "/chat/completions"
        ids = await rollout.continued_prompt(messages, tools)
        if ids is not None:
            payload["tokens"] = ids
            route += "/tokens"
        if payload.get("stream"):
            return await self._stream(request, rollout, api, payload, messages, tools, route)
        t0 = time.perf_counter()
        try:
            raw = await self.client.post_json(self.upstream + route, payload, self.model)
            data = orjson.loads(raw)
            api.recorded(record_choices(rollout, messages, tools, data, time.perf_counter() - t0, api=api.name))
        except ModelError as e:
            return api.error(e.status or 502, e.message, upstream=True)
        except orjson.JSONDecodeError:
            return api.error(502, f"the upstream answered with something that is not JSON: {raw[:120]!r}", upstream=True)
        return web.Response(body=api.from_chat(data, raw), content_type="application/json")

    async def _completions(self, request: web.Request) -> web.Response:
        """``/v1/completions``: forwarded with the run's model and settings and token ids asked for; each
        choice recorded as a call whose one message is the prompt, marked as a raw prompt (no chat
        template made its tokens, so none re-renders them)."""
        api = ChatAPI()
        got = await self._body(request, api)
        if isinstance(got, web.Response):
            return got
        rollout, body = got
        if body.get("stream"):
            return api.error(400, "streamed /v1/completions is not served through the proxy; use stream: false "
                                  "or chat completions", param="stream")
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            return api.error(400, "the proxy records completions of one text prompt: 'prompt' must be a string",
                             param="prompt")
        payload = {**self._prepare(body, rollout), "return_token_ids": True}
        t0 = time.perf_counter()
        try:
            raw = await self.client.post_json(self.upstream + "/completions", payload, self.model)
            data = orjson.loads(raw)
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

    async def _stream(self, request: web.Request, rollout: Rollout, api: WireAPI, payload: dict[str, Any],
                      messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                      route: str) -> web.StreamResponse:
        # The trace needs the usage, so it is asked for upstream; the harness gets it only if it asked too.
        api.wants_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        payload["stream_options"] = {**(payload.get("stream_options") or {}), "include_usage": True}
        accs: dict[int, ChatStreamAccumulator] = {0: ChatStreamAccumulator()}
        t0 = time.perf_counter()
        session = await self.client.session()
        try:
            upstream = await session.post(self.upstream + route, data=orjson.dumps(payload),
                                          headers=self.client.headers)
        except Exception as e:  # connection refused, ...
            return api.error(502, f"upstream unreachable: {e}", upstream=True)
        async with upstream:
            if upstream.status >= 400:
                raw = await upstream.read()
                if api.name == "chat":  # the upstream's own error body, its code and param kept
                    return web.Response(body=raw, status=upstream.status, content_type="application/json")
                return api.error(upstream.status, _upstream_message(raw), upstream=True)
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await out.prepare(request)
            head = api.start()
            if head:
                await out.write(head)
            buf = b""
            async for chunk in upstream.content.iter_any():
                buf += chunk
                *lines, buf = buf.split(b"\n")  # whole lines only, so each event is seen whole
                sent = api.lines(lines, accs)
                if sent:
                    await out.write(sent)
            tail = api.lines([buf], accs) if buf else b""
            await out.write(tail + api.finish(accs[0]))
            await out.write_eof()
        api.recorded(record_choices(rollout, messages, tools, {i: a for i, a in sorted(accs.items())},
                                    time.perf_counter() - t0, api=api.name))
        return out


def _upstream_message(raw: bytes) -> str:
    try:
        err = orjson.loads(raw).get("error")
        return str(err.get("message") if isinstance(err, dict) else err)
    except (orjson.JSONDecodeError, AttributeError):
        return raw[:300].decode(errors="replace")
