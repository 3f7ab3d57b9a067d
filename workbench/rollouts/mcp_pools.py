"""Per-rollout MCP servers started ahead, so a rollout does not wait for its server to start.

``WarmServers``: servers on the host (``sandboxed=False``), each started (or forked from the zygote) before
a rollout asks, never reused. ``PreparedSandboxes``: sandboxes taken from the run's pool with the
sandboxed servers already running in them, for rollouts whose task needs no sandbox seeding (a seeded
workdir must exist before its server starts, so those rollouts start their servers themselves).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from workbench.authoring.mcp_tools import MCPTools
from workbench.rollouts.mcp_transport import ServerHandle, forked_connector, host_connector, sandbox_connector


class WarmServers:
    """Per-rollout servers on the host, started ahead: a rollout takes a ready one and a new one starts."""

    def __init__(self, spec: MCPTools, size: int, env_dir: Path | None) -> None:
        self.spec, self.size, self.env_dir = spec, max(1, size), env_dir
        self.ready: asyncio.Queue[ServerHandle | BaseException] = asyncio.Queue()
        self.starting: set[asyncio.Task[None]] = set()
        self.closed = False
        self.zygote: Any = None  # forks Python servers from a preloaded interpreter (mcp_zygote)
        self._zygote_lock = asyncio.Lock()

    async def _connector(self, h: ServerHandle) -> Any:
        from workbench.rollouts.mcp_zygote import Zygote, forkable

        assert self.spec.command is not None
        if not forkable(list(self.spec.command)):
            return host_connector(self.spec, h, self.env_dir)
        async with self._zygote_lock:
            if self.zygote is None:
                self.zygote = await Zygote(stderr=None).start()
        return forked_connector(self.spec, h, self.zygote, self.env_dir)

    def fill(self) -> None:
        while not self.closed and self.ready.qsize() + len(self.starting) < self.size:
            t = asyncio.create_task(self._start_one())
            self.starting.add(t)
            t.add_done_callback(self.starting.discard)

    async def _start_one(self) -> None:
        h = ServerHandle(self.spec)
        try:
            await h.start(await self._connector(h))
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                raise
            self.ready.put_nowait(e)
            return
        if self.closed:
            await h.close()
        else:
            self.ready.put_nowait(h)

    async def take(self) -> ServerHandle:
        self.fill()
        got = await self.ready.get()
        self.fill()
        if isinstance(got, BaseException):
            raise got
        return got

    async def close(self) -> None:
        self.closed = True
        for t in list(self.starting):
            t.cancel()
        await asyncio.gather(*self.starting, return_exceptions=True)
        while not self.ready.empty():
            h = self.ready.get_nowait()
            if isinstance(h, ServerHandle):
                await h.close()
        if self.zygote is not None:
            await self.zygote.close()


class PreparedSandboxes:
    """Up to ``size`` sandboxes of the run's pool, each with the in-sandbox servers of ``specs`` running."""

    def __init__(self, specs: dict[int, MCPTools], sandboxes: Any, size: int) -> None:
        self.specs, self.sandboxes, self.size = specs, sandboxes, max(1, size)
        self.ready: asyncio.Queue[tuple[Any, dict[int, ServerHandle]] | BaseException] = asyncio.Queue()
        self.starting: set[asyncio.Task[None]] = set()
        self.closed = False

    def fill(self) -> None:
        while not self.closed and self.ready.qsize() + len(self.starting) < self.size:
            t = asyncio.create_task(self._prepare_one())
            self.starting.add(t)
            t.add_done_callback(self.starting.discard)

    async def _prepare_one(self) -> None:
        sb = None
        handles: dict[int, ServerHandle] = {}
        try:
            sb = await self.sandboxes.acquire("mcp-warm", None)
            for i, spec in self.specs.items():
                h = handles[i] = ServerHandle(spec, "sandbox")
                await h.start(sandbox_connector(spec, h, sb, self.sandboxes.bridge_dir))
        except BaseException as e:
            await _discard(sb, handles)
            if isinstance(e, asyncio.CancelledError):
                raise
            self.ready.put_nowait(e)
            return
        if self.closed:
            await _discard(sb, handles)
        else:
            self.ready.put_nowait((sb, handles))

    async def take(self) -> tuple[Any, dict[int, ServerHandle]]:
        self.fill()
        got = await self.ready.get()
        self.fill()
        if isinstance(got, BaseException):
            raise got
        return got

    async def close(self) -> None:
        self.closed = True
        for t in list(self.starting):
            t.cancel()
        await asyncio.gather(*self.starting, return_exceptions=True)
        while not self.ready.empty():
            got = self.ready.get_nowait()
            if isinstance(got, tuple):
                await _discard(*got)


async def _discard(sandbox: Any, handles: dict[int, ServerHandle]) -> None:
    await asyncio.gather(*(h.close() for h in handles.values()), return_exceptions=True)
    if sandbox is not None:
        await sandbox.close()
