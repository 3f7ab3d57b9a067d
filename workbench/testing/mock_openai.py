"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted behaviour, for tests and benchmarks.

Modes (``--mode`` or the ``mode`` argument):

- ``instant``: answer every chat request at once with a fixed text (``--reply``).
- ``arithmetic``: solve ``What is A op B`` prompts (answers correctly with probability ``--accuracy``).
  With ``--instruction-accuracy '{"phrase": 0.9, ...}'`` the accuracy depends on the system prompt: the
  highest accuracy among the phrases it contains (case-insensitive), else ``--accuracy``; then whether a
  question is answered right is a fixed function of the question (a hash below the accuracy), so the
  same prompt always scores the same and a more accurate one solves a superset.
- ``script``: replies come from a JSON list given with ``--script`` (cycled per request), each either a
  string (assistant text), ``{"tool_calls": [...]}``, ``{"status": 500}``, ``{"raw": "not json"}`` or
  ``{"sleep": seconds, ...}``. With ``--by-turn`` the reply is not cycled over all requests but chosen by
  the conversation's own progress: item K answers a request holding K assistant messages (the last item
  answers any later turn), so concurrent scripted multi-turn rollouts each follow the script.
- ``echo``: the assistant repeats the last user message.
- ``rules``: ``--rules '[{"contains": "text", "reply": "10"}, {"reply": "0"}]'``: the reply of the first rule
  whose ``contains`` the last user message holds (case-insensitive; a rule without one matches anything).

Token knobs: ``--tokens`` makes it behave like a token-returning server (vLLM/workbench): it
honours ``return_token_ids`` and ``logprobs`` with a toy word-level tokenizer and chat template,
and lists its models as ``owned_by: vllm``; ``--drift`` re-renders earlier assistant turns
without their last word, as a template that strips content would (a multi-turn token mismatch).

Provider knobs: ``--prefix /v1beta/openai`` serves the API under another path (Gemini's OpenAI-compatible
endpoint; ``/api/v1`` is OpenRouter's); ``--flavor gemini`` lists models as Gemini's compatibility layer
does (``models/<id>``, owned by google); ``--flavor openrouter`` adds the fields OpenRouter's responses
carry beyond OpenAI's (``provider``, each choice's ``native_finish_reason``, ``usage.cost`` and
``prompt_tokens_details``) and lists models with their ``pricing`` and ``context_length``.

Gate knob: ``--hold`` keeps every chat request waiting until ``POST /release`` (so a test can act while
requests are in flight, whatever the machine's speed).

Failure knobs: ``--fail-first K --fail-status S`` (the first K requests fail with S, then succeed),
``--require-key KEY`` (401 without it), ``--models a,b`` (404 for other models).

What it received: ``GET /stats`` answers ``{"requests": N}`` (chat requests so far) and ``GET /requests``
answers ``{"requests": [body, ...]}``, the JSON bodies of the chat requests it received, oldest first, as
sent (so a test can check what a client, or a proxy in front of the mock, really sent). Bodies are kept in
every mode but ``instant`` (the benchmarks' mode, where they would only pile up); there the list is empty.

Run: ``python -m workbench.testing.mock_openai --port 0`` prints ``READY <port>`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import random
import re
import sys
import time
import zlib
from typing import Any

import orjson
from aiohttp import web

_NUM = re.compile(r"(-?\d+)\s*([-+*x×])\s*(-?\d+)")


def _problem(text: str) -> tuple[str, int] | None:
    """The last ``A op B`` written in ``text`` and its value, or None."""
    matches = list(_NUM.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return m.group(0), a + b if op == "+" else a - b if op == "-" else a * b


def _arith(text: str, accuracy: float, rng: random.Random) -> str:
    found = _problem(text)
    if found is None:
        return "I don't know."
    val = found[1]
    if rng.random() >= accuracy:
        val += rng.choice([-2, -1, 1, 3, 10])
    return str(val) if rng.random() < 0.5 else f"The answer is {val}"


def _arith_fixed(text: str, accuracy: float) -> str:
    """``_arith`` with the error decided by the problem itself: right when its hash is below ``accuracy``."""
    found = _problem(text)
    if found is None:
        return "I don't know."
    problem, val = found
    return str(val if int(hashlib.sha256(problem.encode()).hexdigest()[:8], 16) / 2**32 < accuracy else val + 1)


_ROLE_IDS = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
_END = 5


def toy_tokens(text: str) -> list[int]:
    return [100 + zlib.crc32(w.encode()) % 50000 for w in text.split()]


def _msg_text(m: dict[str, Any]) -> str:
    parts = [str(m.get("content") or "")]
    for tc in m.get("tool_calls") or ():
        fn = tc.get("function") or {}
        parts.append(f"{fn.get('name', '')} {fn.get('arguments', '')}")
    return " ".join(p for p in parts if p)


def toy_render(messages: list[dict[str, Any]], drift: bool = False) -> list[int]:
    """The toy chat template: [role] words... [end] per message, then the generation prompt."""
    ids: list[int] = []
    for m in messages:
        text = _msg_text(m)
        if drift and m.get("role") == "assistant":
            text = " ".join(text.split()[:-1])
        ids.append(_ROLE_IDS.get(str(m.get("role")), 6))
        ids.extend(toy_tokens(text))
        ids.append(_END)
    ids.append(_ROLE_IDS["assistant"])
    return ids


class MockOpenAI:
    def __init__(self, mode: str = "instant", reply: str = "42", script: list[Any] | None = None,
                 accuracy: float = 0.7, fail_first: int = 0, fail_status: int = 500, require_key: str | None = None,
                 models: list[str] | None = None, seed: int = 0, latency_s: float = 0.0, tokens: bool = False,
                 drift: bool = False, by_turn: bool = False,
                 instruction_accuracy: dict[str, float] | None = None, prefix: str = "/v1",
                 flavor: str = "openai", rules: list[dict[str, str]] | None = None, hold: bool = False) -> None:
        self.rules = rules or []
        self.hold = hold
        self.released: asyncio.Event | None = None  # made on the server's loop
        self.tokens, self.drift = tokens, drift
        self.prefix, self.flavor = "/" + prefix.strip("/"), flavor
        self.instruction_accuracy = {k.lower(): float(v) for k, v in (instruction_accuracy or {}).items()}
        self.by_turn = list(script) if by_turn and script else None
        self.mode, self.reply, self.accuracy = mode, reply, accuracy
        self.script = itertools.cycle(script) if script else None
        self.fail_first, self.fail_status = fail_first, fail_status
        self.require_key, self.models = require_key, models or ["mock-model"]
        self.rng = random.Random(seed)
        self.latency_s = latency_s
        self.requests = 0
        self.bodies: list[dict[str, Any]] = []
        self.keep_bodies = mode != "instant"

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post(f"{self.prefix}/chat/completions", self.chat)
        app.router.add_get(f"{self.prefix}/models", self.list_models)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/requests", self.received)
        app.router.add_post("/release", self.release)
        return app

    def _gate(self) -> asyncio.Event:
        if self.released is None:
            self.released = asyncio.Event()
            if not self.hold:
                self.released.set()
        return self.released

    async def release(self, request: web.Request) -> web.Response:
        """Let the held chat requests (``--hold``) and every later one through."""
        self._gate().set()
        return web.json_response({"released": True})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests})

    async def received(self, request: web.Request) -> web.Response:
        """The chat request bodies received so far (kept unless the mode is ``instant``)."""
        return web.Response(body=orjson.dumps({"requests": self.bodies}), content_type="application/json")

    async def list_models(self, request: web.Request) -> web.Response:
        if self.require_key and request.headers.get("Authorization") != f"Bearer {self.require_key}":
            return web.json_response({"error": {"message": "invalid api key"}}, status=401)
        owner = "vllm" if self.tokens else "mock"
        data: list[dict[str, Any]]
        if self.flavor == "gemini":
            data = [{"id": f"models/{m}", "object": "model", "owned_by": "google"} for m in self.models]
        elif self.flavor == "openrouter":
            data = [{"id": m, "name": m, "created": 1700000000, "context_length": 128000,
                     "pricing": {"prompt": "0.00000015", "completion": "0.0000006"}} for m in self.models]
        else:
            data = [{"id": m, "object": "model", "owned_by": owner} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _stream(self, request: web.Request, body: dict[str, Any], resp: dict[str, Any]) -> web.StreamResponse:
        """Send ``resp`` as OpenAI SSE chunks: one per word (plus tool calls), then usage, then [DONE]."""
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        choice = resp["choices"][0]
        message = choice["message"]
        base = {"id": resp["id"], "object": "chat.completion.chunk", "created": resp["created"], "model": resp["model"]}
        words = (message.get("content") or "").split(" ")
        ids = choice.get("token_ids") or []
        lps = (choice.get("logprobs") or {}).get("content") or []

        async def send(obj: dict[str, Any]) -> None:
            await out.write(b"data: " + orjson.dumps(obj) + b"\n\n")

        first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
        if "prompt_token_ids" in resp:
            first["prompt_token_ids"] = resp["prompt_token_ids"]
        await send(first)
        if message.get("content"):
            for i, w in enumerate(words):
                ch: dict[str, Any] = {"index": 0, "delta": {"content": w if i == 0 else " " + w}, "finish_reason": None}
                if ids:
                    ch["token_ids"] = [ids[i]]
                if lps:
                    ch["logprobs"] = {"content": [lps[i]]}
                await send({**base, "choices": [ch]})
        for j, tc in enumerate(message.get("tool_calls") or ()):
            await send({**base, "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": j, "id": tc.get("id"), "type": "function", "function": tc["function"]}]}, "finish_reason": None}]})
        last: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
        if ids:
            last["token_ids"] = ids[len(words):] if message.get("content") else ids
        if lps and message.get("content"):
            last["logprobs"] = {"content": lps[len(words):]}
        await send({**base, "choices": [last]})
        if (body.get("stream_options") or {}).get("include_usage"):
            await send({**base, "choices": [], "usage": resp["usage"]})
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    def _err(self, status: int, message: str) -> web.Response:
        return web.Response(body=orjson.dumps({"error": {"message": message}}), status=status,
                            content_type="application/json")

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if self.require_key and request.headers.get("Authorization") != f"Bearer {self.require_key}":
            return self._err(401, "invalid api key")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return self._err(400, "body is not JSON")
        if self.keep_bodies:
            self.bodies.append(body)
        if body.get("model") not in self.models:
            return self._err(404, f"model {body.get('model')!r} not found")
        if self.requests <= self.fail_first:
            return self._err(self.fail_status, "scripted failure")
        await self._gate().wait()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        msgs = body.get("messages") or []
        message: dict[str, Any] = {"role": "assistant", "content": self.reply}
        if self.mode == "arithmetic":
            last = next((m.get("content") or "" for m in reversed(msgs) if m.get("role") == "user"), "")
            if self.instruction_accuracy:
                system = " ".join(str(m.get("content") or "") for m in msgs if m.get("role") == "system").lower()
                found = [a for phrase, a in self.instruction_accuracy.items() if phrase in system]
                message["content"] = _arith_fixed(str(last), max(found, default=self.accuracy))
            else:
                message["content"] = _arith(str(last), self.accuracy, self.rng)
        elif self.mode == "echo":
            last = next((m.get("content") or "" for m in reversed(msgs) if m.get("role") == "user"), "")
            message["content"] = last
        elif self.mode == "rules":
            last = str(next((m.get("content") or "" for m in reversed(msgs) if m.get("role") == "user"), "")).lower()
            rule = next((r for r in self.rules if str(r.get("contains", "")).lower() in last), {"reply": self.reply})
            message["content"] = str(rule.get("reply", self.reply))
        elif self.mode == "script" and self.script is not None:
            if self.by_turn is not None:
                k = sum(1 for m in msgs if m.get("role") == "assistant")
                item = self.by_turn[min(k, len(self.by_turn) - 1)]
            else:
                item = next(self.script)
            if isinstance(item, dict):
                if "sleep" in item:
                    await asyncio.sleep(item["sleep"])
                if "status" in item:
                    return self._err(item["status"], "scripted error")
                if "raw" in item:
                    return web.Response(body=item["raw"].encode(), content_type="application/json")
                if "tool_calls" in item:
                    message = {"role": "assistant", "content": item.get("content"), "tool_calls": item["tool_calls"]}
                elif "content" in item:
                    message["content"] = item["content"]
            else:
                message["content"] = str(item)
        text = message.get("content") or ""
        ptoks = sum(len(str(m.get("content") or "").split()) for m in msgs) + 3 * len(msgs)
        ctoks = max(1, len(text.split()))
        choice: dict[str, Any] = {"index": 0, "message": message,
                                  "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
        resp: dict[str, Any] = {
            "id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [choice],
        }
        if self.tokens:
            prompt_ids = toy_render(msgs, self.drift)
            words = _msg_text(message).split()
            completion_ids = [*toy_tokens(" ".join(words)), _END]
            ptoks, ctoks = len(prompt_ids), len(completion_ids)
            if body.get("return_token_ids"):
                resp["prompt_token_ids"] = prompt_ids
                choice["token_ids"] = completion_ids
            if body.get("logprobs"):
                choice["logprobs"] = {"content": [
                    {"token": w, "logprob": round(-0.05 * (i + 1), 4), "bytes": list(w.encode()), "top_logprobs": []}
                    for i, w in enumerate([*words, "<end>"])]}
            resp["policy_version"] = 0
        resp["usage"] = {"prompt_tokens": ptoks, "completion_tokens": ctoks, "total_tokens": ptoks + ctoks}
        if self.flavor == "openrouter":
            resp["provider"] = "OpenAI"
            choice["native_finish_reason"] = choice["finish_reason"]
            resp["usage"].update(cost=(ptoks * 0.15 + ctoks * 0.6) / 1e6, prompt_tokens_details={"cached_tokens": 0})
        if body.get("stream"):
            return await self._stream(request, body, resp)
        return web.Response(body=orjson.dumps(resp), content_type="application/json")


async def serve(mock: MockOpenAI, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(mock.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=2048)
    await site.start()
    real_port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, real_port


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--mode", default="instant", choices=["instant", "arithmetic", "script", "echo", "rules"])
    ap.add_argument("--reply", default="42")
    ap.add_argument("--script", default=None, help="JSON list of scripted replies")
    ap.add_argument("--accuracy", type=float, default=0.7)
    ap.add_argument("--fail-first", type=int, default=0)
    ap.add_argument("--fail-status", type=int, default=500)
    ap.add_argument("--require-key", default=None)
    ap.add_argument("--models", default="mock-model")
    ap.add_argument("--latency", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens", action="store_true", help="return token ids and logprobs like vLLM")
    ap.add_argument("--drift", action="store_true", help="re-render assistant turns differently (mismatch)")
    ap.add_argument("--by-turn", action="store_true", help="script item K answers the conversation's turn K")
    ap.add_argument("--rules", default=None, help='JSON [{"contains": "...", "reply": "..."}, ...] (mode rules)')
    ap.add_argument("--prefix", default="/v1", help="the API's path (e.g. /v1beta/openai, /api/v1)")
    ap.add_argument("--flavor", default="openai", choices=["openai", "gemini", "openrouter"])
    ap.add_argument("--hold", action="store_true", help="chat requests wait until POST /release")
    ap.add_argument("--instruction-accuracy", default=None,
                    help='JSON {"phrase": accuracy}: arithmetic accuracy by what the system prompt says')
    a = ap.parse_args(argv)
    mock = MockOpenAI(a.mode, a.reply, orjson.loads(a.script) if a.script else None, a.accuracy, a.fail_first,
                      a.fail_status, a.require_key, a.models.split(","), a.seed, a.latency, a.tokens, a.drift,
                      a.by_turn, orjson.loads(a.instruction_accuracy) if a.instruction_accuracy else None, a.prefix,
                      a.flavor, orjson.loads(a.rules) if a.rules else None, a.hold)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    async def run() -> None:
        _runner, port = await serve(mock, a.port)
        print(f"READY {port}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
