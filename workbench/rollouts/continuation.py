"""Token continuation: every follow-up call of a multi-turn rollout continues the exact tokens the
model sampled, instead of letting the server re-render (and re-tokenize) the conversation.

Re-rendering is lossy. A reply sampled as the tokens ``"hel" "lo"`` renders back as ``"hello"``;
a reply whose text holds ``<tool_call>...</tool_call>`` comes back parsed into ``tool_calls`` and
renders differently again. Either way turn N's prompt no longer extends turn N-1's tokens, and a
trainer learns from tokens the model never produced: the token mismatch of multi-turn RL.

So for turn N the client builds the prompt itself, as token ids:

    the path's recorded tokens (every earlier prompt segment and sampled reply, exactly)
  + the template's closing of the last reply (``<|im_end|>\\n``, less what the model sampled itself)
  + the template's rendering of the new messages and the generation prompt

and sends it to ``/v1/chat/completions/tokens`` (prime-rl's route; the embedded server has it, and
so does the adapter gate in front of vLLM on Modal, ``workbench_cloud.vllm_tokens``). The two
renderings come from the server's ``/tokenize`` (vLLM's route), so the chat template lives in one
place. :func:`continuation_for` turns continuation on for the embedded server by its name and for
any other server that answers a probe of both routes. Where the template is not append-only (it rewrites earlier turns, e.g. strips
reasoning), or where this call sends other tools than the call it follows (the recorded tokens hold that
call's tools block), the call falls back to the server's own rendering and the trace records the branch.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from workbench.records.model_reply import ModelError
from workbench.records.trace import Message, Trace
from workbench.rollouts.client import ChatClient, EndpointInfo

_PROBE_USER: list[Message] = [{"role": "user", "content": "x"}]
#: Answers that show a route exists: served (200) or a body refused by its validation (400, 422).
_ROUTE_EXISTS = frozenset({200, 400, 422})


async def _status(client: ChatClient, url: str, payload: dict[str, Any]) -> int | None:
    import aiohttp

    session = await client.session()
    try:
        async with session.post(url, data=orjson.dumps(payload), headers=client.headers,
                                timeout=aiohttp.ClientTimeout(total=30)) as resp:
            await resp.read()
            return resp.status
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def serves_token_route(client: ChatClient, base_url: str, model: str) -> bool:
    """Whether the endpoint serves ``/v1/chat/completions/tokens`` and ``/tokenize``: the tokens
    route is sent an empty prompt (a server that has it refuses it with 400/422 and generates
    nothing; one without it answers 404), ``/tokenize`` a one-character prompt."""
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    route, tokenize = await asyncio.gather(
        _status(client, base + "/chat/completions/tokens", {"model": model, "messages": [], "tokens": []}),
        _status(client, root + "/tokenize", {"model": model, "prompt": "x"}))
    return route in _ROUTE_EXISTS and tokenize == 200


async def continuation_for(client: ChatClient, base_url: str, model: str,
                           info: EndpointInfo) -> TokenContinuation | None:
    """Token continuation for this endpoint, or None where it cannot work: the endpoint returns no
    token ids, or it serves neither the tokens route by name (``CONTINUATION_SERVERS``) nor by probe."""
    if not info.returns_tokens:
        return None
    if info.continues_tokens or await serves_token_route(client, base_url, model):
        return TokenContinuation(client, base_url, model)
    return None


class TokenContinuation:
    """Builds follow-up prompts from a rollout's trace for one endpoint and model."""

    def __init__(self, client: ChatClient, base_url: str, model: str) -> None:
        self.client, self.model = client, model
        base = base_url.rstrip("/")
        self.root = base[: -len("/v1")] if base.endswith("/v1") else base
        self.chat_url = base + "/chat/completions/tokens"
        self._closing: dict[bytes, list[int] | None] = {}
        self.continued = 0  # follow-up calls sent as exact tokens
        self.fallbacks = 0  # follow-up calls left to the server's rendering (template not append-only)

    async def _tokenize(self, messages: list[Message], tools: list[dict[str, Any]] | None,
                        add_generation_prompt: bool) -> list[int]:
        payload: dict[str, Any] = {"model": self.model, "messages": messages,
                                   "add_generation_prompt": add_generation_prompt}
        if tools:
            payload["tools"] = tools
        body = await self.client.post_json(self.root + "/tokenize", payload, self.model)
        return list(orjson.loads(body)["tokens"])

    async def closing(self, tools: list[dict[str, Any]] | None) -> list[int] | None:
        """The tokens the template puts after an assistant reply's content (e.g. ``<|im_end|>\\n``),
        found once per tool set by rendering an empty reply; None when the template is not
        append-only there."""
        key = orjson.dumps(tools or [])
        if key not in self._closing:
            opened, closed = await asyncio.gather(
                self._tokenize(_PROBE_USER, tools, True),
                self._tokenize([*_PROBE_USER, {"role": "assistant", "content": ""}], tools, False))
            self._closing[key] = closed[len(opened):] if closed[: len(opened)] == opened else None
        return self._closing[key]

    async def prompt_ids(self, trace: Trace, messages: list[Message],
                         tools: list[dict[str, Any]] | None = None) -> list[int] | None:
        """The exact prompt ids for a call sending ``messages``; None for a first call, a call that
        does not follow a recorded reply, or a template that rewrites earlier turns."""
        if not trace.has_tokens:
            return None
        path, used = trace.path_for(messages)
        if not path or path[-1].kind != "assistant" or not path[-1].tokens or used >= len(messages):
            return None
        last = path[-1].call
        if last is None or orjson.dumps(trace.tools_of(last) or []) != orjson.dumps(tools or []):
            # the path's tokens hold the tools block that call rendered: this call's tools render another
            self.fallbacks += 1
            return None
        try:
            (before, after), closing = await asyncio.gather(
                asyncio.gather(self._tokenize(messages[:used], tools, False), self._tokenize(messages, tools, True)),
                self.closing(tools))
        except (ModelError, KeyError, ValueError, TypeError):
            self.fallbacks += 1  # the server's own rendering decides (and reports what is wrong)
            return None
        if closing is None or after[: len(before)] != before:
            self.fallbacks += 1
            return None
        sampled = path[-1].tokens
        tail = closing[1:] if closing and sampled and sampled[-1] == closing[0] else closing
        ids: list[int] = []
        for node in path:
            ids.extend(node.tokens)
        self.continued += 1
        return [*ids, *tail, *after[len(before):]]
