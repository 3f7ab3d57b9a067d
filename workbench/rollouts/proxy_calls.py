"""What the interception proxy does per API: the chat request a call becomes, the answer the harness gets
back (whole or streamed), the error body it expects, and the recording of every choice in the trace."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from workbench.records.model_reply import ChatResponse
from workbench.records.rollout import Rollout
from workbench.rollouts.client import parse_chat_data
from workbench.wire import WireError, anthropic, responses
from workbench.wire.chat_stream import ChatStreamAccumulator, sse_data


class WireAPI:
    """Chat completions as they are: the request checked, the answer passed through."""

    name = "chat"  # recorded with each call that came through another API (the call's ``extra["api"]``)
    wants_usage = False

    def bind(self, store: responses.ResponseStore, arguments: dict[str, str]) -> None:
        """The rollout's own state, given once the call's rollout is known."""

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body as it goes upstream; its messages and tools are recorded, so they are checked to be
        objects with a role (and a list of objects) here, the rest is the upstream's to judge."""
        messages = body.get("messages")
        if not isinstance(messages, list):
            raise WireError("malformed request: the body must be a JSON object with a 'messages' list", "messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise WireError(f"messages[{i}] must be an object with a string role", f"messages[{i}]")
            calls = m.get("tool_calls")
            if calls is not None and (not isinstance(calls, list) or not all(
                    isinstance(c, dict) and isinstance(c.get("function", {}), dict) for c in calls)):
                raise WireError(f"messages[{i}].tool_calls must be a list of tool calls", f"messages[{i}].tool_calls")
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise WireError("tools must be a list of objects", "tools")
        if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
            raise WireError("stream_options must be an object", "stream_options")
        return body

    def from_chat(self, data: dict[str, Any], raw: bytes) -> bytes:
        return raw

    def error(self, status: int, message: str, *, param: str | None = None, upstream: bool = False) -> web.Response:
        kind = ("upstream_error" if upstream else "server_error") if status >= 500 else \
            {404: "not_found_error", 429: "rate_limit_error"}.get(status, "invalid_request_error")
        body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
        return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")

    def start(self) -> bytes:
        return b""

    def recorded(self, messages: list[dict[str, Any]]) -> None:
        """The assistant messages one call produced, as recorded."""

    def lines(self, lines: list[bytes], accs: dict[int, ChatStreamAccumulator]) -> bytes:
        out = []
        for line in lines:
            chunk = sse_data(line)
            if chunk is None:
                out.append(line)
                continue
            choices = chunk.get("choices") or ()
            if not choices:
                accs[0].feed_chunk(chunk)
            for index in {c.get("index", 0) for c in choices if isinstance(c, dict)}:
                acc = accs.get(index)
                if acc is None:
                    acc = accs[index] = ChatStreamAccumulator(index)
                acc.feed_chunk(chunk)
            if "usage" in chunk and not self.wants_usage:  # the proxy asked for it, the harness did not
                if not choices:
                    continue
                del chunk["usage"]
                line = b"data: " + orjson.dumps(chunk)
            out.append(line)
        return b"".join(k + b"\n" for k in out)

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        return b""


ChatAPI = WireAPI


class _Translated(WireAPI):
    stream: Any = None

    def lines(self, lines: list[bytes], accs: dict[int, ChatStreamAccumulator]) -> bytes:
        out = b""
        for line in lines:
            chunk = sse_data(line)
            if chunk is not None:
                out += self.stream.on(accs[0].feed_chunk(chunk))
        return out

    def start(self) -> bytes:
        return self.stream.start()

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        return self.stream.finish(acc)


class ResponsesAPI(_Translated):
    """``/v1/responses``; ``previous_response_id`` looks up the conversations this rollout's calls stored."""

    name = "responses"

    def __init__(self, model: str) -> None:
        self.model = model
        self.store = responses.ResponseStore(capacity=0)
        self.body: dict[str, Any] = {}
        self.conversation: list[dict[str, Any]] = []

    def bind(self, store: responses.ResponseStore, arguments: dict[str, str]) -> None:
        self.store = store

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.body = body
        chat, self.conversation = responses.request_to_chat(body, self.store)
        self.stream = responses.ResponsesStream(str(body.get("model") or self.model), body, self.conversation,
                                                self.store)
        return chat

    def from_chat(self, data: dict[str, Any], raw: bytes) -> bytes:
        return orjson.dumps(responses.chat_to_response(data, str(self.body.get("model") or self.model), self.body,
                                                       self.conversation, self.store))


class MessagesAPI(_Translated):
    """``/v1/messages``, the Anthropic Messages API; errors in Anthropic's shape."""

    name = "messages"

    def __init__(self, model: str) -> None:
        self.model = model
        self.body: dict[str, Any] = {}
        self.arguments: dict[str, str] = {}

    def bind(self, store: responses.ResponseStore, arguments: dict[str, str]) -> None:
        self.arguments = arguments

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.body = body
        self.stream = anthropic.MessagesStream(str(body.get("model") or self.model), body)
        chat = anthropic.request_to_chat(body)
        for m in chat["messages"]:  # a tool_use block sent back: the arguments exactly as the model wrote them
            for tc in m.get("tool_calls") or ():
                fn = tc["function"]
                exact = self.arguments.get(tc["id"])
                if exact is not None and _same_json(exact, fn["arguments"]):
                    fn["arguments"] = exact
        return chat

    def recorded(self, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            for tc in m.get("tool_calls") or ():
                if isinstance(tc, dict) and tc.get("id") and isinstance((tc.get("function") or {}).get("arguments"), str):
                    self.arguments[tc["id"]] = tc["function"]["arguments"]

    def from_chat(self, data: dict[str, Any], raw: bytes) -> bytes:
        return orjson.dumps(anthropic.chat_to_message(data, str(self.body.get("model") or self.model), self.body))

    def error(self, status: int, message: str, *, param: str | None = None, upstream: bool = False) -> web.Response:
        where = f" ({param})" if param and param not in message else ""
        return web.Response(body=orjson.dumps(anthropic.error_body(status, message + where)), status=status,
                            content_type="application/json")


def _same_json(a: str, b: str) -> bool:
    try:
        return bool(orjson.loads(a) == orjson.loads(b))
    except orjson.JSONDecodeError:
        return a == b


def _choice_responses(data: dict[str, Any]) -> list[ChatResponse]:
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) <= 1:
        return [parse_chat_data(data)]
    usage = data.get("usage") or {}
    out = []
    order = sorted(range(len(choices)), key=lambda i: (choices[i] or {}).get("index", i) if isinstance(
        choices[i], dict) else i)
    for k, i in enumerate(order):
        c = choices[i]
        one = parse_chat_data(data, i)
        tokens = len(c.get("token_ids") or ()) or int(usage.get("completion_tokens") or 0) // len(choices)
        one.prompt_tokens = int(usage.get("prompt_tokens") or 0) if k == 0 else 0
        one.completion_tokens = tokens
        out.append(one)
    return out


def record_choices(rollout: Rollout, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   answer: dict[Any, Any], latency_s: float, *, api: str = "chat") -> list[dict[str, Any]]:
    """Record every choice of one call: ``answer`` is a chat completion body, or the stream's accumulators
    by choice index. The prompt's tokens count once, on the first choice. A call made through another
    API than chat completions says which in its ``extra["api"]`` (``completions``: its one message is
    the raw prompt, not a chat to render). Returns the recorded assistant messages."""
    if answer and all(isinstance(a, ChatStreamAccumulator) for a in answer.values()):
        usage = answer[0].usage
        resps = []
        for k, acc in enumerate(answer.values()):
            completion = len(acc.token_ids) if len(answer) > 1 else int(usage.get("completion_tokens") or 0)
            resps.append(ChatResponse(acc.message(), acc.finish_reason,
                                      int(usage.get("prompt_tokens") or 0) if k == 0 else 0, completion, acc.extra()))
    else:
        resps = _choice_responses(answer)
    for resp in resps:
        if api != "chat":
            resp.extra = {**(resp.extra or {}), "api": api}
        rollout.record_call(messages, resp, latency_s, tools=tools)
    return [r.message for r in resps]
