"""Chat-completions streams: server-sent event lines in and out, and a whole reply rebuilt from chunks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson


def sse_data(line: bytes) -> dict[str, Any] | None:
    """The JSON object of one ``data:`` line, or None (a comment, ``[DONE]``, a partial or foreign line)."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    data = line[5:].strip()
    if not data or data == b"[DONE]":
        return None
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    """One named server-sent event (``event:`` and ``data:``), as the Responses and Messages APIs send them."""
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


@dataclass(slots=True)
class ToolDelta:
    index: int
    id: str  # set on the delta that opens the call, "" after
    name: str
    arguments: str


@dataclass(slots=True)
class Delta:
    """What one chunk of choice 0 added: text, tool-call pieces, the finish reason."""

    text: str = ""
    reasoning: str = ""
    tools: tuple[ToolDelta, ...] = ()
    finish_reason: str | None = None


class ChatStreamAccumulator:
    """Rebuilds a whole chat reply (choice ``index``) from OpenAI/vLLM stream chunks, and says what each
    chunk added to it."""

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.logprobs: list[dict[str, Any]] = []
        self.token_ids: list[int] = []
        self.prompt_token_ids: list[int] | None = None
        self.finish_reason: str | None = None
        self.stop_reason: Any = None
        self.usage: dict[str, Any] = {}
        self.policy_version: Any = None
        self.id: str | None = None

    def feed(self, line: bytes) -> Delta | None:
        chunk = sse_data(line)
        return None if chunk is None else self.feed_chunk(chunk)

    def feed_chunk(self, chunk: dict[str, Any]) -> Delta:
        out = Delta()
        self.id = self.id or chunk.get("id")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("prompt_token_ids") is not None:
            self.prompt_token_ids = chunk["prompt_token_ids"]
        if chunk.get("policy_version") is not None:
            self.policy_version = chunk["policy_version"]
        for ch in chunk.get("choices") or ():
            if not isinstance(ch, dict) or ch.get("index", 0) != self.index:
                continue
            delta = ch.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
                out.text += delta["content"]
            thought = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(thought, str) and thought:
                self.reasoning.append(thought)
                out.reasoning += thought
            tools = []
            for tc in delta.get("tool_calls") or ():
                index = tc.get("index", 0)
                opened = index not in self.tool_calls
                slot = self.tool_calls.setdefault(index, {"id": "", "type": "function",
                                                          "function": {"name": "", "arguments": ""}})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                slot["function"]["name"] += fn.get("name") or ""
                slot["function"]["arguments"] += fn.get("arguments") or ""
                tools.append(ToolDelta(index, slot["id"] if opened else "", fn.get("name") or "",
                                       fn.get("arguments") or ""))
            out.tools = tuple(tools)
            lp = ch.get("logprobs")
            if isinstance(lp, dict) and lp.get("content"):
                self.logprobs.extend(lp["content"])
            if ch.get("token_ids"):
                self.token_ids.extend(ch["token_ids"])
            if ch.get("prompt_token_ids") is not None:
                self.prompt_token_ids = ch["prompt_token_ids"]
            if ch.get("finish_reason"):
                self.finish_reason = out.finish_reason = ch["finish_reason"]
                self.stop_reason = ch.get("stop_reason")
        return out

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if self.content or not self.tool_calls else None}
        if self.tool_calls:
            message["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        return message

    def extra(self) -> dict[str, Any] | None:
        """What a trace keeps beside the message: logprobs, token ids, the policy version."""
        extra: dict[str, Any] = {}
        if self.logprobs:
            extra["logprobs"] = {"content": self.logprobs}
        if self.token_ids:
            extra["token_ids"] = self.token_ids
        if self.prompt_token_ids is not None:
            extra["prompt_token_ids"] = self.prompt_token_ids
        if self.policy_version is not None:
            extra["policy_version"] = self.policy_version
        return extra or None

    def completion(self) -> dict[str, Any]:
        """The whole reply as a non-streamed chat completion body."""
        return {"id": self.id or "", "object": "chat.completion",
                "choices": [{"index": 0, "message": self.message(), "finish_reason": self.finish_reason,
                             "stop_reason": self.stop_reason}],
                "usage": self.usage}


def completion_chunks(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole chat completion body as the stream chunks that carry the same answer: one chunk with every
    choice's whole delta (its token ids and logprobs too), then the usage."""
    base: dict[str, Any] = {k: data[k] for k in ("id", "created", "model", "policy_version") if k in data}
    base["object"] = "chat.completion.chunk"
    choices: list[dict[str, Any]] = []
    for i, c in enumerate(data.get("choices") or ()):
        if not isinstance(c, dict):
            continue
        message = c.get("message")
        msg: dict[str, Any] = message if isinstance(message, dict) else {}
        delta: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
        thought = msg.get("reasoning_content") or msg.get("reasoning")
        if isinstance(thought, str) and thought:
            delta["reasoning_content"] = thought
        calls = [{**tc, "index": j} for j, tc in enumerate(msg.get("tool_calls") or ()) if isinstance(tc, dict)]
        if calls:
            delta["tool_calls"] = calls
        choice = {"index": c.get("index", i), "delta": delta, "finish_reason": c.get("finish_reason") or "stop",
                  **{k: c[k] for k in ("logprobs", "token_ids", "prompt_token_ids", "stop_reason") if k in c}}
        choices.append(choice)
    first = {**base, "choices": choices}
    if data.get("prompt_token_ids") is not None:
        first["prompt_token_ids"] = data["prompt_token_ids"]
    out = [first]
    if isinstance(data.get("usage"), dict):
        out.append({**base, "choices": [], "usage": data["usage"]})
    return out
