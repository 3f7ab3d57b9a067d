"""The host side of one local command: reading its output into capped buffers, feeding its stdin, waiting
for it within its timeout, and killing and reaping its process group (``process_pool.py`` runs commands
this way where no exec agent serves the sandbox)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from workbench_local.sandbox.fs import Capture

from workbench.authoring.sandbox import ExecResult

TIMEOUT_EXIT = 124


class Tail:
    """The last 4 KiB of a stream (the agent's stderr, for error messages)."""

    def __init__(self, buf: bytearray) -> None:
        self.buf = buf

    def feed(self, data: bytes) -> None:
        self.buf += data
        del self.buf[:-4096]


def killpg(proc: asyncio.subprocess.Process) -> None:
    """Kill the process group the spawn started. ``proc.kill()`` only where that is refused: it polls the
    process first and may reap it under asyncio's child watcher (which then warns about an unknown child)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    except PermissionError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


async def reaped(proc: asyncio.subprocess.Process) -> None:
    """Wait for a killed process to exit, then close its pipes (not left to the garbage collector)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), 10)
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        with contextlib.suppress(Exception):
            transport.close()


async def pump(stream: asyncio.StreamReader | None, cap: Capture | Tail) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            return
        cap.feed(chunk)


async def _feed(proc: asyncio.subprocess.Process, data: str | bytes | None) -> None:
    if data is None or proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data.encode() if isinstance(data, str) else data)
        await proc.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()


async def communicate(proc: asyncio.subprocess.Process, stdin: str | bytes | None, timeout: float, cap: int,
                       t0: float) -> ExecResult:
    out, err = Capture.new(cap), Capture.new(cap)
    tasks = [asyncio.ensure_future(pump(proc.stdout, out)), asyncio.ensure_future(pump(proc.stderr, err)),
             asyncio.ensure_future(_feed(proc, stdin))]
    waiter = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait([*tasks[:2], waiter], timeout=timeout)
        if len(done) < 3:
            if waiter.done():  # exited, but something it started still holds the pipes
                await asyncio.wait(tasks[:2], timeout=max(0.0, min(1.0, timeout - (time.perf_counter() - t0))))
            if not all(t.done() for t in tasks[:2]) or not waiter.done():
                timed_out = not waiter.done() or time.perf_counter() - t0 >= timeout
                killpg(proc)
                # The whole tree goes with the pid namespace; keep what it wrote before it died.
                await asyncio.wait([*tasks[:2], waiter], timeout=2.0)
    except BaseException:
        killpg(proc)
        raise
    finally:
        for t in [*tasks, waiter]:
            if not t.done():
                t.cancel()
        for s in (proc.stdout, proc.stderr):
            if s is not None and hasattr(s, "_transport") and s._transport is not None:
                with contextlib.suppress(Exception):
                    s._transport.close()
    rc = proc.returncode
    if timed_out:
        code = TIMEOUT_EXIT
    elif rc is None:
        code = -1
    else:
        code = 128 - rc if rc < 0 else rc
    return ExecResult(code, out.text(), err.text(), timed_out, out.truncated or err.truncated,
                      time.perf_counter() - t0)
