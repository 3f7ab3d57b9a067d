"""The model APIs agents speak, translated to and from chat completions: one home for each wire format.

Everything behind Workbench — the embedded server, vLLM, any OpenAI-compatible API — answers chat
completions, and the token trace records chat calls. Agents speak more than that: the OpenAI Agents SDK
and Codex the Responses API (:mod:`workbench.wire.responses`), Claude Code and the Anthropic SDK the
Messages API (:mod:`workbench.wire.anthropic`). The interception proxy and ``workbench serve`` both take
those requests, translate them to a chat request, and translate the chat answer (whole or streamed,
:mod:`workbench.wire.chat_stream`) back, so one conversation is the same conversation whichever API
carried it.
"""

from __future__ import annotations


class WireError(ValueError):
    """A request that cannot be translated: answered with a 400 naming ``param``."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param
