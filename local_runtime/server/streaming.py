"""Server-sent events for ``stream: true``: OpenAI chunk format, ending with ``data: [DONE]``.

The worker thread posts a snapshot after every token; the stream sends the text that can no longer
change (a partial stop string or tool-call marker is held back), so the chunks always concatenate
to the same text as the non-streamed answer with the same seed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
from aiohttp import web
from workbench_local.models.chat_template import TOOL_OPEN, held_back
from workbench_local.server.generation import Sequence
from workbench_local.server.openai_api import (
    ChatRequest,
    CompletionRequest,
    TokenText,
    chat_logprobs,
    chat_message,
    new_id,
    usage,
)

from workbench.wire.chat_stream import ChatStreamAccumulator, Delta

Snapshot = tuple[Sequence, str, int, str | None]


def attach_queue(seqs: list[Sequence]) -> asyncio.Queue[Snapshot]:
    """Make each sequence post (seq, text, token count, finish reason) to a queue on this loop."""
    loop = asyncio.get_running_loop()
    q: asyncio.Queue[Snapshot] = asyncio.Queue()

    def on_event(seq: Sequence) -> None:
        loop.call_soon_threadsafe(q.put_nowait, (seq, seq.text, len(seq.out_ids), seq.finish_reason))

    for s in seqs:
        s.on_event = on_event
    return q


class _Choice:
    __slots__ = ("sent", "tok")

    def __init__(self) -> None:
        self.sent = ""
        self.tok = 0


def chat_sse(chunks: list[dict[str, Any]]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)


class Translation(Protocol):
    """Another API's stream built from the chat chunks (see :mod:`workbench.wire`)."""

    def start(self) -> bytes: ...
    def on(self, delta: Delta) -> bytes: ...
    def finish(self, acc: ChatStreamAccumulator) -> bytes: ...


async def _drive(request: web.Request, seqs: list[Sequence], q: asyncio.Queue[Snapshot], fut: Awaitable[Any],
                 first: list[dict[str, Any]], on_snapshot: Callable[[Snapshot, _Choice], list[dict[str, Any]]],
                 last: Callable[[], list[dict[str, Any]]], translation: Translation | None = None) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                       "X-Accel-Buffering": "no"})
    await resp.prepare(request)
    state = {id(s): _Choice() for s in seqs}
    encode = chat_sse
    if translation is not None:
        acc = ChatStreamAccumulator()

        def encode(chunks: list[dict[str, Any]]) -> bytes:
            return b"".join(translation.on(acc.feed_chunk(c)) for c in chunks)

        await resp.write(translation.start())
    try:
        if first:
            await resp.write(encode(first))
        remaining = len(seqs)
        while remaining:
            snap = await q.get()
            batch = [snap]
            while not q.empty():
                batch.append(q.get_nowait())
            out: list[dict[str, Any]] = []
            for sn in batch:
                st = state[id(sn[0])]
                if st.tok < 0:
                    continue  # already finished
                out.extend(on_snapshot(sn, st))
                if sn[3] is not None:
                    st.tok = -1
                    remaining -= 1
            if out:
                await resp.write(encode(out))
        await fut
        tail = encode(last())
        await resp.write(tail + (b"data: [DONE]\n\n" if translation is None else translation.finish(acc)))
    except ConnectionResetError:  # the client hung up: its sequences stop, and nothing is left to answer
        for s in seqs:
            s.cancelled = True
        return resp
    except asyncio.CancelledError:
        for s in seqs:
            s.cancelled = True
        raise
    await resp.write_eof()
    return resp


async def stream_chat(request: web.Request, req: ChatRequest, name: str, seqs: list[Sequence],
                      q: asyncio.Queue[Snapshot], fut: Awaitable[Any], prompt_ids: list[int], tools_active: bool,
                      tt: TokenText,
                      translation: Translation | None = None) -> web.StreamResponse:
    cid, created = new_id("chatcmpl"), int(time.time())
    markers = list(seqs[0].params.stop) + ([TOOL_OPEN] if tools_active else [])
    as_ids = req.return_tokens_as_token_ids

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "delta": delta, "logprobs": extra.pop("logprobs", None),
                                  "finish_reason": finish}
        choice.update(extra)
        return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name,
                "choices": [choice], "policy_version": seqs[0].policy_version}

    first = [chunk(s.index, {"role": "assistant", "content": ""}) for s in seqs]
    if req.return_token_ids and first:
        first[0]["prompt_token_ids"] = prompt_ids

    def on_snapshot(sn: Snapshot, st: _Choice) -> list[dict[str, Any]]:
        seq, text, ntok, finish = sn
        out: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        fr = None
        if finish is not None:
            message, fr = chat_message(seq, tools_active)
            visible, calls = message.get("content") or "", message.get("tool_calls") or []
            ntok = len(seq.out_ids)
        else:
            visible = text[: len(text) - held_back(text, markers)]
        delta = visible[len(st.sent):] if visible.startswith(st.sent) else ""
        if delta or ntok > st.tok:
            extra: dict[str, Any] = {"logprobs": chat_logprobs(seq, tt, st.tok, ntok, as_ids)}
            if req.return_token_ids:
                extra["token_ids"] = seq.out_ids[st.tok: ntok]
            out.append(chunk(seq.index, {"content": delta}, **extra))
            st.sent += delta
            st.tok = ntok
        if finish is not None:
            if calls:
                out.append(chunk(seq.index, {"tool_calls": [{"index": k, **c} for k, c in enumerate(calls)]}))
            out.append(chunk(seq.index, {}, fr, stop_reason=seq.stop_reason))
        return out

    def last() -> list[dict[str, Any]]:
        if not (req.stream_options or {}).get("include_usage"):
            return []
        return [{"id": cid, "object": "chat.completion.chunk", "created": created, "model": name, "choices": [],
                 "usage": usage(seqs, len(prompt_ids)), "policy_version": seqs[0].policy_version}]

    return await _drive(request, seqs, q, fut, first, on_snapshot, last, translation)


async def stream_completion(request: web.Request, req: CompletionRequest, name: str, seqs: list[Sequence],
                            q: asyncio.Queue[Snapshot], fut: Awaitable[Any],
                            prompts: list[list[int]], tt: TokenText) -> web.StreamResponse:
    cid, created = new_id("cmpl"), int(time.time())
    markers = list(seqs[0].params.stop)

    def on_snapshot(sn: Snapshot, st: _Choice) -> list[dict[str, Any]]:
        seq, text, ntok, finish = sn
        if finish is not None:
            visible, ntok = seq.text, len(seq.out_ids)
        else:
            visible = text[: len(text) - held_back(text, markers)]
        delta = visible[len(st.sent):] if visible.startswith(st.sent) else ""
        if not (delta or ntok > st.tok or finish is not None):
            return []
        lps = None
        if seq.params.logprobs:
            entries = seq.logprobs[st.tok: ntok]
            lps = {"tokens": [tt(t, req.return_tokens_as_token_ids) for t, _, _ in entries],
                   "token_logprobs": [lp for _, lp, _ in entries],
                   "top_logprobs": [{tt(t): v for t, v in top} for _, _, top in entries]}
        choice: dict[str, Any] = {"index": seq.index, "text": delta, "logprobs": lps,
                                  "finish_reason": finish and seq.finish_reason}
        if finish is not None:
            choice["stop_reason"] = seq.stop_reason
        if req.return_token_ids:
            choice["token_ids"] = seq.out_ids[st.tok: ntok]
            if st.tok == 0:
                choice["prompt_token_ids"] = prompts[seq.index // req.n]
        st.sent += delta
        st.tok = ntok
        return [{"id": cid, "object": "text_completion", "created": created, "model": name, "choices": [choice],
                 "policy_version": seq.policy_version}]

    def last() -> list[dict[str, Any]]:
        if not (req.stream_options or {}).get("include_usage"):
            return []
        return [{"id": cid, "object": "text_completion", "created": created, "model": name, "choices": [],
                 "usage": usage(seqs, sum(len(p) for p in prompts))}]

    return await _drive(request, seqs, q, fut, [], on_snapshot, last)
