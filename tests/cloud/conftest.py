"""Fixtures shared by the cloud tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Any], Any]]:
    """``await serve(app)`` runs an aiohttp application on 127.0.0.1 (a free port) until the test ends
    and returns its base URL."""
    from aiohttp import web

    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        runners.append(runner)
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    yield start
    for r in reversed(runners):
        await r.cleanup()
