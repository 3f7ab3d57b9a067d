"""The host end of a sandbox's exec agent (``agent.py``): commands as frames on one channel.

Both runtimes hold the agent's stdin/stdout: the process sandbox as the pipes of the ``bwrap`` process
that runs it, the Docker sandbox as the hijacked stream of one ``docker exec``. Many commands share
the channel at once, each with its own id. The host keeps the clock: at a command's timeout it asks
the agent to kill the command's tree and keeps the output so far; an agent that does not answer, dies
or says something it should not is dead, and every command in flight ends in :class:`AgentDied`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import marshal
import os
import struct
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from workbench_local.sandbox.fs import Capture

from workbench.authoring.sandbox import ExecResult, SandboxError

HEAD = struct.Struct(">cII")
TIMEOUT_EXIT = 124
KILL_WAIT_S = 5.0  # after a kill, how long the agent has to report the command's end
STDIN_CHUNK = 1 << 20
#: frames the agent sends, and the most a single one may carry (the agent reads 64 KiB at a time)
_AGENT_KINDS = frozenset(b"H12Ex!")
_MAX_FRAME = 1 << 20


class AgentDied(SandboxError):
    """The sandbox's exec agent stopped (killed from inside, out of memory, or the sandbox went away)."""


@cache
def agent_source() -> bytes:
    return Path(__file__).with_name("agent.py").read_bytes()


@lru_cache(maxsize=8)
def _compiled(python: str, stamp: tuple[int, int]) -> bytes:
    p = subprocess.run([python, "-I", "-S", "-c", "import marshal, sys\nsys.stdout.buffer.write(marshal.dumps("
                        "compile(sys.stdin.buffer.read(), 'wb-agent', 'exec')))"],
                       input=agent_source(), capture_output=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    return p.stdout if p.returncode == 0 else b""


def agent_code(python: str) -> bytes:
    """The agent compiled by ``python`` itself (host path; the same binary the sandbox runs), ``marshal``-ed:
    loading it skips compiling the source at every start. ``b""`` when that fails (the source is sent)."""
    try:
        st = os.stat(python)
    except OSError:
        return b""
    return _compiled(python, (st.st_mtime_ns, st.st_ino))


@cache
def warm_source() -> str:
    return Path(__file__).with_name("warm.py").read_text()


WARM_DEFAULT = ("unittest",)


def warm_config(setting: bool | Sequence[str]) -> dict[str, Any] | None:
    """The agent's ``warm`` configuration for a runtime's ``warm_python`` (None: off): the zygote's program
    and the modules it imports before it forks (``True``: what ``python3 -m unittest`` needs)."""
    if not setting:
        return None
    modules = WARM_DEFAULT if setting is True else tuple(str(m) for m in setting)
    return {"program": warm_source(), "modules": list(modules), "agent": agent_source().decode()}


def agent_argv(python: str = "python3", program: bytes | None = None) -> list[str]:
    """How a sandbox starts its agent: its own ``python3``, isolated (``-I``) and without ``site`` (``-S``),
    running a bootstrap that reads the agent (``program``: :func:`agent_code`, or the source when None)
    from the channel (:meth:`AgentChannel.open` sends it first), so ``ps`` inside shows one short line."""
    n = len(program if program else agent_source())
    run = "exec(__import__('marshal').loads(b))" if program else "exec(compile(b,'wb-agent','exec'))"
    boot = (f"import os\nb=b''\nwhile len(b)<{n}:\n c=os.read(0,{n}-len(b))\n if not c:raise SystemExit(3)\n"
            f" b+=c\n{run}")
    return [python, "-I", "-S", "-c", boot]


def _pack(obj: Any) -> bytes:
    return marshal.dumps(obj, 2)  # format 2 reads on every Python 3


def _numbers(payload: bytes) -> list[float]:
    return [float(x) for x in payload.split()]


@dataclass(slots=True)
class _Running:
    out: Capture
    err: Capture
    done: asyncio.Future[dict[str, Any]]
    dropped: list[int] = field(default_factory=lambda: [0, 0])


class AgentChannel:
    """One agent. ``read`` returns the next bytes the agent wrote (``b""`` at its end); ``writer`` is where
    frames for it go. ``diagnostics`` returns what the agent printed on stderr, for error messages."""

    def __init__(self, name: str, read: Callable[[], Awaitable[bytes]], writer: asyncio.StreamWriter,
                 diagnostics: Callable[[], str] = lambda: "") -> None:
        self.name = name
        self._read = read
        self._writer = writer
        self._diagnostics = diagnostics
        self._ids = itertools.count(1)
        self._running: dict[int, _Running] = {}
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._hello: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.ensure_future(self._read_loop())
        self.dead: str | None = None  # why it is dead
        self.info: dict[str, Any] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    async def open(self, config: Mapping[str, Any], program: bytes | None = None, timeout: float = 30.0
                   ) -> dict[str, Any]:
        """Send the agent its program (as :func:`agent_argv` was told) and configuration (rlimits, user, grace);
        wait for its hello."""
        try:
            self._writer.write(program or agent_source())
        except (ConnectionError, OSError, RuntimeError) as e:
            self.fail(f"the exec agent's channel broke ({e})")
            raise AgentDied(f"sandbox {self.name}: {self.dead}") from None
        self._send(b"C", 0, _pack(dict(config)))
        try:
            self.info = await asyncio.wait_for(asyncio.shield(self._hello), timeout)
        except TimeoutError:
            self.fail(f"the exec agent did not start within {timeout:g} s")
            raise AgentDied(f"sandbox {self.name}: {self.dead}") from None
        return self.info

    @property
    def alive(self) -> bool:
        return self.dead is None

    def fail(self, reason: str) -> None:
        """Declare the agent dead: every command in flight and every later one ends in :class:`AgentDied`."""
        if self.dead is not None:
            return
        extra = self._diagnostics().strip().splitlines()[-1:]
        self.dead = reason + (f" ({extra[0][:300]})" if extra else "")
        err = AgentDied(f"sandbox {self.name}: {self.dead}")
        for fut in [self._hello, *(r.done for r in self._running.values()), *self._replies.values()]:
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: a caller that gave up must not leave "never retrieved" noise
        with contextlib.suppress(Exception):
            self._writer.close()

    def abandon(self, reason: str) -> None:
        """End every command in flight with a :class:`SandboxError` (the sandbox was given back while they
        ran); the agent stays alive for a reset."""
        err = SandboxError(f"sandbox {self.name}: {reason}")
        for run in list(self._running.values()):
            if not run.done.done():
                run.done.set_exception(err)
                run.done.exception()
        self._running.clear()

    async def close(self) -> None:
        self.fail("the sandbox was closed")
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader

    # -- the wire ------------------------------------------------------------------------------
    def _send(self, kind: bytes, xid: int, payload: bytes = b"") -> None:
        if self.dead is not None:
            raise AgentDied(f"sandbox {self.name}: {self.dead}")
        try:
            self._writer.write(HEAD.pack(kind, xid, len(payload)) + payload)
        except (ConnectionError, OSError, RuntimeError) as e:
            self.fail(f"the exec agent's channel broke ({e})")
            raise AgentDied(f"sandbox {self.name}: {self.dead}") from None

    async def _drain(self) -> None:
        try:
            await self._writer.drain()
        except (ConnectionError, OSError, RuntimeError) as e:
            self.fail(f"the exec agent's channel broke ({e})")
            raise AgentDied(f"sandbox {self.name}: {self.dead}") from None

    async def _read_loop(self) -> None:
        buf = bytearray()
        reason = "the exec agent exited"
        try:
            while True:
                data = await self._read()
                if not data:
                    break
                buf += data
                while len(buf) >= HEAD.size:
                    kind, xid, size = HEAD.unpack_from(buf)
                    if kind[0] not in _AGENT_KINDS or size > _MAX_FRAME:
                        reason = f"the exec agent sent a malformed frame ({kind!r}, {size} bytes)"
                        return
                    if len(buf) < HEAD.size + size:
                        break
                    payload = bytes(buf[HEAD.size:HEAD.size + size])
                    del buf[:HEAD.size + size]
                    self._dispatch(kind, xid, payload)
        except asyncio.CancelledError:
            reason = "the sandbox was closed"
            raise
        except Exception as e:  # a broken stream is a dead agent, never a crash of the run
            reason = f"reading from the exec agent failed ({type(e).__name__}: {e})"
        finally:
            self.fail(reason)

    def _dispatch(self, kind: bytes, xid: int, payload: bytes) -> None:
        if kind in (b"1", b"2"):
            run = self._running.get(xid)
            if run is not None:
                (run.out if kind == b"1" else run.err).feed(payload)
        elif kind == b"E":
            run = self._running.get(xid)
            if run is not None and not run.done.done():
                code, out, err = _numbers(payload)
                run.done.set_result({"code": int(code), "dropped": [int(out), int(err)]})
        elif kind == b"x":
            fut = self._replies.pop(xid, None)
            if fut is not None and not fut.done():
                ok, left, ipc, cpu = _numbers(payload)
                fut.set_result({"ok": bool(ok), "left": int(left), "ipc": int(ipc), "cpu": cpu})
        elif kind == b"H":
            if not self._hello.done():
                pid, uid = _numbers(payload)
                self._hello.set_result({"pid": int(pid), "uid": int(uid)})
        elif kind == b"!":
            self.fail("the exec agent crashed: " + payload.decode(errors="replace")[:300])

    # -- commands ------------------------------------------------------------------------------
    async def exec(self, argv: list[str], *, cwd: str, env: Mapping[str, str], stdin: str | bytes | None,
                   timeout: float, cap: int) -> ExecResult:
        """Run one command; see :meth:`workbench.authoring.sandbox.Sandbox.exec` for the contract."""
        xid = next(self._ids)
        run = _Running(Capture.new(cap), Capture.new(cap), asyncio.get_running_loop().create_future())
        self._running[xid] = run
        t0 = time.perf_counter()
        timed_out = False
        try:
            spec = {"argv": list(argv), "cwd": cwd, "env": dict(env), "cap": cap, "stdin": stdin is not None}
            self._send(b"S", xid, _pack(spec))
            if stdin is not None:
                data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
                for i in range(0, len(data), STDIN_CHUNK):
                    self._send(b"I", xid, data[i:i + STDIN_CHUNK])
                    await self._drain()
                self._send(b"D", xid)
            await self._drain()
            try:
                end = await asyncio.wait_for(asyncio.shield(run.done), max(0.0, timeout - (time.perf_counter() - t0)))
            except TimeoutError:
                timed_out = True
                self._send(b"K", xid)
                try:
                    end = await asyncio.wait_for(asyncio.shield(run.done), KILL_WAIT_S)
                except TimeoutError:
                    self.fail(f"the exec agent did not end a timed-out command within {KILL_WAIT_S:g} s")
                    end = {"code": TIMEOUT_EXIT, "dropped": [0, 0]}
        except BaseException:
            if not run.done.done() and self.dead is None:  # cancelled: the command must not outlive us
                with contextlib.suppress(AgentDied):
                    self._send(b"K", xid)
            raise
        finally:
            self._running.pop(xid, None)
        dropped = end.get("dropped") or [0, 0]
        truncated = run.out.truncated or run.err.truncated or any(int(d) > 0 for d in dropped)
        return ExecResult(TIMEOUT_EXIT if timed_out else int(end["code"]), run.out.text(), run.err.text(), timed_out,
                          truncated, time.perf_counter() - t0)

    async def reset(self, timeout: float = 10.0) -> dict[str, Any]:
        """Kill every process of the sandbox user and clear its shared memory; the agent's report."""
        xid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[xid] = fut
        try:
            self._send(b"X", xid)
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self.fail(f"the exec agent did not finish a reset within {timeout:g} s")
            raise AgentDied(f"sandbox {self.name}: {self.dead}") from None
        finally:
            self._replies.pop(xid, None)


def docker_stream(reader: asyncio.StreamReader, errors: bytearray) -> Callable[[], Awaitable[bytes]]:
    """Read a ``docker exec`` stream (8-byte headers: stream, 0, 0, 0, big-endian size): stdout payloads
    are returned, stderr is kept (its last 4 KiB) in ``errors``."""

    async def read() -> bytes:
        while True:
            try:
                head = await reader.readexactly(8)
                data = await reader.readexactly(struct.unpack(">I", head[4:])[0])
            except (asyncio.IncompleteReadError, ConnectionError):
                return b""
            if head[0] == 2:
                errors.extend(data)
                del errors[:-4096]
            elif data:
                return data

    return read
