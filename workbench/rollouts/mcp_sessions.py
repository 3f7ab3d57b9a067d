"""MCP toolsets during a run: the servers, their tools for the model, and the ``mcp`` argument.

:class:`RunToolsets` opens when the run starts (before any rollout): it starts each toolset's server
once (a shared one stays up for the run; a per-rollout one is a probe whose tool list the run uses),
checks that no tool name is given twice, and keeps warm per-rollout servers ready on the host. Each
rollout then gets an :class:`MCPSessions`: its servers (fresh ones for per-rollout toolsets), its
tools for the model, and what rewards receive as ``mcp``. Every call is recorded in the rollout's
``state["mcp_calls"]``: server, tool, arguments, result, whether it failed, milliseconds, and who called.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pydantic

from workbench.authoring.mcp_tools import MCPToolError, MCPTools
from workbench.errors import EnvLoadError
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.rollouts.mcp_pools import PreparedSandboxes, WarmServers
from workbench.rollouts.mcp_transport import (
    ServerHandle,
    ServerStartError,
    host_connector,
    http_connector,
    install_relay,
    off_spec,
    sandbox_connector,
)

#: How much of a result the trace keeps per call (the model's tool message holds all of it).
TRACE_RESULT_CHARS = 4000
_DEFAULT_WARM = 8


class RunToolsets:
    """The MCP toolsets of one run (see the module docstring)."""

    def __init__(self, specs: Sequence[MCPTools], sandboxes: Any, env_dir: Path | None) -> None:
        self.specs = list(specs)
        self.sandboxes = sandboxes
        self.env_dir = env_dir
        self.shared: dict[int, ServerHandle] = {}
        self.warm: dict[int, WarmServers] = {}
        self.listed: dict[int, list[Any]] = {}  # every tool each server lists
        self.tools: dict[int, list[Any]] = {}  # the ones the model is offered (``include``)
        self.schemas: list[dict[str, Any]] = []
        self.owner: dict[str, int] = {}  # tool name -> index of its toolset (the model's tools)
        self.any_owner: dict[str, int] = {}  # the same for every listed tool (rewards may call any)
        self.prepared: PreparedSandboxes | None = None  # sandboxes with their servers already running

    @classmethod
    async def for_env(cls, env: Any, sandboxes: Any, concurrency: int, prepare: bool = True) -> RunToolsets:
        """The toolsets of ``env``'s harness, opened for a run of ``concurrency`` rollouts at once
        (``prepare``: keep sandboxes with their servers running ahead of the rollouts)."""
        plain = list(getattr(getattr(env.harness, "toolbox", None), "by_name", {}) or {})
        return await cls.open(env.harness.toolsets, plain, sandboxes=sandboxes, env_dir=env.folder,
                              concurrency=concurrency, prepare=prepare)

    @classmethod
    async def open(cls, specs: Sequence[MCPTools], plain_names: Sequence[str], *, sandboxes: Any,
                   env_dir: Path | None, concurrency: int, prepare: bool = True) -> RunToolsets:
        self = cls(specs, sandboxes, env_dir)
        try:
            await asyncio.gather(*(self._probe(i, s, concurrency) for i, s in enumerate(self.specs)))
            self._check_names(plain_names)
            boxed = {i: s for i, s in enumerate(self.specs) if s.in_sandbox}
            size = min((s.warm if s.warm is not None else min(_DEFAULT_WARM, max(1, concurrency)))
                       for s in boxed.values()) if boxed else 0
            if size > 0 and prepare:
                self.prepared = PreparedSandboxes(boxed, self.sandboxes, size)
                self.prepared.fill()
        except BaseException:
            await self.close()
            raise
        return self

    async def _probe(self, i: int, spec: MCPTools, concurrency: int) -> None:
        if not spec.per_rollout:
            h = ServerHandle(spec, spec.url or "")
            connect = http_connector(spec) if spec.url else host_connector(spec, h, self.env_dir)
            self.shared[i] = await h.start(connect)
            self.listed[i] = h.tools
        elif not spec.sandboxed:
            size = spec.warm if spec.warm is not None else min(_DEFAULT_WARM, max(1, concurrency))
            self.warm[i] = w = WarmServers(spec, size, self.env_dir)
            first = await w.take()
            self.listed[i] = first.tools
            w.ready.put_nowait(first)  # unused: the first rollout takes it
        else:
            if self.sandboxes is None or getattr(self.sandboxes, "bridge_dir", None) is None:
                raise EnvLoadError(f"MCP server {spec.label!r} runs in each rollout's sandbox, and the environment's "
                                   "runtime opens none here; use wb.Local() or wb.Docker(), or "
                                   "MCPTools(sandboxed=False)")
            install_relay(self.sandboxes.bridge_dir)
            sb = await self.sandboxes.acquire(f"mcp-probe-{i}", None)
            try:
                h = ServerHandle(spec, "sandbox")
                await h.start(sandbox_connector(spec, h, sb, self.sandboxes.bridge_dir))
                self.listed[i] = h.tools
                await h.close()
            finally:
                await sb.close()

    def _check_names(self, plain_names: Sequence[str]) -> None:
        plain = set(plain_names)
        for i, spec in enumerate(self.specs):
            self.tools[i] = _included(spec, self.listed[i])
            for t in self.listed[i]:
                self.any_owner.setdefault(t.name, i)
        for i, spec in enumerate(self.specs):
            for t in self.tools[i]:
                if t.name in plain:
                    raise EnvLoadError(f"tool {t.name!r} is both a plain tool and a tool of the MCP server "
                                       f"{spec.label!r}; rename one or pass include=[...] to the MCPTools")
                if t.name in self.owner:
                    other = self.specs[self.owner[t.name]].label
                    raise EnvLoadError(f"tool {t.name!r} is offered by two MCP servers, {other!r} and {spec.label!r}; "
                                       "pass include=[...] to one of them")
                self.owner[t.name] = i
                self.schemas.append({"type": "function", "function": {
                    "name": t.name, "description": t.description or t.title or t.name,
                    "parameters": t.input_schema or {"type": "object", "properties": {}}}})
        for i, spec in enumerate(self.specs):
            missing = sorted(set(spec.include or ()) - {t.name for t in self.listed[i]})
            if missing:
                raise EnvLoadError(f"MCP server {spec.label!r} has no tool named {missing[0]!r} (include=...)")

    def prepares(self, task: Any) -> bool:
        """Whether a rollout of ``task`` takes a prepared sandbox (its servers running) instead of its own."""
        return self.prepared is not None and task.sandbox is None

    async def for_rollout(self, rollout: Rollout, ready: dict[int, ServerHandle] | None = None) -> MCPSessions:
        """The rollout's sessions: the shared servers, and fresh ones for per-rollout toolsets (``ready``: the
        in-sandbox ones already running in the rollout's prepared sandbox)."""
        sessions = MCPSessions(self, rollout)
        if ready:
            sessions.owned += ready.values()
        try:
            for i, spec in enumerate(self.specs):
                if i in self.shared:
                    h = self.shared[i]
                elif ready and i in ready:
                    h = ready[i]
                elif i in self.warm:
                    h = await self.warm[i].take()
                    sessions.owned.append(h)
                else:
                    if rollout.sandbox is None:
                        raise RolloutFailed("sandbox", f"mcp:{spec.label}", "this rollout has no sandbox to run its "
                                                                            "MCP server in")
                    h = ServerHandle(spec, "sandbox")
                    sessions.owned.append(h)
                    await h.start(sandbox_connector(spec, h, rollout.sandbox, self.sandboxes.bridge_dir))
                sessions.handles[i] = h
        except ServerStartError as e:
            await sessions.close()
            raise RolloutFailed("tool", "mcp", str(e)) from None
        except BaseException:
            await sessions.close()
            raise
        return sessions

    async def close(self) -> None:
        if self.prepared is not None:
            await self.prepared.close()
        for h in self.shared.values():
            await h.close()
        for w in self.warm.values():
            await w.close()


def _included(spec: MCPTools, tools: list[Any]) -> list[Any]:
    return [t for t in tools if spec.include is None or t.name in spec.include]


class MCPSessions:
    """One rollout's MCP servers. Rewards receive it as ``mcp``: ``await mcp.call(tool, {...})`` (any tool
    the servers list, also those ``include`` keeps from the model)."""

    def __init__(self, run: RunToolsets, rollout: Rollout) -> None:
        self.run = run
        self.rollout = rollout
        self.handles: dict[int, ServerHandle] = {}
        self.owned: list[ServerHandle] = []  # per-rollout servers: stopped with the rollout

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return self.run.schemas

    def owns(self, tool: str) -> bool:
        return tool in self.run.owner

    def __getitem__(self, name: str) -> Any:
        """The SDK's ``ClientSession`` of the toolset named ``name`` (for resources, prompts, raw calls)."""
        for i, spec in enumerate(self.run.specs):
            if spec.label == name:
                return self.handles[i].session
        raise KeyError(f"no MCP toolset named {name!r}; toolsets: {', '.join(s.label for s in self.run.specs)}")

    async def call(self, tool: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Call ``tool`` as a reward does: its structured content (a tool's ``{"result": x}`` wrapping
        unwrapped), else its text parsed as JSON, else its text. A tool error raises :class:`MCPToolError`."""
        args = {**(arguments or {}), **kwargs}
        try:
            res, text = await self._call(tool, args, by="reward")
        except (_Gone, _CallTimedOut) as e:
            raise MCPToolError(str(e)) from None
        if res.is_error:
            raise MCPToolError(f"MCP tool {tool!r} failed: {text[:500]}")
        if res.structured_content is not None:
            sc = res.structured_content
            return sc["result"] if isinstance(sc, dict) and set(sc) == {"result"} else sc
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return text

    async def call_for_model(self, tool: str, arguments: dict[str, Any]) -> str:
        """A model's tool call: the tool message's text. A tool error (the server's own, a schema
        failure, a call past ``call_timeout``) goes back to the model; a server that has gone fails the rollout."""
        try:
            res, text = await self._call(tool, arguments, by="model")
        except _CallTimedOut as e:
            self.rollout.errors.append(RolloutError("tool", tool, str(e)))
            return f"Error: {e}"
        except _Gone as e:
            raise RolloutFailed("tool", f"mcp:{e.label}", str(e)) from None
        if res.is_error:
            self.rollout.errors.append(RolloutError("tool", tool, f"the MCP tool returned an error: {text[:300]}"))
            return f"Error: {text}" if not text.startswith("Error") else text
        return text

    async def _call(self, tool: str, args: dict[str, Any], by: str) -> tuple[Any, str]:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        i = self.run.owner.get(tool) if by == "model" else self.run.owner.get(tool, self.run.any_owner.get(tool))
        if i is None:
            raise MCPToolError(f"no MCP toolset offers a tool named {tool!r}")
        h = self.handles[i]
        spec = h.spec
        t0 = time.perf_counter()
        entry: dict[str, Any] = {"server": h.label, "tool": tool, "arguments": args, "by": by}
        self.rollout.state.setdefault("mcp_calls", []).append(entry)
        try:
            if not h.alive:
                raise _Gone(h, h.gone())
            res = await _watched(h, h.session.call_tool(tool, args, read_timeout_seconds=spec.call_timeout))
        except MCPError as e:
            entry.update(error=True, ms=_ms(t0), result=str(e))
            if e.code == types.REQUEST_TIMEOUT and h.alive:
                raise _CallTimedOut(f"the MCP tool {tool!r} did not answer within {spec.call_timeout:g}s") from None
            if not h.alive or e.code == types.CONNECTION_CLOSED:
                raise _Gone(h, h.gone(_text_of_error(e))) from None
            res = types.CallToolResult(content=[types.TextContent(type="text", text=str(e))], is_error=True)
            return res, str(e)
        except _Gone as e:
            entry.update(error=True, ms=_ms(t0), result=str(e))
            raise
        except pydantic.ValidationError as e:  # an answer outside the specification: a tool error, as the server's own
            text = f"the MCP server {h.label!r} {off_spec(e)}"
            entry.update(error=True, ms=_ms(t0), result=text)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True), text
        except Exception as e:
            if isinstance(e, OSError | EOFError) or type(e).__module__.startswith(("anyio", "httpx", "httpcore")):
                entry.update(error=True, ms=_ms(t0), result=str(e))  # a transport that broke under the call
                raise _Gone(h, h.gone(f"{type(e).__name__}: {e}")) from None
            raise
        text = result_text(res)
        entry.update(error=bool(res.is_error), ms=_ms(t0), result=text[:TRACE_RESULT_CHARS])
        return res, text

    async def close(self) -> None:
        owned, self.owned = self.owned, []
        await asyncio.gather(*(h.close() for h in owned), return_exceptions=True)


class _Gone(Exception):
    def __init__(self, handle: ServerHandle, message: str) -> None:
        super().__init__(message)
        self.label = handle.label


#: How often a pending call checks that its server is still there.
_WATCH_S = 0.5


async def _watched(h: ServerHandle, call: Any) -> Any:
    """``call``, unless an HTTP server goes first: its session ends, or it stops accepting connections (the
    SDK would wait out the whole timeout for an answer that cannot come). A stdio server's exit closes
    its stream, which fails the call at once."""
    if not h.spec.url:
        return await call
    task = asyncio.ensure_future(call)
    keeper = h._keeper
    try:
        while True:
            waiting = {task} if keeper is None else {task, keeper}
            done, _ = await asyncio.wait(waiting, timeout=_WATCH_S, return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            if (keeper is not None and keeper.done()) or not await h.reachable():
                raise _Gone(h, h.gone("it stopped accepting connections" if h.spec.url else ""))
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class _CallTimedOut(Exception):
    pass


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


def _text_of_error(e: Any) -> str:
    return str(getattr(getattr(e, "error", None), "message", "") or e)


def result_text(res: Any) -> str:
    """A ``CallToolResult`` as the text of a tool message: its text parts (images and binary resources
    named), or its structured content as JSON when it has no text."""
    parts: list[str] = []
    for c in res.content or []:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(c.text)
        elif kind == "image":
            parts.append(f"[image {c.mime_type}, {len(c.data) * 3 // 4:,} bytes]")
        elif kind == "audio":
            parts.append(f"[audio {c.mime_type}]")
        elif kind == "resource":
            r = c.resource
            parts.append(getattr(r, "text", None) or f"[resource {r.uri}]")
        elif kind == "resource_link":
            parts.append(f"[resource {c.uri}]")
    if not parts and res.structured_content is not None:
        return orjson.dumps(res.structured_content, default=str).decode()
    return "\n".join(parts)
