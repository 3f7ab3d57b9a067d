"""The embedded server's aiohttp application: its :class:`ServerState`, made here once per server, and
its routes (the OpenAI ones in ``http_app.py``, the Responses and Messages APIs in ``wire_routes.py``)."""

from __future__ import annotations

from aiohttp import web
from workbench_local.server import http_app, wire_routes
from workbench_local.server.errors import errors_middleware
from workbench_local.server.runner import Engine
from workbench_local.server.scheduler import Scheduler
from workbench_local.server.state import STATE, ServerState


def create_app(engine: Engine, scheduler: Scheduler) -> web.Application:
    app = web.Application(middlewares=[errors_middleware], client_max_size=64 * 1024 * 1024)
    app[STATE] = ServerState.new(engine, scheduler)

    async def on_startup(app: web.Application) -> None:
        await scheduler.start()

    async def on_cleanup(app: web.Application) -> None:
        await scheduler.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    http_app.add_routes(app)
    wire_routes.add_routes(app)
    return app
