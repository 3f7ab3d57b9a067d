"""A real Anthropic Messages API server (``POST /v1/messages``) on 127.0.0.1 with scripted replies, for tests.

It checks requests the way the published API does and answers in the published response schema, written
here by hand (not with workbench/wire, so a test of the client's translation never checks it against itself):

- headers: ``anthropic-version`` is required; ``--require-key KEY`` makes ``x-api-key: KEY`` required (401).
- body: ``model``, a positive integer ``max_tokens`` and a non-empty ``messages`` list are required; roles
  are ``user``/``assistant``, alternate and start with ``user``; ``system`` is top-level (a string or text
  blocks); every ``tool_result`` sits in the user turn right after an assistant turn with a ``tool_use`` of
  that id, before any other block of that turn, and every ``tool_use`` gets its result there. A request that
  breaks a rule gets 400 ``invalid_request_error`` naming it.
- replies: ``--script`` is a JSON list, cycled per request; each item is a string (a text answer),
  ``{"tool_use": {"name": ..., "input": {...}}}`` (optionally with ``"text"``), ``{"status": 429}`` (an error of
  that status, in Anthropic's error body, with ``retry-after: 0``), or ``{"stop_reason": "max_tokens",
  "text": ...}``. Without a script every answer is ``--reply``.
- usage: ``input_tokens`` (words in the request), ``output_tokens`` (words answered), and
  ``cache_read_input_tokens`` ``--cache-read N``, ``cache_creation_input_tokens`` ``--cache-write N``.
- ``stop_sequences``: a text answer holding one is cut before it with ``stop_reason: stop_sequence``.

``GET /v1/models`` lists ``--models``; ``GET /requests`` answers ``{"requests": [body, ...]}`` and
``GET /stats`` ``{"requests": N}``, as mock_openai does.

Run: ``python -m workbench.testing.mock_anthropic --port 0`` prints ``READY <port>`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import secrets
import sys
from typing import Any

import orjson
from aiohttp import web

_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                529: "overloaded_error"}


class Invalid(Exception):
    pass


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    if isinstance(value, dict):
        return sum(_words(v) for k, v in value.items() if k in ("text", "content", "input"))
    return 0


def validate(body: Any) -> None:
    """Raise :class:`Invalid` where ``body`` is not a valid Messages request."""
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise Invalid("model: Field required")
    mt = body.get("max_tokens")
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise Invalid("max_tokens: Field required (a positive integer)")
    system = body.get("system")
    if system is not None and not isinstance(system, str) and not (
            isinstance(system, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in system)):
        raise Invalid("system: must be a string or a list of text blocks")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages: at least one message is required")
    pending: set[str] = set()  # tool_use ids of the previous assistant turn, awaiting their results
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise Invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise Invalid("messages: the first message must use the \"user\" role")
        if i > 0 and messages[i - 1]["role"] == role:
            raise Invalid(f"messages: roles must alternate between \"user\" and \"assistant\" (messages.{i})")
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise Invalid(f"messages.{i}.content: must be a string or a list of content blocks")
        if role == "user":
            seen_other = False
            for j, b in enumerate(blocks):
                kind = b.get("type") if isinstance(b, dict) else None
                if kind == "tool_result":
                    if seen_other:
                        raise Invalid(f"messages.{i}.content.{j}: tool_result blocks must come first in the turn")
                    if b.get("tool_use_id") not in pending:
                        raise Invalid(f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                                      "blocks; each tool_result must answer a tool_use of the previous message")
                    pending.discard(b["tool_use_id"])
                elif kind == "text":
                    seen_other = True
                    if not isinstance(b.get("text"), str):
                        raise Invalid(f"messages.{i}.content.{j}.text: Field required")
                elif kind == "image":
                    seen_other = True
                    src = b.get("source") or {}
                    if src.get("type") == "base64" and not (src.get("media_type") and src.get("data")):
                        raise Invalid(f"messages.{i}.content.{j}.source: media_type and data are required")
                    if src.get("type") not in ("base64", "url"):
                        raise Invalid(f"messages.{i}.content.{j}.source.type: must be 'base64' or 'url'")
                else:
                    raise Invalid(f"messages.{i}.content.{j}.type: {kind!r} is not a user content block")
            if pending:
                raise Invalid(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                              f"after: {', '.join(sorted(pending))}")
        else:
            if pending:
                raise Invalid(f"messages.{i}: tool_use ids without tool_result: {', '.join(sorted(pending))}")
            for j, b in enumerate(blocks):
                kind = b.get("type") if isinstance(b, dict) else None
                if kind == "tool_use":
                    if not b.get("id") or not b.get("name") or not isinstance(b.get("input"), dict):
                        raise Invalid(f"messages.{i}.content.{j}: tool_use needs id, name and an object input")
                    pending.add(b["id"])
                elif kind not in ("text", "thinking", "redacted_thinking"):
                    raise Invalid(f"messages.{i}.content.{j}.type: {kind!r} is not an assistant content block")
    for i, t in enumerate(body.get("tools") or ()):
        if not isinstance(t, dict) or not t.get("name") or not isinstance(t.get("input_schema"), dict):
            raise Invalid(f"tools.{i}: a tool needs a name and an input_schema object")
    choice = body.get("tool_choice")
    if choice is not None and (not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none")
                               or (choice["type"] == "tool" and not choice.get("name"))):
        raise Invalid("tool_choice: must be {\"type\": \"auto\" | \"any\" | \"tool\" (with name) | \"none\"}")


class MockAnthropic:
    def __init__(self, script: list[Any] | None = None, reply: str = "Hello from the mock.", require_key: str | None = None,
                 models: list[str] | None = None, cache_read: int = 0, cache_write: int = 0) -> None:
        self.script = itertools.cycle(script) if script else None
        self.reply, self.require_key = reply, require_key
        self.models = models or ["claude-mock"]
        self.cache_read, self.cache_write = cache_read, cache_write
        self.bodies: list[Any] = []

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/messages", self.messages)
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/requests", self.received)
        app.router.add_get("/stats", self.stats)
        return app

    async def received(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": self.bodies})

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": len(self.bodies)})

    @staticmethod
    def error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
        body = {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}
        return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)

    async def list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
                                           for m in self.models], "has_more": False,
                                  "first_id": self.models[0], "last_id": self.models[-1]})

    async def messages(self, request: web.Request) -> web.Response:
        if self.require_key and request.headers.get("x-api-key") != self.require_key:
            return self.error(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return self.error(400, "anthropic-version: header is required")
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return self.error(400, "the request body is not valid JSON")
        self.bodies.append(body)
        try:
            validate(body)
        except Invalid as e:
            return self.error(400, str(e))
        if body["model"] not in self.models:
            return self.error(404, f"model: {body['model']}")
        item: Any = next(self.script) if self.script else self.reply
        if isinstance(item, dict) and "status" in item:
            return self.error(int(item["status"]), item.get("message", "scripted error"), {"retry-after": "0"})
        content: list[dict[str, Any]] = []
        text = item if isinstance(item, str) else item.get("text")
        reason, sequence = "end_turn", None
        if text:
            for s in body.get("stop_sequences") or ():
                if s in text:
                    text, reason, sequence = text[:text.index(s)], "stop_sequence", s
                    break
            content.append({"type": "text", "text": text})
        if isinstance(item, dict) and "tool_use" in item:
            tu = item["tool_use"]
            content.append({"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": tu["name"],
                            "input": tu.get("input", {})})
            reason = "tool_use"
        if isinstance(item, dict) and item.get("stop_reason"):
            reason = item["stop_reason"]
        resp = {
            "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "content": content,
            "model": body["model"], "stop_reason": reason, "stop_sequence": sequence,
            "usage": {"input_tokens": _words(body.get("system")) + _words(body["messages"]),
                      "output_tokens": max(1, _words(content)),
                      "cache_creation_input_tokens": self.cache_write, "cache_read_input_tokens": self.cache_read},
        }
        return web.Response(body=orjson.dumps(resp), content_type="application/json")


async def serve(mock: MockAnthropic, port: int = 0) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(mock.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--script", default=None, help="JSON list of scripted replies (cycled)")
    ap.add_argument("--reply", default="Hello from the mock.")
    ap.add_argument("--require-key", default=None)
    ap.add_argument("--models", default="claude-mock")
    ap.add_argument("--cache-read", type=int, default=0)
    ap.add_argument("--cache-write", type=int, default=0)
    a = ap.parse_args(argv)
    mock = MockAnthropic(orjson.loads(a.script) if a.script else None, a.reply, a.require_key, a.models.split(","),
                         a.cache_read, a.cache_write)

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
