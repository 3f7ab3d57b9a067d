"""The judge of score_model and label_model graders: a model registered with ``workbench models add``.

A grader names an OpenAI model (``gpt-4o-2024-08-06``). The environment asks the registered model of that
name, or, when it is given one, the judge the environment's ``judge`` argument names for every model
grader (``workbench eval ENV -a '{"judge": "NAME"}'``; ``import-eval --judge NAME`` makes it the default).
``local`` (or ``tiny``) is the embedded model. Anything else is refused when the environment loads.
The judge's calls go through their own client and are not part of the rollout's trace.
"""

from __future__ import annotations

from typing import Any

from workbench.errors import EnvLoadError

EMBEDDED = ("local", "tiny")
JUDGE_TIMEOUT_S = 300.0


class EndpointJudge:
    """Chat completions of one named model; its endpoint is resolved at the first call."""

    def __init__(self, name: str, endpoint: Any = None) -> None:
        self.name = name
        self._endpoint = endpoint  # a workbench.runs.endpoint.Endpoint; None: resolved from ``name``

    async def ask(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
        from workbench.rollouts.client import ChatClient
        from workbench.runs.endpoint import resolve_endpoint

        if self._endpoint is None:
            self._endpoint = resolve_endpoint(self.name)
        ep = self._endpoint
        client = ChatClient(ep.api_key, provider=ep.provider, request_timeout=JUDGE_TIMEOUT_S, max_connections=4)
        async with client:
            response = await client.chat(base_url=ep.base_url, model=ep.model, messages=messages, params=params)
        content = response.message.get("content") if isinstance(response.message, dict) else None
        return content if isinstance(content, str) else str(content or "")


def resolve_judges(models: list[str], judge: str | None) -> dict[str, EndpointJudge]:
    """A judge for each grader model: ``judge`` for all when given, else the registered model of its name."""
    if not models:
        return {}
    from workbench.config.models import load_models

    registered = load_models()
    out = {}
    for model in models:
        name = judge or model
        if name not in registered and name not in EMBEDDED:
            how = (f"register it (workbench models add {name} --base-url URL --model-id ID)" if judge else
                   f"register a model named {name!r} (workbench models add), or name a registered judge with "
                   "-a '{\"judge\": \"NAME\"}'")
            raise EnvLoadError(f"the model graders' judge {name!r} is no registered model: {how}")
        out[model] = EndpointJudge(name)
    return out
