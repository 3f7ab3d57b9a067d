"""Per-rollout MCP servers started ahead, so a rollout does not wait for its server to start.

``WarmServers``: servers on the host (``sandboxed=False``), each started (or forked from the zygote) before
a rollout asks, never reused. ``PreparedSandboxes``: sandboxes taken from the run's pool with the
sandboxed servers already running in them, for rollouts whose task needs no sandbox seeding (a seeded
workdir must exist before its server starts, so those rollouts start their servers themselves).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Generic, TypeVar

from workbench.authoring.mcp_tools import MCPTools
from workbench.rollouts.mcp_transport import ServerHandle, forked_connector, host_connector, sandbox_connector

T = TypeVar("T")


class _Ahead(Generic[T]):
    """Up to ``size`` items made in the background; ``take`` hands one out and starts the next. A failure
    to make one is handed to the taker that would have had it."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self.ready: asyncio.Queue[T | BaseException] = asyncio.Queue()
        self.starting: set[asyncio.Task[None]] = set()
        self.closed = False

    async def make(self) -> T:  # pragma: no cover - abstract
        raise NotImplementedError

    async def discard(self, item: T) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def fill(self) -> None:
        while not self.closed and self.ready.qsize() + len(self.starting) < self.size:
            t = asyncio.create_task(self._make_one())
            self.starting.add(t)
            t.add_done_callback(self.starting.discard)

    async def _make_one(self) -> None:
        try:
            item = await self.make()
        except asyncio.CancelledError:
            raise
        except BaseException as e:
            self.ready.put_nowait(e)
            return
        if self.closed:
            await self.discard(item)
        else:
            self.ready.put_nowait(item)

    async def take(self) -> T:
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
            if not isinstance(got, BaseException):
                await self.discard(got)


class WarmServers(_Ahead[ServerHandle]):
    """Per-rollout servers on the host, started ahead: a rollout takes a ready one and a new one starts."""

    def __init__(self, spec: MCPTools, size: int, env_dir: Path | None) -> None:
        super().__init__(size)
        self.spec, self.env_dir = spec, env_dir
        self.zygote: Any = None  # forks Python servers from a preloaded interpreter (mcp_zygote)
        self._zygote_lock = asyncio.Lock()

    async def make(self) -> ServerHandle:
        from workbench.rollouts.mcp_zygote import Zygote, forkable

        h = ServerHandle(self.spec)
        assert self.spec.command is not None
        if not forkable(list(self.spec.command)):
            return await h.start(host_connector(self.spec, h, self.env_dir))
        async with self._zygote_lock:
            if self.zygote is None:
                self.zygote = await Zygote(stderr=None).start()
        return await h.start(forked_connector(self.spec, h, self.zygote, self.env_dir))

    async def discard(self, item: ServerHandle) -> None:
        await item.close()

    async def close(self) -> None:
        await super().close()
        if self.zygote is not None:
            await self.zygote.close()


class PreparedSandboxes(_Ahead[tuple[Any, dict[int, ServerHandle]]]):
    """Up to ``size`` sandboxes of the run's pool, each with the in-sandbox servers of ``specs`` running."""

    def __init__(self, specs: dict[int, MCPTools], sandboxes: Any, size: int) -> None:
        super().__init__(size)
        self.specs, self.sandboxes = specs, sandboxes

    async def make(self) -> tuple[Any, dict[int, ServerHandle]]:
        sb = None
        handles: dict[int, ServerHandle] = {}
        try:
            sb = await self.sandboxes.acquire("mcp-warm", None)
            for i, spec in self.specs.items():
                h = handles[i] = ServerHandle(spec, "sandbox")
                await h.start(sandbox_connector(spec, h, sb, self.sandboxes.bridge_dir))
        except BaseException:
            await self.discard((sb, handles))
            raise
        return sb, handles

    async def discard(self, item: tuple[Any, dict[int, ServerHandle]]) -> None:
        sandbox, handles = item
        await asyncio.gather(*(h.close() for h in handles.values()), return_exceptions=True)
        if sandbox is not None:
            await sandbox.close()
