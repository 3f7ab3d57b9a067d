"""Whether a model can hold an environment's first prompts, checked once before a run's rollouts: a
server that advertises its context (``max_model_len`` in ``/v1/models``, as vLLM and ``workbench serve``
do) and counts tokens (vLLM's ``/tokenize``) is asked for both; anything else is not checked. A run none
of whose first prompts fits is refused with one sentence instead of failing every rollout the same way;
one where some fit runs, and the rest end as ``model.context_length`` errors, as the server contract says."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from workbench.errors import EndpointFieldError
from workbench.rollouts.client import ChatClient

#: At most this many first prompts are counted: the longest and the shortest by characters, half each.
SAMPLE = 32


async def advertised_context(client: ChatClient, base_url: str, model: str) -> int | None:
    """The context the endpoint says ``model`` holds, or None when it does not say."""
    try:
        entries = await client.list_models(base_url)
    except Exception:
        return None
    found = next((m.get("max_model_len") for m in entries or () if m.get("id") == model), None)
    return found if isinstance(found, int) and not isinstance(found, bool) and found > 0 else None


async def check_first_prompts_fit(client: ChatClient, base_url: str, model: str, env: Any, tasks: list[Any],
                                  *, field: str = "EvalOptions.model") -> None:
    """Refuse (:class:`EndpointFieldError` on ``field``) a model whose advertised context holds none of
    ``tasks``' first prompts: the system prompt, the task's messages and the harness's own tool schemas."""
    if getattr(env.harness, "needs_proxy", False) or not tasks:
        return  # an agent program writes its own prompts
    limit = await advertised_context(client, base_url, model)
    if limit is None:
        return
    system = getattr(env.harness, "system_prompt", None)
    tools = getattr(getattr(env.harness, "toolbox", None), "schemas", None) or None
    prompts = sorted((t.messages(system) for t in tasks), key=lambda m: len(orjson.dumps(m)))
    if len(prompts) > SAMPLE:
        prompts = prompts[: SAMPLE // 2] + prompts[-SAMPLE // 2:]
    base = base_url.rstrip("/")
    root = base[: -len("/v1")] if base.endswith("/v1") else base

    async def count(messages: list[Any]) -> int:
        payload: dict[str, Any] = {"model": model, "messages": messages, "add_generation_prompt": True}
        if tools:
            payload["tools"] = tools
        return int(orjson.loads(await client.post_json(root + "/tokenize", payload, model))["count"])

    try:
        sizes = await asyncio.gather(*(count(m) for m in prompts))
    except Exception:
        return  # no /tokenize here: the size is not known
    if min(sizes) >= limit:
        shortest = f" (its shortest: {min(sizes)})" if min(sizes) != max(sizes) else ""
        raise EndpointFieldError(field, model, template="model {value!r} holds {limit} tokens; environment "
                                 "{env}'s longest first prompt is {longest} tokens{shortest}: no task fits; give "
                                 "{field} a model with a longer context", limit=limit, env=env.name,
                                 longest=max(sizes), shortest=shortest)
