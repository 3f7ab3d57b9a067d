"""The live state of one rollout, as harnesses, tools and rewards see it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.records.model_reply import ChatResponse, ModelClient
from workbench.records.task import Message, Task
from workbench.records.trace import Trace, completion_logprobs, message_key

if TYPE_CHECKING:
    from workbench.records.conversations import Conversations


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass(slots=True)
class ModelCall:
    """One chat completion made during a rollout: what was asked (by position) and what came back."""

    index: int
    n_messages: int  # how many messages of the conversation were sent
    message: Message | None
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    error: str | None = None
    extra: dict[str, Any] | None = None  # logprobs, token ids, server fields (when the server gives them)


@dataclass(slots=True)
class RolloutError:
    kind: str  # model.<kind> | timeout | harness | tool | reward
    source: str  # which function / tool / endpoint
    message: str


class RolloutFailed(Exception):
    """Raised inside a harness to end the rollout as an error of a given kind."""

    def __init__(self, kind: str, source: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.source, self.message = kind, source, message


#: The key of a rollout's ``state`` that holds the tool definitions (OpenAI chat format) its latest
#: model call that sent tools offered; Workbench sets it, so harness code leaves the key to it.
OFFERED_TOOLS = "offered_tools"


def url_key(base_url: str) -> str:
    """The ``<id>~<secret>`` segment of a rollout's proxy URL (what the sandbox's bridge serves under)."""
    return base_url.split("/r/", 1)[1].split("/", 1)[0] if "/r/" in base_url else base_url


@dataclass(slots=True)
class Rollout:
    """One attempt of a model at one task. Harnesses drive it; rewards read it."""

    id: str
    task: Task
    sample_index: int
    client: ModelClient
    base_url: str  # what harness code calls: the interception proxy's per-rollout URL when one runs
    model: str
    params: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    sandbox: Any = None
    calls: list[ModelCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    errors: list[RolloutError] = field(default_factory=list)
    failure: RolloutError | None = None
    trace: Trace = field(default_factory=Trace)
    upstream_url: str | None = None  # where generate() sends calls directly (no HTTP hop through the proxy)
    continuation: Any = None  # a TokenContinuation: follow-up calls continue the sampled tokens exactly
    last_request: list[Message] | None = None  # the messages of the latest model call
    started: float = field(default_factory=time.perf_counter)
    duration_s: float = 0.0
    turns: int = 0
    pause: Callable[[Rollout], Awaitable[None]] | None = None  # awaited before each model call (the debugger's step)
    conversations: Conversations | None = None  # set by a harness that rebuilds its conversations from the calls
    policy: Any = None  # a HumanPolicy: a person writes the assistant's turns (wb.Human); None: the model
    source: str = "model"  # who acted: "model", or "human" when a person was the policy
    mcp: Any = None  # the rollout's MCP sessions (``MCPSessions``) when its harness has MCP toolsets

    async def generate(
        self, messages: list[Message] | None = None, *, tools: list[dict[str, Any]] | None = None, **overrides: Any
    ) -> Message:
        """Ask the model for the next assistant message; the call is recorded in the trace.

        With ``messages`` omitted the rollout's own conversation is sent. The returned message is
        *not* appended; harnesses decide what enters the conversation.
        """
        msgs = self.messages if messages is None else messages
        if self.policy is not None:
            return await self._ask_person(msgs, tools)
        params = self.params if not overrides else {**self.params, **overrides}
        ids = await self.continued_prompt(msgs, tools)  # may wait on a debugger: the latency starts after it
        t0 = time.perf_counter()
        resp: ChatResponse = await self.client.chat(
            base_url=self.upstream_url or self.base_url, model=self.model, messages=msgs, tools=tools, params=params,
            **({"prompt_ids": ids} if ids is not None else {}))
        self.record_call(msgs, resp, time.perf_counter() - t0, tools=tools)
        return resp.message

    async def _ask_person(self, msgs: list[Message], tools: list[dict[str, Any]] | None) -> Message:
        """The person's turn, recorded as a call of its own: no tokens, no usage, ``extra.api`` "human"."""
        if self.pause is not None:
            await self.pause(self)
        t0 = time.perf_counter()
        msg = await self.policy.reply(list(msgs), tools)
        finish = "tool_calls" if msg.get("tool_calls") else "stop"
        self.record_call(msgs, ChatResponse(msg, finish, 0, 0, {"api": "human"}), time.perf_counter() - t0,
                         tools=tools)
        return msg

    async def continued_prompt(self, msgs: list[Message], tools: list[dict[str, Any]] | None) -> list[int] | None:
        """The exact token ids to send for a follow-up call (None: let the server render).

        Every model call, direct or through the interception proxy, comes here first, so this is
        also where a stepping debugger holds the rollout (:attr:`pause`) until the next turn is asked for.
        """
        if self.pause is not None:
            await self.pause(self)
        if self.continuation is None:
            return None
        return await self.continuation.prompt_ids(self.trace, msgs, tools)

    def record_call(self, msgs: list[Message], resp: ChatResponse, latency_s: float,
                    tools: list[dict[str, Any]] | None = None) -> None:
        """Record one model call (made directly or through the interception proxy) in the trace, with the
        tool schemas it sent (OpenAI chat format): the chat template renders them into its prompt. The
        tools of the latest call that sent any are also kept in the rollout's state under
        :data:`OFFERED_TOOLS`, stored with every rollout, token trace or not (what an SFT export offers)."""
        self.last_request = msgs
        if tools:
            self.state[OFFERED_TOOLS] = tools
        keys = None
        if self.conversations is not None:
            keys = [message_key(m) for m in msgs]
            self.conversations.add(msgs, resp.message, keys)
        extra = resp.extra
        if extra:
            lps = completion_logprobs(extra.get("logprobs"))
            self.trace.record(msgs, resp.message, extra.get("prompt_token_ids"), extra.get("token_ids"), lps,
                              extra.get("policy_version"), tools=tools, keys=keys)
            # Tokens and logprobs live in the trace (packed); keep the call row small.
            extra = {k: v for k, v in extra.items() if k not in ("logprobs", "token_ids", "prompt_token_ids")} or None
        self.usage.prompt_tokens += resp.prompt_tokens
        self.usage.completion_tokens += resp.completion_tokens
        self.calls.append(
            ModelCall(
                index=len(self.calls),
                n_messages=len(msgs),
                message=resp.message,
                finish_reason=resp.finish_reason,
                prompt_tokens=resp.prompt_tokens,
                completion_tokens=resp.completion_tokens,
                latency_s=latency_s,
                extra=extra,
            )
        )
        self.turns += 1

    @property
    def completion(self) -> str:
        """The text of the last assistant message ('' when there is none)."""
        for m in reversed(self.messages):
            if m.get("role") == "assistant":
                c = m.get("content")
                return c if isinstance(c, str) else _text(c)
        return ""

    def score_context(self) -> dict[str, Any]:
        """The arguments reward and metric functions may ask for, by name."""
        return {
            "prompt": self.task.prompt,
            "completion": self.completion,
            "messages": self.messages,
            "answer": self.task.answer,
            "info": self.task.info,
            "task": self.task,
            "state": self.state,
            "trace": self,
            "sandbox": self.sandbox,
            "usage": self.usage,
            "mcp": self.mcp,
        }


def content_text(content: Any) -> str:
    """A message's content as text for people (transcripts, the app): the text of every part of a
    parts list, and bare strings in it too, so nothing a server sent is hidden."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _text(content: Any) -> str:
    """The text a reward sees: only OpenAI text parts count (unlike :func:`content_text`)."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def message_text(m: Message) -> str:
    """All human-readable text of a message: content plus tool-call names and arguments."""
    content = m.get("content")
    calls = m.get("tool_calls")
    text = content if type(content) is str else _text(content)
    if not calls:
        return text
    parts = [text] if text else []
    for tc in calls:
        fn = tc.get("function") or {}
        parts.append(f"{fn.get('name', '')}({fn.get('arguments', '')})")
    return " ".join(parts)


def searchable_text(messages: list[Message]) -> str:
    """What the full-text index holds for a rollout: every message but the system prompt, which is
    the same for all rollouts of an environment and would only bloat the index."""
    return " \n".join(message_text(m) for m in messages if m.get("role") != "system")
