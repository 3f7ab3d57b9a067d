"""Start Python MCP servers by forking an interpreter that has already imported the MCP SDK.

A Python MCP server spends most of its start importing the SDK (pydantic, starlette, anyio: about half
a second of CPU). A per-rollout host server (``MCPTools(per_rollout=True, sandboxed=False)``) whose
command is ``[<this interpreter>, script.py, ...]`` is instead forked from a zygote: one process per
toolset that imports ``mcp.server.mcpserver`` once and then, per server, forks a child that connects to
a fresh unix socket (its stdin and stdout), takes the server's environment and working directory, and
runs the script as ``__main__``. The host speaks to it as to any stdio server.

The zygote reads one JSON request per line on a socket passed to it and answers each with the child's
pid; a command that is not a script of this interpreter starts the usual way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import orjson

#: The zygote's program (run with ``python -c``); standard library plus what it preloads.
_ZYGOTE = r"""
import atexit, json, os, runpy, signal, socket, sys
for name in sys.argv[2:]:
    __import__(name)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
ctl = os.fdopen(int(sys.argv[1]), "r+b", buffering=0)
for line in iter(ctl.readline, b""):
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        ctl.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(req["socket"])
            os.dup2(s.fileno(), 0)
            os.dup2(s.fileno(), 1)
            s.close()
            err = os.open(req["stderr"], os.O_WRONLY | os.O_APPEND)
            os.dup2(err, 2)
            os.close(err)
            # New stream objects: the zygote's were made for other files (not a socket).
            sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
            sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", closefd=False, buffering=1)
            os.environ.clear()
            os.environ.update(req["env"])
            if req.get("cwd"):
                os.chdir(req["cwd"])
            sys.argv = req["argv"][1:]
            sys.path[0] = os.path.dirname(os.path.abspath(req["argv"][1]))
            runpy.run_path(req["argv"][1], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0
        except BaseException as e:
            sys.stderr.write(f"{type(e).__name__}: {e}\n")
            code = 1
        atexit._run_exitfuncs()  # what the server registered (its temp files) runs as at a normal exit
        os._exit(code)
    ctl.write(json.dumps({"pid": pid}).encode() + b"\n")
"""

#: What the zygote imports up front.
PRELOAD = ("mcp.server.mcpserver",)


def forkable(argv: list[str]) -> bool:
    """Whether ``argv`` runs a Python script with this interpreter (the zygote's own)."""
    if len(argv) < 2 or not argv[1].endswith(".py") or not os.path.isfile(argv[1]):
        return False
    try:
        return os.path.realpath(argv[0]) == os.path.realpath(sys.executable) or \
            os.path.samefile(argv[0], sys.executable)
    except OSError:
        return False


class Zygote:
    """One preloaded interpreter that forks servers on request (see the module docstring)."""

    def __init__(self, stderr: Any) -> None:
        self.stderr = stderr
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.lock = asyncio.Lock()
        self.dir = Path(tempfile.mkdtemp(prefix="wb-mcp-"))

    async def start(self) -> Zygote:
        mine, theirs = socket.socketpair()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _ZYGOTE, str(theirs.fileno()), *PRELOAD, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=self.stderr, pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        self.reader, self.writer = await asyncio.open_connection(sock=mine)
        return self

    def new_path(self, suffix: str) -> str:
        return str(self.dir / f"{uuid.uuid4().hex[:12]}{suffix}")

    async def fork(self, argv: list[str], env: dict[str, str], cwd: str | None, sock: str, stderr: str) -> int:
        """A new child running ``argv``, connecting to ``sock`` (listen there first); its pid."""
        assert self.writer is not None and self.reader is not None
        async with self.lock:
            self.writer.write(orjson.dumps({"socket": sock, "argv": argv, "env": env, "cwd": cwd,
                                            "stderr": stderr}) + b"\n")
            await self.writer.drain()
            line = await self.reader.readline()
        if not line:
            raise OSError("the MCP server zygote exited")
        return int(orjson.loads(line)["pid"])

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), 5.0)
        with contextlib.suppress(OSError):
            for p in self.dir.iterdir():
                p.unlink()
            self.dir.rmdir()


async def stop(pid: int, grace_s: float = 2.0) -> None:
    """Let a server whose stdin has closed exit by itself (its exit handlers run), then kill what is left."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while loop.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.02)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
