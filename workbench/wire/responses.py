"""The OpenAI Responses API (``POST /v1/responses``) as chat completions, and chat answers as responses.

A Responses request becomes a chat request: ``instructions`` the system message, ``input`` (a string or
items) the conversation — message items, ``function_call`` items an assistant message's ``tool_calls``,
``function_call_output`` items ``tool`` messages (``custom_tool_call`` items and their outputs alike),
every other item type accepted and left out (reasoning, as a chat upstream takes none back,
hosted tools' calls, item references, Codex's ``additional_tools``: nothing of them has a chat
equivalent) — after the stored conversation of ``previous_response_id``;
function ``tools``, ``tool_choice``, ``text.format`` (as ``response_format``), ``max_output_tokens``.
A chat answer becomes a ``response`` whose ``output`` holds a ``reasoning`` item (when the upstream
returned reasoning), a ``message`` item and ``function_call`` items; a chat stream becomes the
Responses events, ``response.created`` to ``response.completed``.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Any

from workbench.wire import WireError, malformed_as_wire_error
from workbench.wire.chat_stream import ChatStreamAccumulator, Delta, sse_event

Message = dict[str, Any]


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponseStore:
    """Recent responses: the conversation behind each id (for ``previous_response_id``) and the response
    itself (for ``GET /v1/responses/{id}``), the oldest dropped first."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[list[Message], dict[str, Any] | None]] = OrderedDict()

    def get(self, response_id: str) -> list[Message] | None:
        item = self._items.get(response_id)
        return None if item is None else item[0]

    def response(self, response_id: str) -> dict[str, Any] | None:
        item = self._items.get(response_id)
        return None if item is None else item[1]

    def put(self, response_id: str, conversation: list[Message], response: dict[str, Any] | None = None) -> None:
        self._items[response_id] = (conversation, response)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(f"{where} must be a string or a list of content parts", where)
    parts: list[dict[str, Any]] = []
    for i, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("input_text", "output_text", "text", "summary_text"):
            parts.append({"type": "text", "text": str(p.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(p.get("refusal", ""))})
        elif kind == "input_image":
            url = p.get("image_url") or ""
            if not url:
                raise WireError(f"{where}[{i}]: an input_image needs an image_url (file ids are not served here)",
                                f"{where}[{i}]")
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise WireError(f"{where}[{i}]: a {kind!r} content part is not supported (input_text, output_text "
                            "and input_image are)", f"{where}[{i}]")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
    return "" if output is None else str(output)


def input_messages(items: Any) -> list[Message]:
    """``input`` (a string or a list of items) as chat messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise WireError("input must be a string or a list of items", "input")
    out: list[Message] = []
    for i, it in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(it, dict):
            raise WireError(f"{where} must be an object", where)
        kind = it.get("type", "message")
        if kind == "message":
            role = it.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise WireError(f"{where}.role must be user, assistant, system or developer", f"{where}.role")
            out.append({"role": "system" if role == "developer" else role,
                        "content": _content(it.get("content", ""), f"{where}.content")})
        elif kind == "function_call":
            name = str(it.get("name", ""))
            if it.get("namespace"):
                name = f"{it['namespace']}{NAMESPACE_SEP}{name}"
            call = {"id": str(it.get("call_id") or it.get("id") or ""), "type": "function",
                    "function": {"name": name, "arguments": str(it.get("arguments") or "")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and isinstance(last.get("content"), str | None):
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            out.append({"role": "tool", "tool_call_id": str(it.get("call_id", "")),
                        "content": _output_text(it.get("output"))})
        elif kind == "custom_tool_call":  # a freeform tool's call: its input is the call's arguments
            call = {"id": str(it.get("call_id") or it.get("id") or ""), "type": "function",
                    "function": {"name": str(it.get("name", "")), "arguments": str(it.get("input") or "")}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and isinstance(last.get("content"), str | None):
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "custom_tool_call_output":
            out.append({"role": "tool", "tool_call_id": str(it.get("call_id", "")),
                        "content": _output_text(it.get("output"))})
        elif isinstance(kind, str):
            # reasoning (a chat upstream takes none back), hosted tools' calls (web search, file search, code
            # interpreter, MCP, ...), item references, compaction and client items such as Codex's
            # ``additional_tools``: none has a chat equivalent, so each is left out of the chat request
            continue
        else:
            raise WireError(f"{where}.type must be a string naming the item's type", f"{where}.type")
    return out


#: A namespaced tool's chat name: NAMESPACE + this + NAME (names in chat tools allow [A-Za-z0-9_-]).
NAMESPACE_SEP = "__"


def _function(t: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    fn: dict[str, Any] = {"name": prefix + t["name"]}  # OpenAI's key order: a template renders the tool as JSON
    if t.get("description"):
        fn["description"] = t["description"]
    fn["parameters"] = t.get("parameters") or {"type": "object", "properties": {}}
    if t.get("strict") is not None:
        fn["strict"] = t["strict"]
    return {"type": "function", "function": fn}


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools as chat tools; a ``namespace`` tool's functions as ``NAMESPACE__NAME``. Hosted tools
    (web search, file search, code interpreter, ...) run at OpenAI, so they are left out: the model behind
    the call has only the tools the harness itself runs."""
    if not isinstance(tools, list):
        raise WireError("tools must be a list", "tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("type"), str):
            raise WireError(f"tools[{i}] must be an object with a type", f"tools[{i}]")
        if t["type"] == "function":
            if not isinstance(t.get("name"), str):
                raise WireError(f"tools[{i}]: a function tool needs a name", f"tools[{i}].name")
            out.append(_function(t))
        elif t["type"] == "namespace":
            if not isinstance(t.get("name"), str) or not isinstance(t.get("tools"), list):
                raise WireError(f"tools[{i}]: a namespace needs a name and a list of tools", f"tools[{i}]")
            out.extend(_function(f, t["name"] + NAMESPACE_SEP) for f in t["tools"]
                       if isinstance(f, dict) and f.get("type") == "function" and isinstance(f.get("name"), str))
    return out


def namespaces(body: dict[str, Any]) -> frozenset[str]:
    return frozenset(t["name"] for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "namespace"
                     and isinstance(t.get("name"), str))


def _split(name: str, spaces: frozenset[str]) -> tuple[str | None, str]:
    ns, sep, rest = name.partition(NAMESPACE_SEP)
    return (ns, rest) if sep and ns in spaces else (None, name)


def _tool_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise WireError("tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}",
                    "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is not None and not isinstance(text, dict):
        raise WireError("text must be an object (with a format)", "text")
    fmt = (text or {}).get("format")
    if fmt is not None and not isinstance(fmt, dict):
        raise WireError("text.format must be an object with a type (text, json_object or json_schema)", "text.format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name", "output"), "schema": fmt.get("schema"),
                                                       "strict": fmt.get("strict")}}
    raise WireError("text.format.type must be text, json_object or json_schema", "text.format")


@malformed_as_wire_error
def request_to_chat(body: dict[str, Any], store: ResponseStore) -> tuple[dict[str, Any], list[Message]]:
    """(the chat request, the conversation so far without instructions) for a Responses request body."""
    if "input" not in body:
        raise WireError("input is required: a string or a list of items", "input")
    conversation: list[Message] = []
    prev = body.get("previous_response_id")
    if prev:
        stored = store.get(str(prev))
        if stored is None:
            raise WireError(f"Previous response with id '{prev}' not found.", "previous_response_id")
        conversation = list(stored)
    conversation += input_messages(body["input"])
    if not conversation:
        raise WireError("input holds nothing a chat model reads (no message, function call or its output)", "input")
    messages = list(conversation)
    if body.get("instructions"):
        messages.insert(0, {"role": "system", "content": str(body["instructions"])})
    chat: dict[str, Any] = {"messages": messages}
    if body.get("model"):
        chat["model"] = body["model"]
    for key in ("temperature", "top_p", "stream", "parallel_tool_calls", "top_logprobs"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("top_logprobs"):
        chat["logprobs"] = True
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
    if body.get("tool_choice") is not None and body.get("tools"):
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    return chat, conversation


def _message_item(text: str, item_id: str | None = None, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id or new_id("msg"), "status": status, "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}


def _call_item(call: dict[str, Any], spaces: frozenset[str] = frozenset()) -> dict[str, Any]:
    fn = call.get("function") or {}
    ns, name = _split(fn.get("name", ""), spaces)
    item = {"type": "function_call", "id": new_id("fc"), "call_id": call.get("id") or new_id("call"),
            "name": name, "arguments": fn.get("arguments") or "", "status": "completed"}
    if ns is not None:
        item["namespace"] = ns
    return item


def _reasoning_item(text: str, item_id: str | None = None) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id or new_id("rs"), "summary": [{"type": "summary_text", "text": text}]}


def output_items(message: Message, spaces: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    items = []
    if message.get("reasoning_content"):
        items.append(_reasoning_item(message["reasoning_content"]))
    if message.get("content"):
        items.append(_message_item(message["content"]))
    items.extend(_call_item(c, spaces) for c in message.get("tool_calls") or ())
    return items


def _usage(usage: dict[str, Any]) -> dict[str, Any]:
    i, o = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return {"input_tokens": i, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": o,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": i + o}


def response_body(response_id: str, model: str, request: dict[str, Any], output: list[dict[str, Any]],
                  finish: str | None, usage: dict[str, Any] | None, status: str | None = None) -> dict[str, Any]:
    incomplete = finish == "length"
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "status": status or ("incomplete" if incomplete else "completed"), "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete and status is None else None,
        "instructions": request.get("instructions"), "max_output_tokens": request.get("max_output_tokens"),
        "model": model, "output": output, "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"), "reasoning": request.get("reasoning"),
        "store": request.get("store", True), "temperature": request.get("temperature"),
        "text": request.get("text") or {"format": {"type": "text"}},
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [],
        "top_p": request.get("top_p"), "truncation": request.get("truncation", "disabled"),
        "usage": None if usage is None else _usage(usage), "metadata": request.get("metadata") or {},
    }


def finished(message: Message, conversation: list[Message], store: ResponseStore, response: dict[str, Any]) -> None:
    """Store the conversation with the reply, and the response, under the response's id."""
    reply = {k: v for k, v in message.items() if k != "reasoning_content"}
    store.put(response["id"], [*conversation, reply], response)


def chat_to_response(chat: dict[str, Any], model: str, request: dict[str, Any], conversation: list[Message],
                     store: ResponseStore) -> dict[str, Any]:
    """A non-streamed chat completion body as a ``response``."""
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {"role": "assistant", "content": ""}
    body = response_body(new_id("resp"), model, request, output_items(message, namespaces(request)),
                         choice.get("finish_reason"), chat.get("usage") or {})
    finished(message, conversation, store, body)
    return body


class ResponsesStream:
    """The Responses stream events for a chat stream, chunk by chunk."""

    def __init__(self, model: str, request: dict[str, Any], conversation: list[Message], store: ResponseStore) -> None:
        self.model, self.request, self.conversation, self.store = model, request, conversation, store
        self.id = new_id("resp")
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # items as they open, completed in place
        self.open: dict[str, Any] | None = None  # the item receiving deltas
        self.text = ""
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index -> its item
        self.call_names: dict[int, str] = {}  # chat tool-call index -> its chat name, as it streams in
        self.spaces = namespaces(request)

    def _event(self, kind: str, **payload: Any) -> bytes:
        self.seq += 1
        return sse_event(kind, {"type": kind, "sequence_number": self.seq - 1, **payload})

    def start(self) -> bytes:
        body = response_body(self.id, self.model, self.request, [], None, None, status="in_progress")
        return self._event("response.created", response=body) + self._event("response.in_progress", response=body)

    def _add(self, item: dict[str, Any]) -> bytes:
        out = self._close()
        self.output.append(item)
        self.open = item
        return out + self._event("response.output_item.added", output_index=len(self.output) - 1,
                                 item={**item, "status": "in_progress"} if item["type"] != "reasoning" else item)

    def _close(self) -> bytes:
        item, self.open = self.open, None
        if item is None:
            return b""
        index = self.output.index(item)
        out = b""
        if item["type"] == "message":
            part = item["content"][0]
            part["text"] = self.text
            out += self._event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0,
                               text=self.text, logprobs=[])
            out += self._event("response.content_part.done", item_id=item["id"], output_index=index,
                               content_index=0, part=part)
        elif item["type"] == "function_call":
            out += self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                               name=item["name"], arguments=item["arguments"])
        elif item["type"] == "reasoning":
            text = item["summary"][0]["text"]
            out += self._event("response.reasoning_summary_text.done", item_id=item["id"], output_index=index,
                               summary_index=0, text=text)
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def on(self, delta: Delta) -> bytes:
        out = b""
        if delta.reasoning:
            if self.open is None or self.open["type"] != "reasoning":
                out += self._add(_reasoning_item(""))
            assert self.open is not None
            self.open["summary"][0]["text"] += delta.reasoning
            out += self._event("response.reasoning_summary_text.delta", item_id=self.open["id"],
                               output_index=len(self.output) - 1, summary_index=0, delta=delta.reasoning)
        if delta.text:
            if self.open is None or self.open["type"] != "message":
                self.text = ""
                item = _message_item("")
                out += self._add(item)
                out += self._event("response.content_part.added", item_id=item["id"], output_index=len(self.output) - 1,
                                   content_index=0, part={"type": "output_text", "text": "", "annotations": [],
                                                          "logprobs": []})
            assert self.open is not None
            self.text += delta.text
            out += self._event("response.output_text.delta", item_id=self.open["id"], output_index=len(self.output) - 1,
                               content_index=0, delta=delta.text, logprobs=[])
        for td in delta.tools:
            found = self.calls.get(td.index)
            if found is None:
                self.call_names[td.index] = td.name
                call = self.calls[td.index] = _call_item({"id": td.id, "function": {"name": td.name, "arguments": ""}},
                                                         self.spaces)
                out += self._add(call)
            else:
                call = found
                if td.name:
                    self.call_names[td.index] += td.name
                    ns, call["name"] = _split(self.call_names[td.index], self.spaces)
                    if ns is not None:
                        call["namespace"] = ns
            if td.arguments:
                call["arguments"] += td.arguments
                out += self._event("response.function_call_arguments.delta", item_id=call["id"],
                                   output_index=self.output.index(call), delta=td.arguments)
        return out

    def finish(self, acc: ChatStreamAccumulator) -> bytes:
        out = self._close()
        body = response_body(self.id, self.model, self.request, self.output, acc.finish_reason, acc.usage)
        finished(acc.message(), self.conversation, self.store, body)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        return out + self._event(kind, response=body)
