"""Workbench's end of a framework worker: a process of another interpreter (``venvs.FrameworkEnv``) that runs
an environment written for that framework, spoken to in JSON lines over its stdin and stdout.

Each request carries an ``id``; the worker answers ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false,
"error": "one line"}``, in whatever order its work finishes, so many requests (rollouts) are in flight at once.
A reader thread hands every answer to the request waiting for it: a call can wait from any thread
(:meth:`WorkerBridge.call`) or any event loop (:meth:`WorkerBridge.acall`). The worker's stderr is kept (its
last lines explain a worker that died). One worker serves one loaded environment; it ends with the bridge
(``close``), or with this process: its stdin closing ends it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import itertools
import os
import subprocess
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import EnvLoadError

#: How long a request waits for a worker that started but never answers at all.
LOAD_TIMEOUT_S = 600.0
_STDERR_LINES = 40


class WorkerError(Exception):
    """A request the worker answered with an error (its one line is the message)."""


class WorkerBridge:
    """One worker process and the requests in flight to it."""

    def __init__(self, argv: Sequence[str], *, name: str, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._waiting: dict[int, concurrent.futures.Future[Any]] = {}
        self._lock = threading.Lock()  # the requests waiting for an answer
        self._writing = threading.Lock()  # one request at a time on the worker's stdin
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        try:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, cwd=cwd, start_new_session=True)
        except OSError as e:
            raise EnvLoadError(f"cannot start the {name} worker ({argv[0]}): {e.strerror or e}") from None
        threading.Thread(target=self._read, daemon=True, name=f"{name}-answers").start()
        threading.Thread(target=self._drain_stderr, daemon=True, name=f"{name}-stderr").start()
        _LIVE.add(self)

    # -- requests ---------------------------------------------------------------------------------
    def submit(self, op: str, **fields: Any) -> concurrent.futures.Future[Any]:
        """Send one request; its future holds the result, or a :class:`WorkerError`."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        rid = next(self._ids)
        future.request_id = rid  # type: ignore[attr-defined]  # what a cancel names
        line = orjson.dumps({"id": rid, "op": op, **fields}) + b"\n"
        with self._lock:
            if self.proc.poll() is not None or self.proc.stdin is None:
                future.set_exception(WorkerError(self._died()))
                return future
            self._waiting[rid] = future
        # Written outside ``_lock``: a write waits while the worker's stdin is full, and the worker reads it
        # only once its answers are taken, which the reader thread does under ``_lock``.
        with self._writing:
            try:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                with self._lock:
                    self._waiting.pop(rid, None)
                future.set_exception(WorkerError(self._died()))
        return future

    def notify(self, op: str, **fields: Any) -> None:
        """Send a request that has no answer (``cancel``)."""
        with self._writing:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(orjson.dumps({"op": op, **fields}) + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError, AssertionError):
                pass

    def call(self, op: str, timeout: float | None = LOAD_TIMEOUT_S, **fields: Any) -> Any:
        """A request answered before this thread goes on."""
        future = self.submit(op, **fields)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise WorkerError(f"the {self.name} worker did not answer {op!r} in {timeout:.0f} s") from None

    async def acall(self, op: str, **fields: Any) -> Any:
        """A request awaited in the running event loop; a cancelled wait tells the worker to give it up."""
        future = self.submit(op, **fields)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            rid = getattr(future, "request_id", None)
            if rid is not None:
                with self._lock:
                    self._waiting.pop(rid, None)
                if self.alive:
                    self.notify("cancel", target=rid)
            raise

    # -- the worker's output ----------------------------------------------------------------------
    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                answer = orjson.loads(raw)
            except orjson.JSONDecodeError:
                self._stderr.append(raw.decode(errors="replace").rstrip())
                continue
            if not isinstance(answer, dict):
                continue
            rid = answer.get("id")
            with self._lock:
                future = self._waiting.pop(rid, None) if isinstance(rid, int) else None
            if future is None or future.done():
                continue
            if answer.get("ok"):
                future.set_result(answer.get("result"))
            else:
                future.set_exception(WorkerError(str(answer.get("error") or "the worker failed")))
        self.proc.wait()
        with self._lock:
            waiting, self._waiting = self._waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(WorkerError(self._died()))

    def _drain_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr.append(raw.decode(errors="replace").rstrip())

    def stderr_tail(self) -> list[str]:
        return [ln for ln in self._stderr if ln.strip()]

    def _died(self) -> str:
        code = self.proc.poll()
        tail = [ln.strip() for ln in self.stderr_tail()][-1:]
        why = f": {tail[0][:300]}" if tail else ""
        state = f"exited with {code}" if code is not None else "stopped answering"
        return f"the {self.name} worker {state}{why}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- the end ----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Ask the worker to end (its environment's serving ends too) without waiting for it."""
        _LIVE.discard(self)
        if self.proc.poll() is None:
            with self._lock:
                try:
                    assert self.proc.stdin is not None
                    self.proc.stdin.write(b'{"op": "close"}\n')
                    self.proc.stdin.close()
                except (BrokenPipeError, ValueError, OSError, AssertionError):
                    pass

    def close(self, timeout: float = 15.0) -> None:
        """Ask the worker to end, then make sure it has."""
        self.shutdown()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group()

    def _signal_group(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.proc.wait(10)


_LIVE: weakref.WeakSet[WorkerBridge] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for bridge in list(_LIVE):
        bridge.close(timeout=5.0)


__all__ = ["WorkerBridge", "WorkerError"]
