"""``workbench serve``: an OpenAI-compatible model server on torch + transformers (aiohttp).

Routes: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/responses`` and ``/v1/messages`` (the
Responses and Anthropic Messages APIs, translated to chat: wire_routes.py), ``/v1/models``, ``/health`` (and ``/stats``),
``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``, ``/tokenize`` and ``/detokenize``
(vLLM's names and bodies), and ``/v1/chat/completions/tokens`` (a chat request whose prompt comes as
token ids: how multi-turn rollouts keep the sampled tokens exact; see workbench/rollouts/continuation.py), and
``POST /update_weights`` (full fine-tuning: the base weights replaced in place, as prime-rl's vLLM server
does). Every response carries ``policy_version``, an integer naming the weights that produced it: for
the base model 0, or the version its weights were last updated to; for an adapter, the ``policy_version`` given when loading it (an extension of vLLM's body),
else the server's adapter-load counter at that time. Run it with ``python -m workbench_local.server``
or ``workbench serve``.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
from typing import Any, TypeVar

import orjson
from aiohttp import web
from pydantic import BaseModel, ValidationError
from workbench_local.models.chat_template import NO_TEMPLATE_HINT, ChatFormatError, normalize_messages
from workbench_local.models.loading import LoadedModel
from workbench_local.server.constraints import Compiled
from workbench_local.server.errors import HTTPError
from workbench_local.server.generation import Sequence
from workbench_local.server.openai_api import (
    ChatRequest,
    ChatTokensRequest,
    CompletionRequest,
    TokenizeRequest,
    chat_response,
    completion_response,
    validation_fields,
    validation_message,
)
from workbench_local.server.prepare import PromptCache, check_context, request_constraint, request_params
from workbench_local.server.runner import AdapterError, Engine
from workbench_local.server.scheduler import QueueFull, Scheduler
from workbench_local.server.state import state_of
from workbench_local.server.streaming import attach_queue, stream_chat, stream_completion


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json")


async def read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        raise HTTPError(400, "the request body is empty; send a JSON object")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise HTTPError(400, f"the request body is not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "the request body must be a JSON object")
    return data


def resolve_model(engine: Engine, name: str | None) -> str:
    if not name or name == engine.lm.name:
        return engine.lm.name
    if name in engine.adapters:
        return name
    raise HTTPError(404, f"The model `{name}` does not exist. Served: "
                         f"{', '.join([engine.lm.name, *engine.adapters])}.", param="model", code="model_not_found")


def make_sequences(engine: Engine, prompt: list[int], params: Any, model: str, n: int, base_index: int = 0,
                   constraint: Compiled | None = None) -> list[Sequence]:
    seqs = []
    for i in range(n):
        p = copy.copy(params)
        p.stop, p.stop_token_ids = list(params.stop), list(params.stop_token_ids)
        if params.seed is not None:
            p.seed = params.seed + i
        seq = Sequence(prompt_ids=list(prompt), params=p, model=model, index=base_index + i)
        if constraint is not None:
            seq.matcher = engine.constraints.matcher(constraint)
        engine.prepare(seq)
        seqs.append(seq)
    return seqs


def submit(sched: Scheduler, seqs: list[Sequence]) -> asyncio.Future[None]:
    if len(seqs) > sched.max_batch:
        raise HTTPError(400, f"this request needs {len(seqs)} sequences but the server batches at most "
                             f"{sched.max_batch} (lower n, or restart with a larger --max-batch)", param="n",
                        code="invalid_value")
    try:
        return sched.submit(seqs)
    except QueueFull as e:
        raise HTTPError(429, str(e)) from None


def check_errors(seqs: list[Sequence]) -> None:
    for s in seqs:
        if s.error:
            raise HTTPError(500, s.error)


def render_text(lm: LoadedModel, messages: Any, tools: list[dict[str, Any]] | None, add_generation_prompt: bool,
                continue_final_message: bool = False, template_kwargs: dict[str, Any] | None = None) -> str:
    """The chat template's rendering of ``messages``; a 400 naming what cannot be rendered."""
    if not lm.has_chat_template:
        raise HTTPError(400, f"model {lm.name} has no chat template, so it cannot take chat messages; {NO_TEMPLATE_HINT}")
    try:
        return lm.tokenizer.apply_chat_template(
            normalize_messages(messages), tools=tools or None, tokenize=False,
            add_generation_prompt=add_generation_prompt and not continue_final_message,
            continue_final_message=continue_final_message, **(template_kwargs or {}))
    except ChatFormatError as e:
        raise HTTPError(400, str(e), param="messages") from None
    except Exception as e:  # jinja errors raised by the template itself ("roles must alternate", ...)
        raise HTTPError(400, f"the chat template cannot render these messages ({type(e).__name__}: {e})",
                        param="messages") from None


def encode(lm: LoadedModel, text: str) -> list[int]:
    return list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])


def render_chat(lm: LoadedModel, req: ChatRequest, cache: PromptCache | None = None) -> tuple[list[int], bool]:
    """(prompt ids, whether replies are parsed for tool calls). A tool_choice that forces a call is
    the grammar's to enforce (constraints.py), not a prefix of the prompt.

    A :class:`ChatTokensRequest` brings its prompt as token ids; they are used as they are."""
    tools_active = bool(req.tools) and req.tool_choice != "none"
    if isinstance(req, ChatTokensRequest):
        vocab = len(lm.tokenizer)
        if any(t < 0 or t >= vocab for t in req.tokens):
            raise HTTPError(400, f"'tokens' must be token ids in 0..{vocab - 1}", param="tokens", code="invalid_value")
        return list(req.tokens), tools_active

    def render() -> list[int]:
        return encode(lm, render_text(lm, req.messages, req.tools, req.add_generation_prompt,
                                      req.continue_final_message, req.chat_template_kwargs))

    return (render() if cache is None else cache.prompt(req, render)), tools_active


_Req = TypeVar("_Req", bound=BaseModel)


async def parse_request(request: web.Request, model: type[_Req]) -> _Req:
    """The request body as ``model``; a 400 naming the bad field when it does not validate."""
    body = await read_json(request)
    try:
        return model.model_validate(body)
    except ValidationError as e:
        param, code = validation_fields(e)
        raise HTTPError(400, validation_message(e), param=param, code=code) from None


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await answer_chat(request, await parse_request(request, ChatRequest))


async def chat_completions_tokens(request: web.Request) -> web.StreamResponse:
    return await answer_chat(request, await parse_request(request, ChatTokensRequest))


async def answer_chat(request: web.Request, req: ChatRequest, translation: Any = None) -> web.StreamResponse:
    """A chat request, answered as chat, or in another API through ``translation`` (see wire_routes.py)."""
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    model = resolve_model(engine, req.model)
    prompt, tools_active = render_chat(engine.lm, req, state.prompts)
    max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
    check_context(engine.lm.context_len, len(prompt), max_tokens)
    params = request_params(engine, req, engine.lm.context_len if max_tokens is None else max_tokens)
    seqs = make_sequences(engine, prompt, params, model, req.n, constraint=await request_constraint(engine, req))
    tt = state.token_text
    if req.stream:
        q = attach_queue(seqs)
        fut = submit(sched, seqs)
        return await stream_chat(request, req, model, seqs, q, fut, prompt, tools_active, tt, translation)
    await submit(sched, seqs)
    check_errors(seqs)
    body = chat_response(req, model, seqs, prompt, tools_active, tt)
    return json_response(body if translation is None else translation.whole(body))


async def completions(request: web.Request) -> web.StreamResponse:
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    req = await parse_request(request, CompletionRequest)
    model = resolve_model(engine, req.model)
    tok = engine.lm.tokenizer
    raw = req.prompt
    if isinstance(raw, str):
        items: list[str | list[int]] = [raw]
    elif raw and all(isinstance(x, int) for x in raw):
        items = [list(raw)]  # type: ignore[arg-type]
    else:
        items = list(raw)  # type: ignore[arg-type]
    if not items:
        raise HTTPError(400, "'prompt' must not be empty", param="prompt")
    prompts: list[list[int]] = []
    texts: list[str] = []
    for it in items:
        if isinstance(it, str):
            prompts.append(list(tok(it)["input_ids"]))
            texts.append(it)
        else:
            if any(t < 0 or t >= len(tok) for t in it):
                raise HTTPError(400, f"prompt token ids must be in 0..{len(tok) - 1}", param="prompt")
            prompts.append(list(it))
            texts.append(tok.decode(it))
        if not prompts[-1]:
            raise HTTPError(400, "a prompt encodes to no tokens", param="prompt")
    seqs: list[Sequence] = []
    constraint = await request_constraint(engine, req)
    for i, p in enumerate(prompts):
        check_context(engine.lm.context_len, len(p), req.max_tokens, "prompt")
        params = request_params(engine, req, 16 if req.max_tokens is None else req.max_tokens)
        seqs += make_sequences(engine, p, params, model, req.n, base_index=i * req.n, constraint=constraint)
    tt = state.token_text
    if req.stream:
        q = attach_queue(seqs)
        fut = submit(sched, seqs)
        return await stream_completion(request, req, model, seqs, q, fut, prompts, tt)
    await submit(sched, seqs)
    check_errors(seqs)
    return json_response(completion_response(req, model, seqs, prompts, texts, tt))


async def tokenize(request: web.Request) -> web.Response:
    """vLLM's ``/tokenize``: the ids of a chat rendering (``messages``) or of a plain ``prompt``."""
    engine = state_of(request).engine
    req = await parse_request(request, TokenizeRequest)
    resolve_model(engine, req.model)
    lm = engine.lm
    if (req.messages is None) == (req.prompt is None):
        raise HTTPError(400, "send exactly one of 'messages' (a chat to render) or 'prompt' (text)")
    if req.messages is not None:
        ids = encode(lm, render_text(lm, req.messages, req.tools, req.add_generation_prompt,
                                     req.continue_final_message, req.chat_template_kwargs))
    else:
        ids = list(lm.tokenizer(req.prompt, add_special_tokens=req.add_special_tokens)["input_ids"])
    out: dict[str, Any] = {"count": len(ids), "max_model_len": lm.context_len, "tokens": ids}
    if req.return_token_strs:
        out["token_strs"] = lm.tokenizer.convert_ids_to_tokens(ids)
    return json_response(out)


async def detokenize(request: web.Request) -> web.Response:
    engine = state_of(request).engine
    body = await read_json(request)
    ids = body.get("tokens")
    vocab = len(engine.lm.tokenizer)
    if not isinstance(ids, list) or not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
        raise HTTPError(400, f"send {{\"tokens\": [ids in 0..{vocab - 1}]}}", param="tokens")
    return json_response({"prompt": engine.lm.tokenizer.decode(ids)})


def _model_entries(request: web.Request) -> list[dict[str, Any]]:
    state = state_of(request)
    engine, created = state.engine, int(state.started)
    data = [{"id": engine.lm.name, "object": "model", "created": created, "owned_by": "workbench",
             "root": engine.lm.source, "parent": None, "max_model_len": engine.lm.context_len,
             "policy_version": engine.policy_version(engine.lm.name)}]
    for ad in engine.adapters.values():
        data.append({"id": ad.name, "object": "model", "created": int(ad.loaded_at), "owned_by": "workbench",
                     "root": ad.path, "parent": engine.lm.name, "max_model_len": engine.lm.context_len,
                     "policy_version": engine.policy_version(ad.name)})
    return data


async def list_models(request: web.Request) -> web.Response:
    return json_response({"object": "list", "data": _model_entries(request)})


async def get_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: one served model (the base or a loaded adapter), as OpenAI answers it."""
    want = request.match_info["model_id"]
    entries = _model_entries(request)
    found = next((m for m in entries if m["id"] == want), None)
    if found is None:
        raise HTTPError(404, f"The model `{want}` does not exist; served: {', '.join(m['id'] for m in entries)}.",
                        param="model", code="model_not_found")
    return json_response(found)


async def health(request: web.Request) -> web.Response:
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    st = sched.stats
    return json_response({
        "status": "ok", "model": engine.lm.name, "source": engine.lm.source, "pid": os.getpid(),
        "policy_version": engine.policy_version(engine.lm.name), "adapters": sorted(engine.adapters),
        "context_len": engine.lm.context_len, "warnings": list(engine.lm.warnings), "device": engine.lm.device, "max_batch": sched.max_batch,
        "max_queue": sched.max_queue, "queued": sched.queued, "running": sched.running, "batches": st.batches,
        "sequences": st.sequences, "max_batch_seen": st.max_batch_seen, "last_batch": st.last_batch,
        "batch_sizes": {str(k): v for k, v in sorted(st.batch_sizes.items())}, "rejected": st.rejected,
        "tokens_generated": engine.tokens_generated, "prefill_rows": engine.prefill_rows,
        "adapter_slots": len(engine.adapters) + len(engine.free), "prompt_cache_hits": state.prompts.hits,
        "busy_s": round(engine.busy_s, 3), "uptime_s": round(time.time() - state.started, 1)})


async def load_lora(request: web.Request) -> web.Response:
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    body = await read_json(request)
    name, path, version = body.get("lora_name"), body.get("lora_path"), body.get("policy_version")
    if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
        raise HTTPError(400, "send {\"lora_name\": NAME, \"lora_path\": PATH} (and optionally \"policy_version\": INT)")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise HTTPError(400, "policy_version must be an integer (the training step that produced the adapter)")
    try:
        ad = await sched.in_worker(engine.load_adapter, name, path, version)
    except AdapterError as e:
        raise HTTPError(e.status, e.message) from None
    return json_response({"status": "ok", "message": f"Success: LoRA adapter '{name}' added successfully.",
                          "lora_name": name, "policy_version": engine.policy_version(ad.name)})


async def unload_lora(request: web.Request) -> web.Response:
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    body = await read_json(request)
    name = body.get("lora_name")
    if not isinstance(name, str) or not name:
        raise HTTPError(400, "send {\"lora_name\": NAME}")
    try:
        await sched.in_worker(engine.unload_adapter, name)
    except AdapterError as e:
        raise HTTPError(e.status, e.message) from None
    return json_response({"status": "ok", "message": f"Success: LoRA adapter '{name}' removed successfully.",
                          "lora_name": name})


async def update_weights(request: web.Request) -> web.Response:
    """Full fine-tuning's counterpart of ``load_lora_adapter``: the base model's weights are replaced
    in place (``{"weight_dir": PATH, "policy_version": INT}``), between batches."""
    state = state_of(request)
    engine, sched = state.engine, state.scheduler
    body = await read_json(request)
    path, version = body.get("weight_dir"), body.get("policy_version")
    if not isinstance(path, str) or not path:
        raise HTTPError(400, "send {\"weight_dir\": PATH} (and optionally \"policy_version\": INT)")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        raise HTTPError(400, "policy_version must be an integer (the training step that produced the weights)")
    try:
        new = await sched.in_worker(engine.update_weights, path, version)
    except AdapterError as e:
        raise HTTPError(e.status, e.message) from None
    return json_response({"status": "ok", "model": engine.lm.name, "policy_version": new})


def add_routes(app: web.Application) -> None:
    """The OpenAI routes (and vLLM's ``/tokenize``, its adapter and weight updates, ``/health``)."""
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/chat/completions/tokens", chat_completions_tokens)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model_id}", get_model)
    app.router.add_get("/health", health)
    app.router.add_get("/stats", health)
    app.router.add_post("/v1/load_lora_adapter", load_lora)
    app.router.add_post("/v1/unload_lora_adapter", unload_lora)
    app.router.add_post("/update_weights", update_weights)
