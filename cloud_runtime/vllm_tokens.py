"""``/v1/chat/completions/tokens`` for vLLM, built on vLLM's public ``/v1/completions``.

Token continuation (``workbench/rollouts/continuation.py``) sends every follow-up call of a multi-turn
rollout as exact prompt token ids to ``/v1/chat/completions/tokens``. vLLM has no such route, but
its OpenAI ``/v1/completions`` takes a prompt as token ids and returns what the trace needs
(``return_token_ids``, ``logprobs``). The inference node's adapter gate
(``vllm_gate.AdapterGate``) serves the route by translating:

* :func:`completion_request`: the chat request (``tokens`` + sampling fields) into a completions
  request whose ``prompt`` is those ids (plus the ids of a forced tool-call prefix, for
  ``tool_choice`` ``required`` or a named function, as the embedded server does). ``max_tokens``
  defaults to what is left of the context, like vLLM's chat route (its completions default is 16).
* :func:`chat_response`: the completion back into a ``chat.completion``: the reply text parsed for
  ``<tool_call>`` blocks (the ``hermes`` format, the one the embedded server parses), completions
  logprobs into chat logprobs, vLLM's ``token_ids`` / ``prompt_token_ids`` / ``prompt_logprobs``
  where the chat route puts them, and the adapter's ``policy_version``.

Pure functions: tested offline, and end to end against the embedded server standing in for vLLM
(both speak the same ``/v1/completions``). vLLM itself has not run them here.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

from workbench_local.models.chat_template import ChatFormatError, forced_tool_prefix, parse_tool_calls

#: Tool-call formats the route can parse (ModalSpec.tool_call_parser); "" means no tools are parsed.
PARSERS = frozenset({"hermes", ""})

#: Fields passed through unchanged: vLLM's completions request has each of them with the chat meaning.
PASSTHROUGH = ("model", "n", "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
               "presence_penalty", "frequency_penalty", "repetition_penalty", "ignore_eos", "min_tokens",
               "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "logit_bias",
               "user", "priority", "return_token_ids", "return_tokens_as_token_ids", "prompt_logprobs")


class TokenRouteError(ValueError):
    """A request the route refuses (HTTP 400), with the field at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": "BadRequestError", "param": self.param, "code": 400}}


@dataclass(frozen=True, slots=True)
class TokenRoute:
    """What the response translation needs to know about its request."""

    model: str
    prefix: str  # forced tool-call text already in the prompt: it belongs to the reply
    tools_active: bool
    want_logprobs: bool
    want_token_ids: bool


def tool_prefix(body: dict[str, Any]) -> str:
    """The forced tool-call text for the request's ``tool_choice`` ('' for none/auto)."""
    try:
        return forced_tool_prefix(body.get("tool_choice"), body.get("tools"))
    except ChatFormatError as e:
        raise TokenRouteError(str(e), "tool_choice") from None


def completion_request(body: dict[str, Any], *, max_model_len: int | None = None,
                       prefix_ids: list[int] | None = None, parser: str = "hermes") -> tuple[dict[str, Any], TokenRoute]:
    """The ``/v1/completions`` body for a ``/v1/chat/completions/tokens`` body, and its context."""
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not tokens:
        raise TokenRouteError("'tokens' must be a non-empty list of token ids", "tokens")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        raise TokenRouteError("'tokens' must hold non-negative integer token ids", "tokens")
    if body.get("stream"):
        raise TokenRouteError("the token route answers whole responses; send stream: false", "stream")
    if body.get("use_beam_search"):
        raise TokenRouteError("beam search is not available on the token route", "use_beam_search")
    if parser not in PARSERS:
        raise TokenRouteError(f"the token route parses tool calls as hermes only, not {parser!r}")
    prefix = tool_prefix(body)
    prompt = [*tokens, *(prefix_ids or [])]
    out: dict[str, Any] = {k: body[k] for k in PASSTHROUGH if body.get(k) is not None}
    out["prompt"] = prompt
    out["stream"] = False
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        out["max_tokens"] = int(limit)
    elif max_model_len is not None:
        left = max_model_len - len(prompt)
        if left < 1:
            raise TokenRouteError(f"the prompt has {len(prompt)} tokens, which leaves nothing of the context of "
                                  f"{max_model_len}", "tokens")
        out["max_tokens"] = left
    want_lp = bool(body.get("logprobs"))
    if want_lp:
        out["logprobs"] = int(body.get("top_logprobs") or 0)
    ctx = TokenRoute(str(body.get("model") or ""), prefix, bool(body.get("tools")) and body.get("tool_choice") != "none"
                     and parser == "hermes", want_lp, bool(body.get("return_token_ids")))
    return out, ctx


def chat_logprobs(lp: dict[str, Any] | None, want: bool) -> dict[str, Any] | None:
    """Completions logprobs (``tokens``, ``token_logprobs``, ``top_logprobs``) as chat logprobs."""
    if not want or not lp:
        return None
    content = []
    tops = lp.get("top_logprobs") or [None] * len(lp.get("tokens") or [])
    for tok, value, top in zip(lp.get("tokens") or [], lp.get("token_logprobs") or [], tops, strict=False):
        content.append({"token": tok, "logprob": value, "bytes": list(str(tok).encode("utf-8")),
                        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(str(t).encode("utf-8"))}
                                         for t, v in (top or {}).items()]})
    return {"content": content}


def chat_message(text: str, finish: str | None, ctx: TokenRoute) -> tuple[dict[str, Any], str | None]:
    """The assistant message (tool calls parsed) and finish reason for a reply's text."""
    text = ctx.prefix + text
    if ctx.tools_active:
        content, calls = parse_tool_calls(text)
        if calls:
            return {"role": "assistant", "content": content, "tool_calls": calls}, \
                "tool_calls" if finish == "stop" else finish
    return {"role": "assistant", "content": text}, finish


def chat_response(completion: dict[str, Any], ctx: TokenRoute, *, policy_version: int | None = None) -> dict[str, Any]:
    """A ``/v1/completions`` response as the ``chat.completion`` the token route answers."""
    choices: list[dict[str, Any]] = []
    prompt_ids = completion.get("prompt_token_ids")
    prompt_lps = completion.get("prompt_logprobs")
    for c in completion.get("choices") or []:
        message, finish = chat_message(str(c.get("text") or ""), c.get("finish_reason"), ctx)
        choice: dict[str, Any] = {"index": c.get("index", len(choices)), "message": message,
                                  "logprobs": chat_logprobs(c.get("logprobs"), ctx.want_logprobs),
                                  "finish_reason": finish, "stop_reason": c.get("stop_reason")}
        if ctx.want_token_ids and c.get("token_ids") is not None:
            choice["token_ids"] = list(c["token_ids"])
        prompt_ids = prompt_ids if prompt_ids is not None else c.get("prompt_token_ids")
        prompt_lps = prompt_lps if prompt_lps is not None else c.get("prompt_logprobs")
        choices.append(choice)
    body: dict[str, Any] = {"id": "chatcmpl-" + secrets.token_hex(12), "object": "chat.completion",
                            "created": int(completion.get("created") or time.time()),
                            "model": completion.get("model") or ctx.model, "choices": choices,
                            "usage": completion.get("usage")}
    if ctx.want_token_ids and prompt_ids is not None:
        body["prompt_token_ids"] = list(prompt_ids)
    if prompt_lps is not None:
        body["prompt_logprobs"] = prompt_lps
    version = completion.get("policy_version", policy_version)
    if version is not None:
        body["policy_version"] = version
    return body


# -- the route, served by the adapter gate ---------------------------------------------------------------
async def _json(gate: Any, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    import orjson

    async with gate.session.request(method, url, data=orjson.dumps(body) if body is not None else None,
                                    headers={"Content-Type": "application/json"}) as r:
        raw = await r.read()
        try:
            return r.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return r.status, {"error": {"message": raw.decode(errors="replace")[:500]}}


async def max_model_len(gate: Any) -> int | None:
    """vLLM's context length, from its ``/v1/models`` card (once per gate)."""
    if getattr(gate, "_max_model_len", None) is None:
        status, models = await _json(gate, "GET", gate.upstreams[0] + "/v1/models")
        cards = models.get("data") if status == 200 and isinstance(models, dict) else None
        gate._max_model_len = next((int(c["max_model_len"]) for c in cards or () if c.get("max_model_len")), None)
    return gate._max_model_len


async def serve_token_route(gate: Any, request: Any) -> Any:
    """``POST /v1/chat/completions/tokens`` on the gate: translate, ask the least-busy upstream's
    ``/v1/completions``, translate back (see the module doc)."""
    from aiohttp import ClientError, web

    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        return web.json_response(TokenRouteError("the body is not a JSON object").body(), status=400)
    try:
        prefix = tool_prefix(body)
        prefix_ids: list[int] = []
        if prefix:
            status, tok = await _json(gate, "POST", gate.upstreams[0] + "/tokenize",
                                      {"model": body.get("model"), "prompt": prefix, "add_special_tokens": False})
            if status != 200:
                return web.json_response(tok, status=status)
            prefix_ids = list(tok["tokens"])
        upstream, ctx = completion_request(body, max_model_len=await max_model_len(gate), prefix_ids=prefix_ids,
                                           parser=gate.tool_call_parser)
    except TokenRouteError as e:
        return web.json_response(e.body(), status=400)
    except (ClientError, OSError) as e:
        return web.json_response({"error": {"message": f"inference upstream failed: {e}"}}, status=502)
    up = gate.pick()
    gate.inflight[up] += 1
    gate.served[up] += 1
    try:
        status, out = await _json(gate, "POST", up + "/v1/completions", upstream)
    except (ClientError, OSError) as e:
        return web.json_response({"error": {"message": f"inference upstream {up} failed: {e}",
                                            "type": "upstream_error"}}, status=502)
    finally:
        gate.inflight[up] -= 1
    if status != 200:
        return web.json_response(out, status=status)  # vLLM's own error (unknown model, prompt too long...)
    return web.json_response(chat_response(out, ctx, policy_version=gate.version_of(ctx.model)))


__all__ = ["PARSERS", "PASSTHROUGH", "TokenRoute", "TokenRouteError", "chat_logprobs", "chat_message",
           "chat_response", "completion_request", "max_model_len", "serve_token_route", "tool_prefix"]
