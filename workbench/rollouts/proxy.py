"""The interception proxy: every rollout gets ``http://127.0.0.1:PORT/r/<rollout>~<secret>/v1``.

Harness code written for the plain OpenAI API — or an external agent program that only sees
``OPENAI_BASE_URL`` or ``ANTHROPIC_BASE_URL`` (``/r/<rollout>~<secret>``) — calls it like any endpoint:
chat completions, completions, the Responses API (``/v1/responses``, and ``GET /v1/responses/{id}``) and
the Anthropic Messages API (``/v1/messages``, and ``/v1/messages/count_tokens``), streamed or not. The
secret is the rollout's alone (the sandbox learns only its own URL): a URL naming another rollout, or a
finished one, is a 404. The proxy forwards to the run's upstream (the embedded server,
vLLM, or any OpenAI-compatible API) as chat completions (:mod:`workbench.wire` translates), with what
training needs (token ids, logprobs, the run's sampling settings) where the upstream supports it, and
records every call, every choice of it, into the rollout's token-exact trace. What the harness gets
back has the shape it asked for: the harness never knows.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from workbench.fsutil import atomic_write
from workbench.records.model_reply import ModelError
from workbench.records.rollout import Rollout
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy_calls import ChatAPI, MessagesAPI, ResponsesAPI, WireAPI
from workbench.rollouts.proxy_relay import relay_completions, serve_call
from workbench.wire import WireError, anthropic
from workbench.wire.responses import ResponseStore

#: The answer to a URL that names no running rollout, or names one without its secret.
UNKNOWN = "no running rollout behind this URL (each rollout calls only the base URL it was given)"


@dataclass(slots=True)
class _Live:
    """A registered rollout and what its calls keep between them, freed when it is unregistered."""

    rollout: Rollout
    # previous_response_id stays within the rollout
    responses: ResponseStore = field(default_factory=lambda: ResponseStore(capacity=256))
    # each tool call's arguments as the model wrote them (a Messages tool_use sent back carries them
    # parsed, as ``input``; the call going upstream gets the exact text again)
    tool_arguments: dict[str, str] = field(default_factory=dict)


#: Between a rollout's id and its secret in the rollout's URL segment (``/r/<id>~<secret>/v1``).
SECRET_SEP = "~"


class InterceptionProxy:
    """An aiohttp server in the run's event loop; rollouts are registered while they run.

    Each rollout's URL carries a secret (an HMAC of its id under a key the proxy draws at start), so a
    program that knows its own URL cannot reach another rollout's: a request whose secret does not
    match, or whose rollout is not running, is a 404 that allocates nothing."""

    def __init__(self, client: ChatClient, upstream: str, model: str, params: dict[str, Any],
                 host: str = "127.0.0.1") -> None:
        self.client, self.upstream, self.model, self.params, self.host = client, upstream.rstrip("/"), model, params, host
        self.rollouts: dict[str, _Live] = {}
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.requests = 0
        self._key = secrets.token_bytes(32)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, port: int = 0) -> InterceptionProxy:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/r/{rid}/v1/chat/completions", self._chat)
        app.router.add_get("/r/{rid}/v1/models", self._models)
        app.router.add_get("/r/{rid}/v1/models/{model_id}", self._model)
        app.router.add_post("/r/{rid}/v1/completions", self._completions)
        app.router.add_post("/r/{rid}/v1/responses", self._responses)
        app.router.add_get("/r/{rid}/v1/responses/{response_id}", self._get_response)
        app.router.add_post("/r/{rid}/v1/messages", self._messages)
        app.router.add_post("/r/{rid}/v1/messages/count_tokens", self._count_tokens)
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
        atomic_write(folder / "bridge.py", src.read_bytes(), mode=0o644)
        await self.serve_unix(folder / "proxy.sock")

    def _secret(self, rollout_id: str) -> str:
        return hmac.new(self._key, rollout_id.encode(), hashlib.sha256).hexdigest()[:32]

    def url_for(self, rollout_id: str) -> str:
        """The rollout's base URL, its secret included: give it only to that rollout."""
        return f"http://{self.host}:{self.port}/r/{rollout_id}{SECRET_SEP}{self._secret(rollout_id)}/v1"

    def register(self, rollout: Rollout) -> Callable[[], None]:
        live = self.rollouts[rollout.id] = _Live(rollout)

        def unregister() -> None:
            if self.rollouts.get(rollout.id) is live:
                del self.rollouts[rollout.id]

        return unregister

    # -- handlers ------------------------------------------------------------------------------
    def _live(self, request: web.Request) -> _Live | None:
        """The running rollout the URL names, when its secret matches (compared in constant time)."""
        rid, sep, secret = request.match_info["rid"].rpartition(SECRET_SEP)
        if not sep:
            return None
        ok = hmac.compare_digest(secret.encode(), self._secret(rid).encode())
        return self.rollouts.get(rid) if ok else None

    def _model_entry(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": 0, "owned_by": "workbench-proxy"}

    async def _models(self, request: web.Request) -> web.Response:
        if self._live(request) is None:
            return ChatAPI().error(404, UNKNOWN)
        return web.json_response({"object": "list", "data": [self._model_entry()]})

    async def _model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{id}``: the run's model, whatever name the harness asks for (every call goes to it)."""
        if self._live(request) is None:
            return ChatAPI().error(404, UNKNOWN)
        return web.json_response({**self._model_entry(), "id": request.match_info["model_id"]})

    async def _get_response(self, request: web.Request) -> web.Response:
        """``GET /v1/responses/{id}``: a response of this rollout's, as it was answered."""
        live = self._live(request)
        if live is None:
            return ChatAPI().error(404, UNKNOWN)
        rid = request.match_info["response_id"]
        found = live.responses.response(rid)
        if found is None:
            return ChatAPI().error(404, f"No response with id '{rid}' found.", param="response_id")
        return web.Response(body=orjson.dumps(found), content_type="application/json")

    def prepare(self, body: dict[str, Any], rollout: Rollout) -> dict[str, Any]:
        # The run decides the model and the sampling settings; the harness's own values are replaced.
        return {**body, **self.params, **rollout.params, "model": self.model}

    async def _body(self, request: web.Request, api: WireAPI) -> tuple[_Live, dict[str, Any]] | web.Response:
        self.requests += 1
        live = self._live(request)
        if live is None:
            return api.error(404, UNKNOWN)
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return api.error(400, f"malformed request: the body is not JSON ({e})")
        if not isinstance(body, dict):
            return api.error(400, "malformed request: the body must be a JSON object")
        api.bind(live.responses, live.tool_arguments)
        return live, body

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, ChatAPI())

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, ResponsesAPI(self.model))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, MessagesAPI(self.model))

    async def _count_tokens(self, request: web.Request) -> web.Response:
        """``POST /v1/messages/count_tokens``: the prompt's tokens as the upstream renders it (its
        ``/tokenize``, as the embedded server and vLLM serve it)."""
        api = MessagesAPI(self.model)
        got = await self._body(request, api)
        if isinstance(got, web.Response):
            return got
        try:
            chat = anthropic.count_request_to_chat(got[1])
        except WireError as e:
            return api.error(400, e.message, param=e.param)
        root = self.upstream.removesuffix("/v1")
        payload = {"model": self.model, "messages": chat["messages"], "add_generation_prompt": True,
                   **({"tools": chat["tools"]} if chat.get("tools") else {})}
        try:
            data = orjson.loads(await self.client.post_json(root + "/tokenize", payload, self.model))
            count = int(data["count"] if "count" in data else len(data["tokens"]))
        except ModelError as e:
            return api.error(e.status if e.status and e.status < 500 else 502,
                             f"the upstream cannot count tokens (its /tokenize: {e.message})", upstream=True)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return api.error(502, "the upstream's /tokenize answered without a token count", upstream=True)
        return web.json_response({"input_tokens": count})

    async def _serve(self, request: web.Request, api: WireAPI) -> web.StreamResponse:
        """One call in any API: translated to a chat request, sent upstream, recorded, answered in kind."""
        got = await self._body(request, api)
        if isinstance(got, web.Response):
            return got
        return await serve_call(self, request, api, got[0].rollout, got[1])

    async def _completions(self, request: web.Request) -> web.Response:
        api = ChatAPI()
        got = await self._body(request, api)
        if isinstance(got, web.Response):
            return got
        return await relay_completions(self, got[0].rollout, api, got[1])
