"""Models as named endpoints: list, add, remove and check one — ``workbench models`` and the app's Settings
screen call these, so both say the same thing about the same registry (``workbench.config.models``).

A check (``workbench models test NAME``) resolves the model as a run would (its URL, id, API and key) and asks
it for one short chat completion, with no retries: it answers whether the model can be called now, how long
one call took, and otherwise why not, in one line. The key is never part of what it answers.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench.config.models import (
    ModelEndpoint,
    add_model,
    load_models,
    models_path,
    remove_model,
    unknown_model_message,
)
from workbench.config.redact import redact
from workbench.errors import NotFoundError, WorkbenchError

#: How long a check waits for the model's answer.
CHECK_TIMEOUT_S = 20.0
#: What a check asks the model.
CHECK_PROMPT = "Reply with the word: ok"


@dataclass(frozen=True, slots=True)
class ModelCheck:
    """A connection check of one registered model: ``ok``, the seconds its call took, and ``detail``: the
    start of its reply when it answered, else why it could not be called (one line)."""

    name: str
    model_id: str
    base_url: str
    ok: bool
    seconds: float
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """The check in one line, as every face shows it."""
        if self.ok:
            return f"{self.name}: ok, {self.model_id} at {self.base_url} answered in {self.seconds:.2f}s " \
                   f"({self.detail!r})"
        return f"{self.name}: cannot be called ({self.detail})"


def list_models(path: Path | None = None) -> dict[str, ModelEndpoint]:
    """The registered models by name, in name order."""
    return dict(sorted(load_models(path).items()))


def check_model(name: str, *, timeout_s: float = CHECK_TIMEOUT_S) -> ModelCheck:
    """Call the registered model ``name`` once (see the module's doc). An unknown name is a
    :class:`NotFoundError`; a model that cannot be called is a failed :class:`ModelCheck`, not an error."""
    models = load_models()
    m = models.get(name)
    if m is None:
        raise NotFoundError(unknown_model_message(name, models))
    start = time.monotonic()
    try:
        reply = asyncio.run(_ask(name, timeout_s))
    except WorkbenchError as e:
        return _check(m, False, start, str(e))
    except Exception as e:  # a model error, a refused connection: the reason, as one line
        return _check(m, False, start, str(e) or type(e).__name__)
    return _check(m, True, start, reply or "(an empty reply)")


async def _ask(name: str, timeout_s: float) -> str:
    from workbench.rollouts.client import ChatClient
    from workbench.runs.endpoint import resolve_endpoint

    endpoint = resolve_endpoint(name)
    client = ChatClient(endpoint.api_key, provider=endpoint.provider, request_timeout=timeout_s, max_retries=0,
                        stall_timeout=timeout_s, max_connections=1)
    async with client:
        response = await client.chat(base_url=endpoint.base_url, model=endpoint.model,
                                     messages=[{"role": "user", "content": CHECK_PROMPT}], params={"max_tokens": 8})
    content = response.message.get("content") if isinstance(response.message, dict) else None
    return str(content or "").strip()


def _check(m: ModelEndpoint, ok: bool, start: float, detail: str) -> ModelCheck:
    line = " ".join(redact(detail).split())
    return ModelCheck(m.name, m.model_id, m.base_url, ok, round(time.monotonic() - start, 3),
                      line[:197] + "…" if len(line) > 200 else line)


__all__ = ["CHECK_TIMEOUT_S", "ModelCheck", "ModelEndpoint", "add_model", "check_model", "list_models",
           "models_path", "remove_model"]
