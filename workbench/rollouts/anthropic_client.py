"""Chat requests as Anthropic Messages requests, and Messages answers as chat answers: the model client's side.

:mod:`workbench.wire.anthropic` translates the other direction (a Messages request arriving at the proxy or
``workbench serve`` becomes a chat request). Here :class:`~workbench.rollouts.client.ChatClient` with
``provider="anthropic"`` speaks ``POST /v1/messages`` itself:

- :func:`to_messages_request`: OpenAI chat ``messages``/``tools``/params as a Messages request body (system
  messages the top-level ``system``; ``tool_calls`` ``tool_use`` blocks; ``tool`` messages ``tool_result``
  blocks in a user turn; consecutive same-role turns merged, as the API requires roles to alternate).
- :func:`from_messages_response`: a ``message`` body as a :class:`~workbench.records.model_reply.ChatResponse`.
- :func:`classify_anthropic_status`: an HTTP error and Anthropic's error body as a ``ModelError`` kind.

- :func:`as_chat_completion`: a ``message`` body as a chat completion body (the proxy's and the gateway's
  relays answer any API from one).

Not streamed: one request, one JSON answer.
"""

from __future__ import annotations

from typing import Any

import orjson

from workbench.records.model_reply import ChatResponse, ModelError

ANTHROPIC_VERSION = "2023-06-01"
#: Anthropic requires ``max_tokens``; a request without it gets this.
DEFAULT_MAX_TOKENS = 1024
#: OpenAI's (and vLLM's) request keys the Messages API has no counterpart for: left out of the request.
OPENAI_ONLY = frozenset({
    "logprobs", "top_logprobs", "return_token_ids", "seed", "presence_penalty", "frequency_penalty",
    "logit_bias", "user", "response_format", "stream_options", "chat_template_kwargs", "skip_special_tokens",
    "include_stop_str_in_output", "repetition_penalty", "min_p", "min_tokens", "reasoning_effort",
    "parallel_tool_calls", "n", "max_completion_tokens", "stop", "tool_choice", "max_tokens",
})
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
          "refusal": "content_filter", "pause_turn": "stop"}


def _bad(message: str) -> ModelError:
    return ModelError("bad_request", f"cannot send this request to the Anthropic Messages API: {message}")


# -- request -------------------------------------------------------------------------------------------------


def _image(url: str, where: str) -> dict[str, Any]:
    if url.startswith("data:"):
        head, sep, data = url[5:].partition(",")
        media, _, enc = head.partition(";")
        if not sep or enc != "base64":
            raise _bad(f"{where}: an image data: URL must be base64 (data:image/png;base64,...)")
        return {"type": "image", "source": {"type": "base64", "media_type": media or "image/png", "data": data}}
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _bad(f"{where}: an image URL must be a data: URL or http(s)")


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Chat message content (a string or a list of parts) as Anthropic content blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(f"{where}.content must be a string or a list of parts")
    out = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if part.get("text"):
                out.append({"type": "text", "text": str(part["text"])})
        elif kind == "image_url":
            img = part.get("image_url")
            url = img.get("url") if isinstance(img, dict) else img
            out.append(_image(str(url or ""), f"{where}.content[{i}]"))
        else:
            raise _bad(f"{where}.content[{i}]: a {kind!r} part has no Messages form (text and image_url do)")
    return out


def _text_of(content: Any, where: str) -> str:
    blocks = _blocks(content, where)
    if any(b["type"] != "text" for b in blocks):
        raise _bad(f"{where}: a system message may hold text only")
    return "".join(b["text"] for b in blocks)


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not fn.get("name"):
        raise _bad(f"{where} has no function name")
    raw = fn.get("arguments") or "{}"
    try:
        args = orjson.loads(raw) if isinstance(raw, str | bytes) else raw
    except orjson.JSONDecodeError:
        raise _bad(f"{where} ({fn['name']}) has arguments that are not JSON: {str(raw)[:80]!r}") from None
    if not isinstance(args, dict):
        raise _bad(f"{where} ({fn['name']}) has arguments that are not a JSON object: {str(raw)[:80]!r}")
    return {"type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn["name"]), "input": args}


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) and t.get("type", "function") == "function" else None
        if not isinstance(fn, dict) or not fn.get("name"):
            raise _bad(f"tools[{i}] is not a function tool with a name")
        tool: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            tool["description"] = fn["description"]
        tool["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
        out.append(tool)
    return out


def _tool_choice(choice: Any) -> dict[str, Any]:
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if name:
            return {"type": "tool", "name": str(name)}
    raise _bad(f"tool_choice {choice!r} is not auto, required, none or {{\"type\": \"function\", ...}}")


def _turns(messages: list[Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """(system texts, Messages turns with roles alternating: consecutive same-role turns merged)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content"), where))
            continue
        if role == "user":
            blocks = _blocks(m.get("content"), where)
        elif role == "assistant":
            blocks = _blocks(m.get("content"), where)
            blocks += [_tool_use(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(m.get("tool_calls") or ())]
        elif role == "tool":
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(m.get("tool_call_id") or "")}
            content = m.get("content")
            result["content"] = content if isinstance(content, str) else _blocks(content, where)
            role, blocks = "user", [result]
        else:
            raise _bad(f"{where}.role {role!r} is not system, user, assistant or tool")
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for t in turns:  # a turn of one text block is sent as a plain string
        if len(t["content"]) == 1 and t["content"][0]["type"] == "text":
            t["content"] = t["content"][0]["text"]
    return system, turns


def to_messages_request(model: str, messages: list[Any], tools: list[dict[str, Any]] | None = None,
                        params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat request (OpenAI ``messages``, ``tools`` and sampling params) as a Messages request body."""
    params = dict(params or {})
    if params.get("n") not in (None, 1):
        raise _bad(f"n={params['n']}: Anthropic has no n (one answer per request); send n requests instead")
    if params.get("stream"):
        raise _bad("streaming is not supported with provider anthropic")
    params.pop("stream", None)
    system, turns = _turns(messages)
    max_tokens = params.get("max_tokens", params.get("max_completion_tokens"))
    body: dict[str, Any] = {"model": model, "max_tokens": DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
                            "messages": turns}
    if system:
        body["system"] = "\n\n".join(system)
    stop = params.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if tools:
        body["tools"] = _tools(tools)
        choice = params.get("tool_choice")
        if choice is not None or params.get("parallel_tool_calls") is False:
            tc = _tool_choice(choice if choice is not None else "auto")
            if params.get("parallel_tool_calls") is False and tc["type"] != "none":
                tc["disable_parallel_tool_use"] = True
            body["tool_choice"] = tc
    for key, value in params.items():  # temperature, top_p, top_k, thinking, metadata, ...: the API's own
        if key not in OPENAI_ONLY and value is not None:
            body[key] = value
    return body


# -- response ------------------------------------------------------------------------------------------------


def _tokens(usage: dict[str, Any], key: str) -> int:
    v = usage.get(key)
    if v is None:
        return 0
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ModelError("bad_response", f"the Anthropic response has usage.{key} = {str(v)[:40]!r}, not a count")
    return v


def from_messages_response(body: bytes | dict[str, Any]) -> ChatResponse:
    """A Messages ``message`` body as a :class:`ChatResponse` (content, tool_calls, finish_reason, usage)."""
    if isinstance(body, bytes | str):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ModelError("bad_response", f"the Anthropic endpoint answered with something that is not JSON: "
                                             f"{body[:120]!r}") from None
    else:
        data = body
    if not isinstance(data, dict) or data.get("type") != "message" or not isinstance(data.get("content"), list):
        what = data.get("type") if isinstance(data, dict) else type(data).__name__
        raise ModelError("bad_response", f"the Anthropic endpoint's answer is not a Messages response "
                                         f"(type {what!r}, expected a \"message\" with a content list)")
    text, calls, thinking = [], [], []
    for i, b in enumerate(data["content"]):
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            text.append(str(b.get("text") or ""))
        elif kind == "tool_use":
            if not b.get("name") or not isinstance(b.get("input", {}), dict):
                raise ModelError("bad_response", f"the Anthropic response's content[{i}] is a tool_use block "
                                                 "without a name or an object input")
            calls.append({"id": str(b.get("id") or ""), "type": "function",
                          "function": {"name": str(b["name"]), "arguments": orjson.dumps(b.get("input") or {}).decode()}})
        elif kind == "thinking":
            thinking.append(str(b.get("thinking") or ""))
        # redacted_thinking, server tool blocks and the like carry nothing for a chat message
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    reason = data.get("stop_reason")
    if reason is not None and not isinstance(reason, str):
        raise ModelError("bad_response", f"the Anthropic response has stop_reason = {str(reason)[:40]!r}")
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        raise ModelError("bad_response", "the Anthropic response's usage is not an object")
    cache_read = _tokens(usage, "cache_read_input_tokens")
    cache_write = _tokens(usage, "cache_creation_input_tokens")
    extra: dict[str, Any] = {"api": "anthropic"}
    if cache_read:
        extra["cache_read_tokens"] = cache_read
    if cache_write:
        extra["cache_write_tokens"] = cache_write
    if thinking:
        extra["thinking"] = "".join(thinking)
    if reason and reason not in FINISH:
        extra["stop_reason"] = reason
    return ChatResponse(message=message, finish_reason=FINISH.get(reason, reason) if reason else None,
                        prompt_tokens=_tokens(usage, "input_tokens") + cache_read + cache_write,
                        completion_tokens=_tokens(usage, "output_tokens"), extra=extra)


def as_chat_completion(body: bytes | dict[str, Any]) -> dict[str, Any]:
    """A Messages ``message`` body as the chat completion body an OpenAI endpoint would have answered (one choice;
    its id and model kept), for the relays that answer in any API from a chat completion."""
    data = orjson.loads(body) if isinstance(body, bytes | str) else body
    reply = from_messages_response(data)
    return {"id": str(data.get("id") or ""), "object": "chat.completion", "created": 0,
            "model": str(data.get("model") or ""),
            "choices": [{"index": 0, "message": reply.message, "finish_reason": reply.finish_reason}],
            "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens}}


# -- errors --------------------------------------------------------------------------------------------------

_TOO_LONG = ("prompt is too long", "exceed context limit", "context window")


def _error(body: bytes) -> tuple[str, str]:
    """(Anthropic's error type, its message) from an error body; ("", the body's start) when it is not one."""
    try:
        data = orjson.loads(body)
        err = data.get("error") if isinstance(data, dict) else None
        if isinstance(err, dict):
            return str(err.get("type") or ""), str(err.get("message") or err)[:300]
    except orjson.JSONDecodeError:
        pass
    return "", body[:300].decode("utf-8", "replace").strip()


def classify_anthropic_status(status: int, body: bytes, model: str) -> ModelError:
    """An HTTP error from the Messages API as the client's :class:`ModelError` (same kinds as for OpenAI)."""
    kind, detail = _error(body)
    where = f"HTTP {status}{' ' + kind if kind else ''}: {detail}"
    if kind in ("authentication_error", "permission_error") or status in (401, 403):
        return ModelError("auth", f"Anthropic rejected the API key ({where})", status)
    if kind == "rate_limit_error" or status == 429:
        return ModelError("rate_limit", f"rate limited by Anthropic ({where})", status)
    if kind in ("overloaded_error", "api_error") or status >= 500:
        return ModelError("server", f"Anthropic server error ({where})", status)
    if kind == "not_found_error" or status == 404:
        if "model" in detail.lower() or not detail:
            return ModelError("unknown_model", f"Anthropic does not serve model {model!r} ({where})", status)
        return ModelError("bad_request", f"Anthropic: {where}", status)
    if status == 400 and any(s in detail.lower() for s in _TOO_LONG):
        return ModelError("context_length", f"the conversation no longer fits the model's context ({detail})", status)
    return ModelError("bad_request", f"Anthropic refused the request ({where})", status)
