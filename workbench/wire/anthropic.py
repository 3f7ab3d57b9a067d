"""The Anthropic Messages API (``POST /v1/messages``) as chat completions, and chat answers as Messages.

A Messages request becomes a chat request: ``system`` the first message, ``tool_use`` blocks an assistant
message's ``tool_calls``, ``tool_result`` blocks ``tool`` messages, ``tools``/``tool_choice`` their chat
forms, ``stop_sequences`` the chat ``stop``. A chat answer becomes a ``message`` with ``text`` and
``tool_use`` content blocks, a ``stop_reason`` (``end_turn``, ``max_tokens``, ``stop_sequence``,
``tool_use``) and ``usage``; a chat stream becomes Anthropic's events (``message_start``,
``content_block_start``/``_delta``/``_stop``, ``message_delta``, ``message_stop``).
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import orjson

from workbench.wire import WireError, malformed_as_wire_error
from workbench.wire.chat_stream import ChatStreamAccumulator, Delta, sse_event

_SAMPLING = ("temperature", "top_p", "top_k", "stream")
#: Server tools, run by Anthropic's API itself (their ``type`` prefixes): left out of the chat request.
HOSTED_TOOLS = ("web_search_", "web_fetch_", "code_execution_")


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
            529: "overloaded_error"}.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _text(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise WireError(f"{where} must be a string or a list of content blocks", where)
    parts = []
    for i, b in enumerate(blocks):
        if not isinstance(b, dict) or b.get("type") != "text":
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            raise WireError(f"{where}[{i}] is a {kind!r} block; only text blocks are accepted here", f"{where}[{i}]")
        parts.append(str(b.get("text", "")))
    return "".join(parts)


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    src = block.get("source") or {}
    if not isinstance(src, dict):
        raise WireError(f"{where}.source must be an object (a base64 or url source)", f"{where}.source")
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
    elif src.get("type") == "url":
        url = str(src.get("url", ""))
    else:
        raise WireError(f"{where}: an image block needs a base64 or url source", where)
    return {"type": "image_url", "image_url": {"url": url}}


def _user_messages(content: Any, where: str) -> list[dict[str, Any]]:
    """One user turn: its ``tool_result`` blocks as tool messages first, then its text and images."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    if not isinstance(content, list):
        raise WireError(f"{where}.content must be a string or a list of content blocks", f"{where}.content")
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for i, b in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(b.get("text", ""))})
        elif kind == "image":
            parts.append(_image(b, at))
        elif kind == "tool_result":
            body = b.get("content", "")
            text = body if isinstance(body, str) else "".join(
                str(x.get("text", "")) for x in body if isinstance(x, dict) and x.get("type") == "text")
            if b.get("is_error"):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": str(b.get("tool_use_id", "")), "content": text})
        else:
            raise WireError(f"{at}: a {kind!r} block is not supported in a user turn "
                            "(text, image and tool_result are)", at)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if only_text else parts})
    return out


def _assistant_message(content: Any, where: str) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    if not isinstance(content, list):
        raise WireError(f"{where}.content must be a string or a list of content blocks", f"{where}.content")
    text, calls = [], []
    for i, b in enumerate(content):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            text.append(str(b.get("text", "")))
        elif kind == "tool_use":
            calls.append({"id": str(b.get("id", "")), "type": "function",
                          "function": {"name": str(b.get("name", "")),
                                       "arguments": tool_arguments(b.get("input") or {})}})
        elif kind in ("thinking", "redacted_thinking"):
            continue  # a chat upstream takes no reasoning back
        else:
            raise WireError(f"{where}.content[{i}]: a {kind!r} block is not supported in an assistant turn",
                            f"{where}.content[{i}]")
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        msg["tool_calls"] = calls
    return msg


def tool_arguments(value: Any) -> str:
    """A ``tool_use`` block's ``input`` as a chat tool call's arguments, written as the servers behind the
    proxy write them (Python's ``json.dumps``: the embedded server's and vLLM's tool-call parsers), so a
    conversation sent back renders as it was sampled."""
    return json.dumps(value, ensure_ascii=False)


def _tools(tools: Any) -> list[dict[str, Any]]:
    if not isinstance(tools, list):
        raise WireError("tools must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        if isinstance(t, dict) and str(t.get("type", "")).startswith(HOSTED_TOOLS):
            continue  # run at Anthropic: the model behind the call has only the tools the harness runs
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or "input_schema" not in t:
            raise WireError(f"tools[{i}] must be a client tool with a name and an input_schema", f"tools[{i}]")
        fn = {"name": t["name"], **({"description": t["description"]} if t.get("description") else {}),
              "parameters": t["input_schema"]}  # OpenAI's key order: a template renders the tool as JSON
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> tuple[Any, bool | None]:
    """(chat tool_choice, parallel_tool_calls) for an Anthropic ``tool_choice``."""
    if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
        raise WireError("tool_choice must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice")
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice["type"]
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise WireError("tool_choice of type \"tool\" needs the tool's name", "tool_choice.name")
        return {"type": "function", "function": {"name": choice["name"]}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[kind], parallel


def count_request_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A ``/v1/messages/count_tokens`` body (a Messages request without ``max_tokens``) as the chat
    request whose prompt it counts."""
    chat = request_to_chat({**body, "max_tokens": 1})
    del chat["max_tokens"]
    return chat


@malformed_as_wire_error
def request_to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages request body as a chat-completions request body."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise WireError("messages must be a non-empty list", "messages")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise WireError("max_tokens is required: a positive integer", "max_tokens")
    chat: list[dict[str, Any]] = []
    if body.get("system"):
        chat.append({"role": "system", "content": _text(body["system"], "system")})
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role == "user":
            chat.extend(_user_messages(m.get("content"), where))
        elif role == "assistant":
            chat.append(_assistant_message(m.get("content"), where))
        elif role == "system":  # a system turn inside the conversation (Claude Code sends them)
            chat.append({"role": "system", "content": _text(m.get("content", ""), f"{where}.content")})
        else:
            raise WireError(f"{where}.role must be \"user\", \"assistant\" or \"system\"", f"{where}.role")
    out: dict[str, Any] = {"messages": chat, "max_tokens": max_tokens}
    if body.get("model"):
        out["model"] = body["model"]
    for key in _SAMPLING:
        if body.get(key) is not None:
            out[key] = body[key]
    stops = body.get("stop_sequences")
    if stops:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise WireError("stop_sequences must be a list of strings", "stop_sequences")
        out["stop"] = stops
    if body.get("tools"):
        out["tools"] = _tools(body["tools"])
        if body.get("tool_choice") is not None:
            out["tool_choice"], parallel = _tool_choice(body["tool_choice"])
            if parallel is not None:
                out["parallel_tool_calls"] = parallel
    return out


def _stop_reason(finish: str | None, stop_reason: Any, stops: list[str]) -> tuple[str, str | None]:
    if finish == "length":
        return "max_tokens", None
    if finish == "tool_calls":
        return "tool_use", None
    if isinstance(stop_reason, str) and stop_reason in stops:
        return "stop_sequence", stop_reason
    return "end_turn", None


def _tool_input(arguments: str) -> Any:
    try:
        value = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return {"_raw_arguments": arguments}  # the model wrote arguments that are not JSON: kept, visibly
    return value if isinstance(value, dict) else {"value": value}


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": int(usage.get("prompt_tokens") or 0), "output_tokens": int(usage.get("completion_tokens") or 0),
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(12)


def chat_to_message(chat: dict[str, Any], model: str, request: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed chat completion body as a Messages ``message``."""
    choice = (chat.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    blocks: list[dict[str, Any]] = []
    if msg.get("content"):
        blocks.append({"type": "text", "text": msg["content"]})
    for tc in msg.get("tool_calls") or ():
        fn = tc.get("function") or {}
        blocks.append({"type": "tool_use", "id": tc.get("id") or "toolu_" + secrets.token_hex(12),
                       "name": fn.get("name", ""), "input": _tool_input(fn.get("arguments", ""))})
    reason, sequence = _stop_reason(choice.get("finish_reason"), choice.get("stop_reason"),
                                    request.get("stop_sequences") or [])
    return {"id": new_message_id(), "type": "message", "role": "assistant", "model": model, "content": blocks,
            "stop_reason": reason, "stop_sequence": sequence, "usage": _usage(chat.get("usage") or {})}


class MessagesStream:
    """Anthropic's stream events for a chat stream, chunk by chunk."""

    def __init__(self, model: str, request: dict[str, Any]) -> None:
        self.model, self.request = model, request
        self.id = new_message_id()
        self.block = -1  # index of the open content block
        self.open_kind: str | None = None
        self.tool_blocks: dict[int, int] = {}  # chat tool-call index -> content block index

    def start(self) -> bytes:
        message: dict[str, Any] = {"id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": _usage({})}
        return sse_event("message_start", {"type": "message_start", "message": message}) + \
            sse_event("ping", {"type": "ping"})

    def _close(self) -> bytes:
        if self.open_kind is None:
            return b""
        self.open_kind = None
        return sse_event("content_block_stop", {"type": "content_block_stop", "index": self.block})

    def _open(self, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block += 1
        self.open_kind = block["type"]
        return out + sse_event("content_block_start", {"type": "content_block_start", "index": self.block,
                                                       "content_block": block})

    def on(self, delta: Delta) -> bytes:
        out = b""
        if delta.text:
            if self.open_kind != "text":
                out += self._open({"type": "text", "text": ""})
            out += sse_event("content_block_delta", {"type": "content_block_delta", "index": self.block,
                                                     "delta": {"type": "text_delta", "text": delta.text}})
        for td in delta.tools:
            if td.index not in self.tool_blocks:
                out += self._open({"type": "tool_use", "id": td.id or "toolu_" + secrets.token_hex(12),
                                   "name": td.name, "input": {}})
                self.tool_blocks[td.index] = self.block
            if td.arguments and self.tool_blocks[td.index] == self.block:
                out += sse_event("content_block_delta", {"type": "content_block_delta", "index": self.block,
                                                         "delta": {"type": "input_json_delta",
                                                                   "partial_json": td.arguments}})
        return out

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        out = self._close()
        reason, sequence = _stop_reason(acc.finish_reason, acc.stop_reason, self.request.get("stop_sequences") or [])
        usage = _usage(acc.usage)
        out += sse_event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reason, "stop_sequence": sequence},
                                           "usage": {"output_tokens": usage["output_tokens"],
                                                     "input_tokens": usage["input_tokens"]}})
        return out + sse_event("message_stop", {"type": "message_stop"})
