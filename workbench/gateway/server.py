"""The gateway server: a product's SDK calls it as it would call OpenAI or Anthropic, with a gateway key.

``POST /v1/chat/completions``, ``/v1/responses`` (OpenAI; ``Authorization: Bearer KEY``) and ``/v1/messages``
(Anthropic; ``x-api-key: KEY``, or a bearer token), streamed or not, and ``GET /v1/models``. The request's
``model`` names a route (``routes.py``; ``default`` serves any other name when set); the route's arm for the
call is drawn by weight, and the call goes to that registered model through the interception proxy's relays
(``workbench.rollouts.proxy_relay``, the wire translations of ``workbench.wire``), answered in the API it came
in; a route's shadow answers the same call afterwards, recorded beside it and never returned. The routes
are a :class:`~workbench.gateway.live_routes.RouteBook`: ``gateway promote`` changes a split while it serves.
Each answer carries ``X-Workbench-Arm`` (the model that served it) and ``X-Workbench-Response-Id`` (the
exchange's id, which ``POST /v1/feedback`` takes). A missing, unknown or revoked key is a 401 in the API's own
error shape; the provider's key never leaves Workbench. Every served exchange is handed to the recorder
(``recorder.py``) after the answer.
"""

from __future__ import annotations

import asyncio
import collections
import math
import random
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from workbench.records.rollout import Rollout
from workbench.records.task import Task
from workbench.rollouts.client import ChatClient
from workbench.rollouts.proxy_calls import ChatAPI, MessagesAPI, ResponsesAPI, WireAPI, record_choices
from workbench.rollouts.proxy_relay import serve_call
from workbench.store.prices import Price
from workbench.store.traffic import add_feedback, traffic_answer, traffic_rollout_app
from workbench.wire.responses import ResponseStore

from .keys import KeyRing
from .live_routes import RouteBook
from .recorder import TrafficRecorder
from .routes import Route

SESSION_HEADER = "X-Workbench-Session"
ARM_HEADER = "X-Workbench-Arm"
RESPONSE_HEADER = "X-Workbench-Response-Id"
_HEADERS = "workbench.headers"
#: How many served exchanges' ids are remembered for feedback (older ones are looked up in the store).
_REMEMBERED = 100_000


@dataclass(slots=True)
class Upstream:
    """One registered model the gateway forwards to (what the relays need of it), and its price per token when
    one is known (the model's own, from `models add`, else the store's table)."""

    name: str
    client: ChatClient
    upstream: str
    model: str
    price: Price | None = None

    @property
    def provider(self) -> str:
        """Whom the exchange's cost is owed to, in the cost ledger ("" when unpriced)."""
        return self.price.provider if self.price is not None else ""

    def priced(self, rollout: Rollout) -> None:
        """Put the price of the exchange's tokens (prompt caching included) in its usage."""
        if self.price is not None:
            rollout.usage.cost_usd = self.price.cost_of_calls(
                rollout.usage.prompt_tokens, rollout.usage.completion_tokens, rollout.calls)

    def exchange(self, rid: str) -> Rollout:
        """The rollout one call to this model is recorded in (its task is the call's own, filled as it runs)."""
        return Rollout(id=rid, task=Task(prompt="", id=rid), sample_index=0, client=self.client,
                       base_url=self.upstream, model=self.model, params={})

    def prepare(self, body: dict[str, Any], rollout: Rollout) -> dict[str, Any]:
        """The product's request as it goes upstream: its own settings, the model's id."""
        return {**body, "model": self.model}


@dataclass(slots=True)
class Gateway:
    book: RouteBook
    upstreams: dict[str, Upstream]
    keys: KeyRing
    recorder: TrafficRecorder | None = None
    default: str | None = None
    rng: random.Random = field(default_factory=random.Random)
    responses: dict[str, ResponseStore] = field(default_factory=dict)  # app -> its Responses API conversations
    _served_to: collections.OrderedDict[str, str] = field(default_factory=collections.OrderedDict)  # id -> app
    _aliases: collections.OrderedDict[str, str] = field(default_factory=collections.OrderedDict)  # answer id -> id
    served: int = 0
    refused: int = 0
    shadow_failed: int = 0
    _shadows: set[asyncio.Future[None]] = field(default_factory=set)
    port: int = 0
    _runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handler(_ChatAPI))
        app.router.add_post("/v1/responses", self._handler(ResponsesAPI))
        app.router.add_post("/v1/messages", self._handler(MessagesAPI))
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/feedback", self._feedback)
        app.on_response_prepare.append(_add_headers)
        return app

    @property
    def routes(self) -> dict[str, Route]:
        return self.book.current()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Gateway:
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._shadows:
            await asyncio.gather(*self._shadows, return_exceptions=True)
        for up in self.upstreams.values():
            await up.client.close()

    # -- requests ------------------------------------------------------------------------------
    def _app_of(self, request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        key = auth[7:].strip() if auth[:7].lower() == "bearer " else request.headers.get("x-api-key")
        return self.keys.app_of(key)

    def _handler(self, make: Callable[..., WireAPI]) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._serve(request, make)

        return handle

    async def _serve(self, request: web.Request, make: Callable[..., WireAPI]) -> web.StreamResponse:
        probe = _api(make, "")
        app = self._app_of(request)
        if app is None:
            self.refused += 1
            return probe.error(401, "a valid gateway key is required (`workbench gateway keys add APP` makes one); "
                                    "send it as the API key")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return probe.error(400, f"malformed request: the body is not JSON ({e})")
        if not isinstance(body, dict):
            return probe.error(400, "malformed request: the body must be a JSON object")
        asked = str(body.get("model") or "")
        routes = self.routes
        route = routes.get(asked) or (routes.get(self.default) if self.default else None)
        if route is None:
            return probe.error(404, f"the gateway has no route {asked!r}; its routes: "
                                    f"{', '.join(sorted(routes)) or 'none'}", param="model")
        arm = route.pick(self.rng)
        up = self.upstreams[arm.model]
        api = _api(make, asked)
        api.bind(self.responses.setdefault(app, ResponseStore(capacity=4096)), {})
        rid = f"gwr-{uuid.uuid4().hex}"
        request[_HEADERS] = {ARM_HEADER: arm.model, RESPONSE_HEADER: rid}
        rollout = up.exchange(rid)
        response = await serve_call(up, request, api, rollout, body)
        self.served += 1
        self._served_to[rid] = app
        answer_id = _answer_id(api, response)
        if answer_id:
            self._aliases[answer_id] = rid
        while len(self._served_to) > _REMEMBERED:
            self._served_to.popitem(last=False)
        while len(self._aliases) > _REMEMBERED:
            self._aliases.popitem(last=False)
        if self.recorder is not None and rollout.calls and rollout.last_request is not None:
            up.priced(rollout)
            session = self.recorder.session_of(request.headers.get(SESSION_HEADER), rollout.last_request)
            kept = self.recorder.record(app=app, route=route.name, spec=route.spec, arm=arm.model, api=api.name,
                                        session=session, messages=rollout.last_request, rollout=rollout,
                                        response_id=rid, answer_id=answer_id, provider=up.provider)
            if route.shadow is not None and kept:  # a shadow answers the calls that are recorded, paired
                shadow = asyncio.ensure_future(self._shadow(app, route, make, asked, body, session, rid))
                self._shadows.add(shadow)
                shadow.add_done_callback(self._shadows.discard)
        return response

    async def _shadow(self, app: str, route: Route, make: Callable[..., WireAPI], asked: str, body: dict[str, Any],
                      session: str, primary: str) -> None:
        """The shadow's answer to the same call, after the product got the arm's: recorded beside it (the same
        session, ``shadow_of`` the answer returned), never returned. A failure is counted, nothing more."""
        assert route.shadow is not None and self.recorder is not None
        up = self.upstreams[route.shadow]
        api = _api(make, asked)
        api.bind(ResponseStore(capacity=16), {})
        rid = f"gwr-{uuid.uuid4().hex}"
        rollout = up.exchange(rid)
        try:
            chat = api.to_chat(body)
            payload = {**up.prepare(chat, rollout), "stream": False}
            payload.pop("stream_options", None)
            t0 = time.perf_counter()
            data = orjson.loads(await up.client.complete(up.upstream, payload, up.model))
            record_choices(rollout, chat["messages"], chat.get("tools"), data, time.perf_counter() - t0, api=api.name)
            up.priced(rollout)
        except Exception:  # noqa: BLE001 - the shadow never troubles the product
            self.shadow_failed += 1
            return
        self.recorder.record(app=app, route=route.name, spec=route.spec, arm=route.shadow, api=api.name,
                             session=session, messages=chat["messages"], rollout=rollout, response_id=rid,
                             shadow_of=primary, provider=up.provider)

    async def _feedback(self, request: web.Request) -> web.Response:
        """``POST /v1/feedback``: a judgement of an answer this app was served (``response_id``: the
        ``X-Workbench-Response-Id`` it got, or the answer's own id) or of a session it named (``session``):
        ``score``, ``label``, ``comment``."""
        api = ChatAPI()
        app = self._app_of(request)
        if app is None:
            self.refused += 1
            return api.error(401, "a valid gateway key is required")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError as e:
            return api.error(400, f"malformed request: the body is not JSON ({e})")
        got = check_feedback(body)
        if isinstance(got, tuple):
            return api.error(400, got[0], param=got[1])
        recorder = self.recorder
        if recorder is None:
            return api.error(503, "this gateway records nothing (it has no store), so it keeps no feedback")
        rid, session = got.get("response_id"), got.get("session")
        if rid is not None:  # the answer's own id (chatcmpl-…, msg_…, resp_…) names its exchange too
            rid = got["response_id"] = self._aliases.get(rid) or traffic_answer(recorder.store.conn, rid) or rid
        known = (self._served_to.get(rid) == app or traffic_rollout_app(recorder.store.conn, rid) == app) \
            if rid is not None else recorder.knows_session(app, str(session))
        if not known:
            what = f"response {rid!r}" if rid is not None else f"session {session!r}"
            return api.error(404, f"no {what} was served to this app", param="response_id" if rid else "session")
        try:
            fid = add_feedback(recorder.store.conn, app=app, **got)
        except sqlite3.Error as e:
            return api.error(503, f"the feedback could not be kept: the store cannot be written ({e})")
        return web.json_response({"ok": True, "id": fid})

    async def _models(self, request: web.Request) -> web.Response:
        if self._app_of(request) is None:
            return _ChatAPI().error(401, "a valid gateway key is required")
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "workbench-gateway"} for name in self.routes]})


def _api(make: Callable[..., WireAPI], model: str) -> WireAPI:
    """One call's API object (the translated APIs echo the model the product asked for)."""
    return make() if make is _ChatAPI else make(model)


class _ChatAPI(ChatAPI):
    """Chat completions as the proxy serves them, keeping the id of a streamed answer (its chunks')."""

    seen_id: str | None = None

    def lines(self, lines: list[bytes], accs: dict[int, Any]) -> bytes:
        out = super().lines(lines, accs)
        if self.seen_id is None and 0 in accs:
            self.seen_id = accs[0].id
        return out


def _answer_id(api: WireAPI, response: web.StreamResponse) -> str | None:
    """The id the answer carries in its own API (``chatcmpl-…``, ``msg_…``, ``resp_…``)."""
    if isinstance(response, web.Response):
        if response.status != 200 or not isinstance(response.body, bytes):
            return None
        try:
            found = orjson.loads(response.body).get("id")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return found if isinstance(found, str) and found else None
    stream = getattr(api, "stream", None)
    found = getattr(stream, "id", None) if stream is not None else getattr(api, "seen_id", None)
    return found if isinstance(found, str) and found else None


#: Of the fields of a feedback body: the longest text each may be.
_LIMITS = {"response_id": 200, "session": 200, "label": 200, "comment": 10_000}


def check_feedback(body: Any) -> dict[str, Any] | tuple[str, str | None]:
    """The feedback a body gives, or (what is wrong with it, the field)."""
    if not isinstance(body, dict):
        return "malformed request: the body must be a JSON object", None
    unknown = sorted(set(body) - {*_LIMITS, "score"})
    if unknown:
        return f"unknown field {unknown[0]!r}: feedback takes response_id or session, score, label, comment", unknown[0]
    for name, limit in _LIMITS.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, str) or not value or len(value) > limit):
            return f"{name} must be a non-empty string of at most {limit} characters", name
    if ("response_id" in body) == ("session" in body):
        return "give exactly one of response_id (an X-Workbench-Response-Id) and session", "response_id"
    score = body.get("score")
    number = isinstance(score, int | float) and not isinstance(score, bool)
    if score is not None and (not number or not math.isfinite(score)):
        return "score must be a finite number", "score"
    if score is None and not body.get("label") and not body.get("comment"):
        return "feedback needs a score, a label or a comment", "score"
    return {k: (float(v) if k == "score" else v) for k, v in body.items() if v is not None}


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    for k, v in (request.get(_HEADERS) or {}).items():
        response.headers[k] = v


__all__ = ["ARM_HEADER", "Gateway", "RESPONSE_HEADER", "SESSION_HEADER", "Upstream"]
