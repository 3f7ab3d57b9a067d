"""Running MCP servers: one :class:`ServerHandle` per server, connected with the official ``mcp`` SDK.

Three ways to reach a server: a stdio process on the host (the SDK's ``stdio_client``), a streamable
HTTP URL (the SDK's ``streamable_http_client``), and a stdio server inside a rollout's sandbox, whose
stdin and stdout are a unix socket in the sandbox pool's bridge folder (``mcp_relay.py`` runs there).

The SDK's transports are anyio task groups that must be closed by the task that opened them, so each
handle is owned by a keeper task: it opens the transport and the ``ClientSession``, lists the tools,
hands the session out, and closes everything when the handle is closed. Any task may call tools.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pydantic

from workbench.authoring.mcp_tools import MCPTools
from workbench.errors import EnvLoadError

#: What ``host_open`` and friends return: the read and write streams a ``ClientSession`` takes.
Streams = tuple[Any, Any]
Connector = Callable[[contextlib.AsyncExitStack], Awaitable[Streams]]

_RELAY = Path(__file__).with_name("mcp_relay.py")
_LINE_LIMIT = 64 << 20  # the longest JSON-RPC line a sandboxed server may send


class ServerStartError(EnvLoadError):
    """An MCP server could not be started or did not answer ``initialize``."""


class ServerHandle:
    """One running MCP server: its session, its tools, and why it stopped if it did."""

    def __init__(self, spec: MCPTools, where: str = "") -> None:
        self.spec = spec
        self.label = spec.label
        self.where = where  # "" (host), "sandbox" or the URL
        self.session: Any = None
        self.tools: list[Any] = []
        self.exit_reason: str | None = None  # set once the server is known to have gone
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # read even when nobody waits
        self._stop = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._stderr: Any = None  # a host server's stderr (a temp file)
        self.program: asyncio.Task[Any] | None = None  # a sandboxed server's exec (its result has the stderr)
        self.started_s = 0.0

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, connect: Connector) -> ServerHandle:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self._keeper = asyncio.create_task(self._keep(connect), name=f"mcp:{self.label}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.spec.startup_timeout)
        except TimeoutError:
            timed_out = ServerStartError(f"MCP server {self.label!r} did not answer initialize within "
                                         f"{self.spec.startup_timeout:g}s{self._stderr_tail()}")
            await self.close()
            raise timed_out from None
        except asyncio.CancelledError:
            await self.close()
            raise
        except BaseException as e:
            if self.program is not None:  # let a sandboxed server's exit (and its stderr) arrive
                await asyncio.wait({self.program}, timeout=2.0)
            error = self._start_error(e)
            await self.close()
            raise error from None
        self.started_s = loop.time() - t0
        return self

    async def _keep(self, connect: Connector) -> None:
        from mcp import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await connect(stack)
                read = await stack.enter_async_context(_typed_input_schemas(read))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.tools = await _list_tools(session)
                self.session = session
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as e:
            if not self._ready.done():
                if isinstance(e, asyncio.CancelledError):
                    self._ready.cancel()
                else:
                    self._ready.set_exception(e)
            elif self.exit_reason is None:
                self.exit_reason = _describe(_first_leaf(e))
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            if self.exit_reason is None:
                self.exit_reason = "closed"

    def _start_error(self, e: BaseException) -> BaseException:
        if isinstance(e, ServerStartError | asyncio.CancelledError):
            return e
        first = _first_leaf(e)
        if isinstance(first, FileNotFoundError) and self.spec.command:
            return ServerStartError(f"MCP server {self.label!r}: the command {self.spec.command[0]!r} does not exist")
        if isinstance(first, PermissionError) and self.spec.command:
            return ServerStartError(f"MCP server {self.label!r}: the command {self.spec.command[0]!r} is not "
                                    "executable")
        if isinstance(first, pydantic.ValidationError):
            return ServerStartError(f"MCP server {self.label!r} {off_spec(first)}")
        reason = _describe(first)
        if self.spec.url:
            return ServerStartError(f"MCP server {self.label!r} at {self.spec.url} did not start a session "
                                    f"({reason})")
        return ServerStartError(f"MCP server {self.label!r} exited before answering initialize ({reason})"
                                f"{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        p = self.program
        if p is not None and p.done() and not p.cancelled() and p.exception() is None:
            lines = [ln.strip() for ln in p.result().stderr.splitlines() if ln.strip()]
            return f"; its stderr ends: {lines[-1][:300]}" if lines else ""
        f = self._stderr
        if f is None:
            return ""
        try:
            f.flush()
            f.seek(0)
            lines = [ln.strip() for ln in f.read()[-4000:].splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return f"; its stderr ends: {lines[-1][:300]}" if lines else ""

    async def close(self) -> None:
        self._stop.set()
        k = self._keeper
        if k is not None and not k.done():
            try:
                await asyncio.wait_for(asyncio.shield(k), 5.0)
            except (TimeoutError, Exception):
                k.cancel()
                with contextlib.suppress(BaseException):
                    await k
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                self._stderr.close()

    @property
    def alive(self) -> bool:
        return self.session is not None and self._keeper is not None and not self._keeper.done() and \
            self.exit_reason is None

    async def reachable(self) -> bool:
        """For an HTTP server: whether it still accepts a connection (others: True)."""
        if not self.spec.url:
            return True
        from urllib.parse import urlsplit

        u = urlsplit(self.spec.url)
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(u.hostname, port), 2.0)
        except (OSError, TimeoutError):
            return False
        w.close()
        return True

    def gone(self, detail: str = "") -> str:
        """Why calls to this server fail now, as one line."""
        tail = self._stderr_tail()
        why = self.exit_reason if self.exit_reason not in (None, "closed") else detail
        where = f" at {self.spec.url}" if self.spec.url else (" in the rollout's sandbox" if self.where == "sandbox"
                                                               else "")
        return f"the MCP server {self.label!r}{where} went away during the rollout" + (f" ({why})" if why else "") + tail


@contextlib.asynccontextmanager
async def _typed_input_schemas(read: Any) -> AsyncIterator[Any]:
    """The server's messages, each listed tool's input schema given the ``"type": "object"`` that the MCP
    specification requires where the server leaves it out. The SDK refuses such a listing whole; servers in wide
    use send one (``@modelcontextprotocol/server-filesystem`` 2025.8.21 lists schemas of ``{"$schema": ...}``
    alone for its tools without arguments), and an object is what they mean."""
    import anyio
    from mcp import types
    from mcp.shared.message import SessionMessage

    send, recv = anyio.create_memory_object_stream[Any](0)

    async def pump() -> None:
        async with send:
            async for item in read:
                if isinstance(item, SessionMessage) and isinstance(item.message, types.JSONRPCResponse):
                    listed = item.message.result.get("tools") if isinstance(item.message.result, dict) else None
                    for tool in listed if isinstance(listed, list) else ():
                        schema = tool.get("inputSchema") if isinstance(tool, dict) else None
                        if isinstance(schema, dict) and "type" not in schema:
                            schema["type"] = "object"
                await send.send(item)

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump)
        try:
            yield recv
        finally:
            tg.cancel_scope.cancel()


async def _list_tools(session: Any) -> list[Any]:
    from mcp import types

    tools: list[Any] = []
    cursor = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def _first_leaf(e: BaseException) -> BaseException:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


def off_spec(e: pydantic.ValidationError) -> str:
    """What a server did when the SDK refuses its answer as outside the MCP specification (the SDK checks
    every result against the protocol version the session agreed on), as the end of a sentence."""
    problems = e.errors()
    first = problems[0] if problems else {"loc": (), "msg": str(e)}
    where = ".".join(str(x) for x in first["loc"])
    more = f", and {len(problems) - 1} more" if len(problems) > 1 else ""
    return f"answered with a {e.title} the MCP specification does not allow ({where}: {first['msg']}{more})"


def _describe(e: BaseException) -> str:
    text = str(e).strip()
    if type(e).__name__ == "MCPError" and "Connection closed" in text:
        return "the connection closed"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# -- connectors ---------------------------------------------------------------------------------
def _on_host(spec: MCPTools, env_dir: Path | None) -> tuple[str | None, dict[str, str]]:
    """Where a host server runs (``cwd`` relative to the environment's folder) and its environment (the
    SDK's safe inherited variables, then ``env``)."""
    from mcp.client.stdio import get_default_environment

    cwd = spec.cwd
    if cwd is not None and not os.path.isabs(cwd) and env_dir is not None:
        cwd = str(env_dir / cwd)
    return cwd, {**get_default_environment(), **(spec.env or {})}


def host_connector(spec: MCPTools, handle: ServerHandle, env_dir: Path | None) -> Connector:
    """A stdio server started on the host (its stderr kept in a temp file for error messages)."""
    from mcp.client.stdio import StdioServerParameters, stdio_client

    assert spec.command is not None
    argv = list(spec.command)
    if os.sep not in argv[0] and shutil.which(argv[0]) is None:
        raise ServerStartError(f"MCP server {spec.label!r}: the command {argv[0]!r} is not on PATH")
    cwd, env = _on_host(spec, env_dir)
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)
    handle._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed with the handle)

    async def connect(stack: contextlib.AsyncExitStack) -> Streams:
        read, write = await stack.enter_async_context(stdio_client(params, errlog=handle._stderr))
        return read, write

    return connect


def forked_connector(spec: MCPTools, handle: ServerHandle, zygote: Any, env_dir: Path | None) -> Connector:
    """A stdio server forked from a preloaded interpreter (``mcp_zygote``): stdio is a unix socket."""
    from workbench.rollouts.mcp_zygote import stop

    assert spec.command is not None
    command = list(spec.command)
    cwd, env = _on_host(spec, env_dir)
    err_path = zygote.new_path(".err")
    handle._stderr = open(err_path, "w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed with the handle)

    async def connect(stack: contextlib.AsyncExitStack) -> Streams:
        async with _Listener(zygote.new_path(".sock")) as listener:
            pid = await zygote.fork(command, env, cwd, listener.path, err_path)
            stack.push_async_callback(stop, pid)
            reader, writer = await listener.accepted
        stack.callback(Path(err_path).unlink, missing_ok=True)
        return await stack.enter_async_context(_stream_transport(reader, writer))

    return connect


def http_connector(spec: MCPTools) -> Connector:
    """A streamable HTTP server: the toolset's headers on every request; connecting, writing and waiting
    for a connection within ``startup_timeout``, reading (a call's answer) within ``call_timeout``."""
    import httpx2  # the MCP SDK's HTTP client
    from mcp.client.streamable_http import streamable_http_client

    assert spec.url is not None
    url = spec.url

    async def connect(stack: contextlib.AsyncExitStack) -> Streams:
        timeout = httpx2.Timeout(spec.startup_timeout, read=max(spec.call_timeout, 60.0))
        client = await stack.enter_async_context(httpx2.AsyncClient(headers=dict(spec.headers or {}), timeout=timeout))
        read, write = await stack.enter_async_context(streamable_http_client(url, http_client=client))
        return read, write

    return connect


def install_relay(bridge_dir: Path) -> None:
    """Put the relay where every sandbox of the pool sees it (once per pool)."""
    dest = bridge_dir / _RELAY.name
    if not dest.exists():
        shutil.copyfile(_RELAY, dest)
        dest.chmod(0o644)


def sandbox_connector(spec: MCPTools, handle: ServerHandle, sandbox: Any, bridge_dir: Path,
                      python: str = "python3") -> Connector:
    """A stdio server inside ``sandbox``: the relay connects to a socket in the bridge folder and
    becomes the server, so its stdio is that socket. The server's exit ends the session."""
    from workbench.records.program_mounts import sandbox_argv

    assert spec.command is not None
    name = f"mcp-{uuid.uuid4().hex[:12]}.sock"
    host_sock, inner_sock = bridge_dir / name, f"{sandbox.bridge_path}/{name}"
    argv = [python, f"{sandbox.bridge_path}/{_RELAY.name}", inner_sock, "--",
            *sandbox_argv(list(spec.command), "local" if sandbox.isolated else "")]
    handle.where = "sandbox"

    async def connect(stack: contextlib.AsyncExitStack) -> Streams:
        async with _Listener(str(host_sock)) as listener:
            accepted = listener.accepted
            program = handle.program = asyncio.create_task(
                sandbox.exec(argv, timeout=86_400.0, cwd=spec.cwd, env=dict(spec.env or {})))
            done, _ = await asyncio.wait({accepted, program}, return_when=asyncio.FIRST_COMPLETED)
            if accepted not in done:
                r = program.result()
                tail = (r.stderr.strip().splitlines() or [""])[-1][:300]
                raise ServerStartError(f"MCP server {spec.label!r} exited in the sandbox before answering "
                                       f"initialize (exit code {r.exit_code}){': ' + tail if tail else ''}")
        reader, writer = accepted.result()

        async def stop_program() -> None:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(program), 2.0)
            if not program.done():
                program.cancel()  # the sandbox's release kills what is left
            with contextlib.suppress(BaseException):
                r = await program
                if handle.exit_reason is None and r.exit_code not in (0, -15, 143, 137):
                    handle.exit_reason = f"exit code {r.exit_code}"

        def watch(p: asyncio.Task[Any]) -> None:
            if p.cancelled() or p.exception() is not None or handle._stop.is_set():
                return
            r = p.result()
            if handle.exit_reason is None:
                tail = (r.stderr.strip().splitlines() or [""])[-1][:300]
                handle.exit_reason = f"exit code {r.exit_code}" + (f": {tail}" if tail else "")

        program.add_done_callback(watch)
        stack.push_async_callback(stop_program)
        return await stack.enter_async_context(_stream_transport(reader, writer))

    return connect


class _Listener:
    """A unix socket at ``path`` that takes one connection (a server's stdio), removed on leaving."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = \
            asyncio.get_running_loop().create_future()
        self._server: asyncio.AbstractServer | None = None

    def _on_connect(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if not self.accepted.done():
            self.accepted.set_result((r, w))
        else:
            w.close()

    async def __aenter__(self) -> _Listener:
        self._server = await asyncio.start_unix_server(self._on_connect, path=self.path, limit=_LINE_LIMIT)
        os.chmod(self.path, 0o777)  # a sandbox's user may differ from ours (Docker)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)


@contextlib.asynccontextmanager
async def _stream_transport(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> AsyncIterator[Streams]:
    """JSON-RPC lines over a byte stream, as the SDK's stdio transport frames them."""
    import anyio
    from mcp import types
    from mcp.shared.message import SessionMessage

    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    async def pump_in() -> None:
        async with read_send:
            while line := await reader.readline():
                try:
                    msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as e:
                    await read_send.send(e)
                    continue
                await read_send.send(SessionMessage(msg))

    async def pump_out() -> None:
        async with write_recv:
            async for sm in write_recv:
                writer.write(sm.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n")
                await writer.drain()

    async with anyio.create_task_group() as tg:
        tg.start_soon(pump_in)
        tg.start_soon(pump_out)
        try:
            yield read_recv, write_send
        finally:
            writer.close()
            tg.cancel_scope.cancel()
