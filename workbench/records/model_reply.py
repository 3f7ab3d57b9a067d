"""What a model call comes back as: a :class:`ChatResponse`, or a :class:`ModelError` naming its kind.

Every client dialect (``rollouts/client.py`` for OpenAI-compatible endpoints, ``rollouts/anthropic_client.py``
for the Messages API) answers in these, and the engine, the proxy and the rollout read them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from workbench.config.redact import redact
from workbench.records.task import Message

RETRYABLE = frozenset({"rate_limit", "server", "connection", "timeout"})
FATAL = frozenset({"auth", "unknown_model"})


class ModelError(Exception):
    """A model call failed. ``kind`` is one of: connection, timeout, rate_limit, server, auth,
    unknown_model, context_length (the conversation no longer fits the model's context), bad_request,
    bad_response."""

    def __init__(self, kind: str, message: str, status: int | None = None, retry_after: float | None = None) -> None:
        message = redact(message)  # a server may echo the key it was sent: it is never kept
        super().__init__(message)
        self.kind, self.message, self.status, self.retry_after = kind, message, status, retry_after

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


@dataclass(slots=True)
class ChatResponse:
    message: Message
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    extra: dict[str, Any] | None = None


class ModelClient(Protocol):
    """What a rollout asks for the model's replies (``workbench.rollouts.client.ChatClient`` is one)."""

    async def chat(self, *, base_url: str, model: str, messages: list[Message], tools: list[dict[str, Any]] | None = None,
                   params: dict[str, Any] | None = None, prompt_ids: list[int] | None = None) -> ChatResponse: ...
