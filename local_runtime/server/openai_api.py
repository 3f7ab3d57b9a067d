"""The OpenAI wire format: request models, and responses and stream chunks built from finished (or
running) :class:`Sequence` s. vLLM's extensions keep their names: ``return_token_ids`` (choice
``token_ids``, response ``prompt_token_ids``), ``prompt_logprobs``, ``stop_token_ids``, ``top_k``,
``ignore_eos``, ``chat_template_kwargs``, ``stop_reason``."""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from workbench_local.models.chat_template import parse_tool_calls
from workbench_local.server.generation import SamplingParams, Sequence

MAX_TOP_LOGPROBS = 20  # OpenAI's limit, and vLLM's default --max-logprobs
Bias = Annotated[float, Field(ge=-100.0, le=100.0)]


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: int = Field(1, ge=1, le=128)
    max_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, Bias] | None = None
    response_format: dict[str, Any] | None = None
    top_k: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    prompt_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    ignore_eos: bool = False


class ChatRequest(_Common):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    max_completion_tokens: int | None = Field(None, ge=0)
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False


class ChatTokensRequest(ChatRequest):
    """``/v1/chat/completions/tokens``: a chat request whose prompt is given as token ids (``tokens``),
    used as-is instead of rendering ``messages``; replies are parsed as chat replies (tool calls).
    Multi-turn rollouts send the exact tokens already sampled plus the new turn's rendering, so
    the server never re-tokenizes what the model produced (prime-rl's route of the same name)."""

    tokens: list[int] = Field(min_length=1)


class TokenizeRequest(BaseModel):
    """vLLM's ``/tokenize`` body: ``messages`` (rendered by the chat template) or ``prompt``."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False


def validation_message(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(x) for x in first.get("loc", ())) or "body"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"invalid request: {where}: {first.get('msg')}{more}"


def validation_fields(err: ValidationError) -> tuple[str | None, str]:
    """(param, code) of the first error: ``param`` the top-level field it is in, ``code`` as OpenAI
    names it (``missing_required_parameter``, ``invalid_type``, ``invalid_value``)."""
    first = err.errors()[0]
    loc = first.get("loc", ())
    kind = str(first.get("type", ""))
    code = ("missing_required_parameter" if kind == "missing" else
            "invalid_type" if kind.endswith(("_type", "_parsing")) else "invalid_value")
    return (str(loc[0]) if loc else None), code


def logit_bias_ids(bias: dict[str, float] | None, vocab: int) -> dict[int, float]:
    """``logit_bias`` keyed by token id; a ValueError naming the first key that is not an id in the vocab."""
    out: dict[int, float] = {}
    for key, value in (bias or {}).items():
        try:
            tid = int(key)
        except ValueError:
            tid = -1
        if not 0 <= tid < vocab:
            raise ValueError(f"logit_bias keys must be token ids (integers in 0..{vocab - 1}, as strings); "
                             f"got {key!r}")
        out[tid] = float(value)
    return out


def sampling_params(req: ChatRequest | CompletionRequest, max_tokens: int, logit_bias: dict[int, float] | None = None,
                    default_temperature: float = 1.0) -> SamplingParams:
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    if isinstance(req, ChatRequest):
        want_lp, top = req.logprobs, (req.top_logprobs or 0) if req.logprobs else 0
    else:
        want_lp, top = req.logprobs is not None, req.logprobs or 0
    return SamplingParams(
        max_tokens=max_tokens, temperature=default_temperature if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k or 0, stop=[s for s in stop if s],
        stop_token_ids=list(req.stop_token_ids or []), seed=req.seed, logprobs=want_lp, top_logprobs=top,
        prompt_logprobs=req.prompt_logprobs, ignore_eos=req.ignore_eos,
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
        logit_bias=dict(logit_bias or {}))


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


class TokenText:
    """Token id -> the text OpenAI's logprobs show for it (cached per server)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self._cache: dict[int, str] = {}

    def __call__(self, tid: int, as_ids: bool = False) -> str:
        if as_ids:
            return f"token_id:{tid}"
        s = self._cache.get(tid)
        if s is None:
            s = self._cache[tid] = self.tok.decode([tid], skip_special_tokens=False,
                                                   clean_up_tokenization_spaces=False)
        return s


def chat_logprobs(seq: Sequence, tt: TokenText, start: int = 0, end: int | None = None,
                  as_ids: bool = False) -> dict[str, Any] | None:
    if not seq.params.logprobs:
        return None
    content = []
    for tid, lp, top in seq.logprobs[start:end]:
        tok = tt(tid, as_ids)
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")),
                        "top_logprobs": [{"token": tt(t, as_ids), "logprob": v, "bytes": list(tt(t, as_ids).encode("utf-8"))}
                                         for t, v in top]})
    return {"content": content}


def completion_logprobs(seq: Sequence, tt: TokenText, as_ids: bool = False) -> dict[str, Any] | None:
    if not seq.params.logprobs:
        return None
    tokens, lps, tops, offsets, off = [], [], [], [], 0
    for tid, lp, top in seq.logprobs:
        tok = tt(tid, as_ids)
        tokens.append(tok)
        lps.append(lp)
        tops.append({tt(t, as_ids): v for t, v in top} if seq.params.top_logprobs else None)
        offsets.append(off)
        off += len(tok)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def chat_message(seq: Sequence, tools_active: bool) -> tuple[dict[str, Any], str | None]:
    """The assistant message and finish reason for a finished chat sequence."""
    text = seq.text
    finish = seq.finish_reason
    if tools_active:
        content, calls = parse_tool_calls(text)
        if calls:
            return ({"role": "assistant", "content": content, "tool_calls": calls},
                    "tool_calls" if finish == "stop" else finish)
    return {"role": "assistant", "content": text}, finish


def usage(seqs: list[Sequence], prompt_tokens: int) -> dict[str, int]:
    completion = sum(len(s.out_ids) for s in seqs)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def chat_response(req: ChatRequest, name: str, seqs: list[Sequence], prompt_ids: list[int], tools_active: bool,
                  tt: TokenText) -> dict[str, Any]:
    choices = []
    for s in seqs:
        message, finish = chat_message(s, tools_active)
        choice: dict[str, Any] = {"index": s.index, "message": message,
                                  "logprobs": chat_logprobs(s, tt, as_ids=req.return_tokens_as_token_ids),
                                  "finish_reason": finish, "stop_reason": s.stop_reason}
        if req.return_token_ids:
            choice["token_ids"] = list(s.out_ids)
        choices.append(choice)
    body: dict[str, Any] = {"id": new_id("chatcmpl"), "object": "chat.completion", "created": int(time.time()),
                            "model": name, "choices": choices, "usage": usage(seqs, len(prompt_ids)),
                            "policy_version": seqs[0].policy_version}
    if req.return_token_ids:
        body["prompt_token_ids"] = prompt_ids
    if req.prompt_logprobs is not None:
        body["prompt_logprobs"] = seqs[0].prompt_logprobs
    return body


def completion_response(req: CompletionRequest, name: str, seqs: list[Sequence], prompts: list[list[int]],
                        prompt_texts: list[str], tt: TokenText) -> dict[str, Any]:
    choices = []
    for s in seqs:
        p = s.index // req.n
        choice: dict[str, Any] = {"index": s.index, "text": (prompt_texts[p] if req.echo else "") + s.text,
                                  "logprobs": completion_logprobs(s, tt, req.return_tokens_as_token_ids),
                                  "finish_reason": s.finish_reason, "stop_reason": s.stop_reason}
        if req.return_token_ids:
            choice["token_ids"] = list(s.out_ids)
            choice["prompt_token_ids"] = prompts[p]
        if req.prompt_logprobs is not None:
            choice["prompt_logprobs"] = s.prompt_logprobs
        choices.append(choice)
    return {"id": new_id("cmpl"), "object": "text_completion", "created": int(time.time()), "model": name,
            "choices": choices, "usage": usage(seqs, sum(len(p) for p in prompts)),
            "policy_version": seqs[0].policy_version}
