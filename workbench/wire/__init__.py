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

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class WireError(ValueError):
    """A request that cannot be translated: answered with a 400 naming ``param``."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def malformed_as_wire_error(translate: Callable[P, T]) -> Callable[P, T]:
    """Run a request translator so that a body of the wrong shape anywhere (a number where an object
    belongs, an object where a list does) is a :class:`WireError`, a 400, never a server error: the one
    place every translated request passes."""

    @functools.wraps(translate)
    def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return translate(*args, **kwargs)
        except WireError:
            raise
        except RecursionError:
            raise WireError("malformed request: the body is nested too deeply") from None
        except (TypeError, AttributeError, KeyError, IndexError, ValueError) as e:
            raise WireError(f"malformed request: a field has the wrong type or shape ({type(e).__name__}: "
                            f"{str(e)[:200]})") from None

    return guarded
