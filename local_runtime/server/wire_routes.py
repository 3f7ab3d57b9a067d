"""``/v1/responses`` (the OpenAI Responses API) and ``/v1/messages`` (the Anthropic Messages API) on the
embedded server: each request is translated to a chat request (:mod:`workbench.wire`), runs exactly as
``/v1/chat/completions`` runs it — sampling, constraints, tool calls — and the answer is translated back,
whole or streamed. ``previous_response_id`` finds the conversations of the server's recent responses, and
``GET /v1/responses/{id}`` the responses themselves; ``/v1/messages/count_tokens`` counts a Messages
request's prompt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError
from workbench_local.server import http_app
from workbench_local.server.openai_api import ChatRequest, validation_fields, validation_message
from workbench_local.server.state import state_of

from workbench.wire import WireError, anthropic, responses
from workbench.wire.chat_stream import ChatStreamAccumulator, Delta


def _chat_request(chat: dict[str, Any]) -> ChatRequest:
    if chat.get("stream"):
        chat["stream_options"] = {"include_usage": True}  # the translated stream ends with the usage
    try:
        return ChatRequest.model_validate(chat)
    except ValidationError as e:
        param, code = validation_fields(e)
        raise http_app.HTTPError(400, validation_message(e), param=param, code=code) from None


class _ResponsesTranslation:
    def __init__(self, model: str, body: dict[str, Any], conversation: list[dict[str, Any]],
                 store: responses.ResponseStore) -> None:
        self.model, self.body, self.conversation, self.store = model, body, conversation, store
        self.stream = responses.ResponsesStream(model, body, conversation, store)

    def whole(self, chat: dict[str, Any]) -> dict[str, Any]:
        return responses.chat_to_response(chat, self.model, self.body, self.conversation, self.store)

    def start(self) -> bytes:
        return self.stream.start()

    def on(self, delta: Delta) -> bytes:
        return self.stream.on(delta)

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        return self.stream.finish(acc)


class _MessagesTranslation:
    def __init__(self, model: str, body: dict[str, Any]) -> None:
        self.model, self.body = model, body
        self.stream = anthropic.MessagesStream(model, body)

    def whole(self, chat: dict[str, Any]) -> dict[str, Any]:
        return anthropic.chat_to_message(chat, self.model, self.body)

    def start(self) -> bytes:
        return self.stream.start()

    def on(self, delta: Delta) -> bytes:
        return self.stream.on(delta)

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        return self.stream.finish(acc)


async def create_response(request: web.Request) -> web.StreamResponse:
    body = await http_app.read_json(request)
    state = state_of(request)
    store = state.responses
    try:
        chat, conversation = responses.request_to_chat(body, store)
    except WireError as e:
        raise http_app.HTTPError(400, e.message, param=e.param, code="invalid_value") from None
    req = _chat_request(chat)
    model = http_app.resolve_model(state.engine, req.model)
    return await http_app.answer_chat(request, req, _ResponsesTranslation(model, body, conversation, store))


async def _messages_request(request: web.Request, translate: Callable[[Any], dict[str, Any]]) -> tuple[Any, ChatRequest]:
    """A Messages API body and the chat request ``translate`` makes of it; a body it cannot read is a 400."""
    body = await http_app.read_json(request)
    try:
        chat = translate(body)
    except WireError as e:
        raise http_app.HTTPError(400, e.message, param=e.param, code="invalid_value") from None
    return body, _chat_request(chat)


async def create_message(request: web.Request) -> web.StreamResponse:
    """Errors in Anthropic's shape (``{"type": "error", "error": {...}}``), which its SDK reads."""
    try:
        body, req = await _messages_request(request, anthropic.request_to_chat)
        model = http_app.resolve_model(state_of(request).engine, req.model)
        return await http_app.answer_chat(request, req, _MessagesTranslation(model, body))
    except http_app.HTTPError as e:
        return _anthropic_error(e)


async def get_response(request: web.Request) -> web.Response:
    """``GET /v1/responses/{id}``: one of the server's recent responses, as it was answered."""
    rid = request.match_info["response_id"]
    found = state_of(request).responses.response(rid)
    if found is None:
        raise http_app.HTTPError(404, f"No response with id '{rid}' found.", param="response_id")
    return http_app.json_response(found)


async def count_tokens(request: web.Request) -> web.Response:
    """``POST /v1/messages/count_tokens``: the tokens of the prompt the request's messages, system and
    tools render to (``{"input_tokens": N}``); errors in Anthropic's shape."""
    try:
        _, req = await _messages_request(request, anthropic.count_request_to_chat)
        state = state_of(request)
        http_app.resolve_model(state.engine, req.model)
        ids, _ = http_app.render_chat(state.engine.lm, req, state.prompts)
        return http_app.json_response({"input_tokens": len(ids)})
    except http_app.HTTPError as e:
        return _anthropic_error(e)


def _anthropic_error(e: http_app.HTTPError) -> web.Response:
    where = f" ({e.param})" if e.param and e.param not in e.message else ""
    return web.Response(body=orjson.dumps(anthropic.error_body(e.status, e.message + where)), status=e.status,
                        content_type="application/json")


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/responses", create_response)
    app.router.add_get("/v1/responses/{response_id}", get_response)
    app.router.add_post("/v1/messages", create_message)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
