"""A framework worker's model calls where the run has no interception proxy (training, a probe, a person
playing): ``http://127.0.0.1:PORT/r/<key>/v1/chat/completions`` answers each call with the rollout's own
``Rollout.generate``, so the call is recorded in the rollout's trace (with the token ids training needs), and
a probe's or a person's policy answers it. One relay per event loop, started on first use.
"""

from __future__ import annotations

import asyncio
import secrets
import time
import weakref
from typing import Any

import orjson
from aiohttp import web

from workbench.records.rollout import Rollout

_FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}
_RELAYS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ModelRelay] = weakref.WeakKeyDictionary()


def needed(rollout: Rollout) -> bool:
    """Whether the rollout has no proxy URL of its own (its base URL is the upstream's, or none)."""
    return not rollout.base_url or rollout.base_url == rollout.upstream_url


async def relay() -> ModelRelay:
    """This event loop's relay, started on first use."""
    loop = asyncio.get_running_loop()
    found = _RELAYS.get(loop)
    if found is None:
        found = _RELAYS[loop] = ModelRelay()
        found.started = asyncio.ensure_future(found.start())
    assert found.started is not None
    await asyncio.shield(found.started)  # rollouts starting together wait for the one port
    return found


class ModelRelay:
    def __init__(self) -> None:
        self.rollouts: dict[str, Rollout] = {}
        #: what a rollout's model call raised (a model error, a timeout): the rollout fails with it
        self.failures: dict[str, BaseException] = {}
        self.port = 0
        self.started: asyncio.Future[None] | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/r/{key}/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    def register(self, rollout: Rollout) -> tuple[str, str]:
        """A key and a base URL for the rollout's calls (until :meth:`release`)."""
        key = f"{rollout.id}~{secrets.token_hex(8)}"
        self.rollouts[key] = rollout
        return key, f"http://127.0.0.1:{self.port}/r/{key}/v1"

    def release(self, key: str) -> BaseException | None:
        """Forget the rollout; what one of its calls raised, if one did."""
        self.rollouts.pop(key, None)
        return self.failures.pop(key, None)

    async def _chat(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        rollout = self.rollouts.get(key)
        if rollout is None:
            return _error(404, "no running rollout behind this URL")
        body = orjson.loads(await request.read())
        messages = [{k: v for k, v in m.items() if v is not None} for m in body.get("messages") or []]
        tools = body.get("tools") or None
        try:
            message = await rollout.generate(messages, tools=tools)
        except Exception as e:  # noqa: BLE001 - the rollout fails with it once the worker's rollout ends
            self.failures.setdefault(key, e)
            return _error(502, f"{type(e).__name__}: {e}")
        call = rollout.calls[-1]
        reply: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        if message.get("tool_calls"):
            reply["tool_calls"] = [{"type": "function", **tc} for tc in message["tool_calls"]]
        finish = call.finish_reason if call.finish_reason in _FINISH else "stop"
        return web.json_response({
            "id": f"{rollout.id}.{call.index}", "object": "chat.completion", "created": int(time.time()),
            "model": rollout.model, "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
            "usage": {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
                      "total_tokens": call.prompt_tokens + call.completion_tokens},
        })


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "workbench_error"}}, status=status)


__all__ = ["ModelRelay", "needed", "relay"]
