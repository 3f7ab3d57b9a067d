"""From a validated request to what the runner needs: the context check, the sampling parameters
(``logit_bias`` keyed by token id) and the compiled constraint. Each refusal is a 400 naming its field."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
from workbench_local.server.constraints import Compiled, ConstraintError
from workbench_local.server.errors import HTTPError
from workbench_local.server.generation import SamplingParams
from workbench_local.server.openai_api import ChatRequest, CompletionRequest, logit_bias_ids, sampling_params
from workbench_local.server.runner import Engine


def check_context(context_len: int, prompt_tokens: int, max_tokens: int | None, where: str = "messages") -> None:
    """A 400 (``context_length_exceeded``) when the prompt leaves no room for a completion, in vLLM's and
    OpenAI's words. ``where``: "messages" for chat, "prompt" for completions. A prompt that fits with a
    ``max_tokens`` reaching past the context is served: the runner clips ``max_tokens`` to what is left,
    and a reply that uses it all ends with ``finish_reason`` "length" (an environment sized for a larger
    model still runs on a small one)."""
    if prompt_tokens < context_len:
        return
    head = f"This model's maximum context length is {context_len} tokens. However, "
    if max_tokens is None:
        msg = (f"{head}your {where} resulted in {prompt_tokens} tokens, which leaves no room for a completion. "
               f"Please reduce the length of the {where}.")
    else:
        msg = (f"{head}you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in the {where}, "
               f"{max_tokens} in the completion). Please reduce the length of the {where} or completion.")
    raise HTTPError(400, msg, param=where, code="context_length_exceeded")


def request_params(engine: Engine, req: ChatRequest | CompletionRequest, max_tokens: int) -> SamplingParams:
    try:
        bias = logit_bias_ids(req.logit_bias, len(engine.lm.tokenizer))
    except ValueError as e:
        raise HTTPError(400, str(e), param="logit_bias", code="invalid_value") from None
    return sampling_params(req, max_tokens, bias)


def _grammar(engine: Engine, req: ChatRequest | CompletionRequest) -> str | None:
    c = engine.constraints
    if isinstance(req, ChatRequest):
        return c.chat_grammar(req.response_format, req.tools, req.tool_choice, req.parallel_tool_calls)
    return c.completion_grammar(req.response_format)


async def request_constraint(engine: Engine, req: ChatRequest | CompletionRequest) -> Compiled | None:
    """The request's compiled grammar, or None when its reply is free. A grammar seen before is a cache
    hit; a new one compiles on a thread, off the event loop."""
    def build() -> Compiled | None:
        lark = _grammar(engine, req)
        return None if lark is None else engine.constraints.compile(lark, _param(req))

    if not _may_constrain(req):
        return None
    try:
        return await asyncio.to_thread(build)
    except ConstraintError as e:
        raise HTTPError(400, e.message, param=e.param, code="invalid_value") from None


def _may_constrain(req: Any) -> bool:
    return req.response_format is not None or (bool(getattr(req, "tools", None))
                                               and getattr(req, "tool_choice", None) not in (None, "auto"))


def _param(req: Any) -> str:
    return "response_format" if req.response_format is not None else "tools"


class PromptCache:
    """The token ids of the chat prompts rendered last: the rollouts of one group send the same
    messages, so the chat template and the tokenizer run once for all of them.

    The key is the exact rendering input, its keys in the order they came: a template renders a tool's
    schema as JSON in that order, so two requests that differ only in key order render differently."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self.ids: OrderedDict[bytes, list[int]] = OrderedDict()
        self.hits = 0

    def prompt(self, req: ChatRequest, render: Callable[[], list[int]]) -> list[int]:
        key = orjson.dumps([req.messages, req.tools, req.add_generation_prompt, req.continue_final_message,
                            req.chat_template_kwargs])
        ids = self.ids.get(key)
        if ids is None:
            ids = self.ids[key] = render()
            if len(self.ids) > self.size:
                self.ids.popitem(last=False)
        else:
            self.hits += 1
            self.ids.move_to_end(key)
        return list(ids)
