"""What one embedded server holds while it serves, in one object made at its start.

Every route reads it from its request (``state_of(request)``), never from a module global, so two
servers in one process (two apps of :func:`workbench_local.server.app.create_app`) share nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiohttp import web
from workbench_local.server.openai_api import TokenText
from workbench_local.server.prepare import PromptCache
from workbench_local.server.runner import Engine
from workbench_local.server.scheduler import Scheduler

from workbench.wire.responses import ResponseStore


@dataclass(slots=True)
class ServerState:
    """The model and its batching (``engine``, ``scheduler``), and the caches of one server's routes."""

    engine: Engine
    scheduler: Scheduler
    token_text: TokenText
    prompts: PromptCache = field(default_factory=PromptCache)  # chat renderings, shared by a group's rollouts
    responses: ResponseStore = field(default_factory=ResponseStore)  # for previous_response_id
    started: float = field(default_factory=time.time)

    @classmethod
    def new(cls, engine: Engine, scheduler: Scheduler) -> ServerState:
        return cls(engine, scheduler, TokenText(engine.lm.tokenizer))


STATE: web.AppKey[ServerState] = web.AppKey("state", ServerState)


def state_of(request: web.Request) -> ServerState:
    return request.app[STATE]
