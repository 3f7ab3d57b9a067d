"""The serving loop of a framework worker (``verifiers_v1_worker.py``, ``verifiers_legacy_worker.py``): a script
run by another interpreter (``workbench.frameworks.venvs``), which imports this file by its own folder, never
through Workbench. Standard library only.

A worker reads one JSON request a line on stdin and writes one JSON answer a line on stdout, carrying the
request's ``id``: ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error": "one line"}``. Requests
run concurrently on one event loop, except ``load``, which the rest wait for. Two requests are the loop's own:
``cancel`` (``{"target"}``: the request ``target`` is given up, its job cancelled; no answer) and ``close``
(serving ends). Anything the environment prints goes to stderr: stdout carries the answers only.
"""

import asyncio
import functools
import json
import os
import sys
import traceback
from typing import Any


class Refused(Exception):
    """What Workbench does not run, said in one line."""


def one_line(e: BaseException) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text[:600]


class JsonWorker:
    """A worker's requests: a subclass answers each ``op`` in :meth:`dispatch`."""

    def __init__(self, out: Any) -> None:
        self.out = out

    def send(self, message: dict) -> None:
        self.out.write(json.dumps(message, default=str) + "\n")
        self.out.flush()

    async def dispatch(self, op: str, request: dict) -> Any:  # pragma: no cover - each worker's own
        raise Refused(f"unknown request {op!r}")

    async def handle(self, request: dict) -> None:
        rid = request.get("id")
        try:
            result = await self.dispatch(str(request.get("op")), request)
            self.send({"id": rid, "ok": True, "result": result})
        except Refused as e:
            self.send({"id": rid, "ok": False, "error": str(e)})
        except Exception as e:  # noqa: BLE001 - the environment's own failure, answered in one line
            traceback.print_exc(file=sys.stderr)
            self.send({"id": rid, "ok": False, "error": one_line(e)})

    def cancelled(self, request: dict) -> None:
        """A request given up before it finished (a worker forgets what it kept for it)."""

    async def close(self) -> None:
        """Serving ends: what the environment holds is released."""


def _forget(running: dict, worker: JsonWorker, rid: Any, request: dict, job: "asyncio.Future[Any]") -> None:
    running.pop(rid, None)
    if job.cancelled():
        worker.cancelled(request)


async def _serve(make_worker: Any) -> None:
    # The answers' channel is the real stdout; whatever the environment prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = make_worker(out)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    running: dict = {}  # request id -> its job
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                request = json.loads(line)
            except ValueError:
                worker.send({"id": None, "ok": False, "error": "malformed request: not JSON"})
                continue
            if request.get("op") == "close":
                break
            if request.get("op") == "cancel":  # the run gave up on it (a timeout, Ctrl-C)
                target = running.get(request.get("target"))
                if target is not None:
                    target.cancel()
                continue
            if request.get("op") == "load":  # the rest waits for the environment
                await worker.handle(request)
                continue
            rid = request.get("id")
            job = asyncio.ensure_future(worker.handle(request))
            running[rid] = job
            job.add_done_callback(functools.partial(_forget, running, worker, rid, request))
    finally:
        jobs = list(running.values())
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        await worker.close()


def serve(make_worker: Any) -> None:
    """Serve requests on stdin with the worker ``make_worker(out)`` until stdin closes or ``close`` comes."""
    asyncio.run(_serve(make_worker))
