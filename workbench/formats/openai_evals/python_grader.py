"""A python grader's ``grade(sample, item)`` run in a Python process of its own, never in Workbench's.

The process (its own session, killed whole when it ends) gets the graders guide's limits: two minutes, 2 GiB of
memory, 1 GiB of files, set by the child before the grader's code runs; a clean
environment (no keys), an empty temporary working folder, Python's isolated mode. It is not a network
sandbox: the code is the eval's author's own, as it was on OpenAI's side. What the guide calls an invalid
grade — an exception, a value that is not a finite number, a timeout — scores 0, with the reason kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 120.0
MEMORY_BYTES = 2 * 1024**3
FILE_BYTES = 1024**3

# The child reads {"source", "sample", "item"} on stdin and writes {"score"} or {"error"} on the stdout it
# keeps for itself; the grader's own prints go to stderr.
_CHILD = r"""
import json, math, os, resource, sys, traceback
for limit, value in ((resource.RLIMIT_AS, @MEMORY@), (resource.RLIMIT_FSIZE, @FILES@), (resource.RLIMIT_CPU, @CPU@)):
    try:
        resource.setrlimit(limit, (value, value))
    except (ValueError, OSError):
        pass
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
payload = json.loads(sys.stdin.read())
def answer(obj):
    out.write(json.dumps(obj)); out.flush(); os._exit(0)
try:
    ns = {"__name__": "grader"}
    exec(compile(payload["source"], "<grader>", "exec"), ns)
    value = ns["grade"](payload["sample"], payload["item"])
except BaseException as e:
    tb = traceback.extract_tb(e.__traceback__)
    line = next((f.lineno for f in reversed(tb) if f.filename == "<grader>"), None)
    answer({"error": f"{type(e).__name__}: {e}" + (f" (grader line {line})" if line else "")})
if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
    answer({"error": f"grade returned {type(value).__name__} {value!r:.60}, not a finite float"})
answer({"score": float(value)})
""".replace("@MEMORY@", str(MEMORY_BYTES)).replace("@FILES@", str(FILE_BYTES)).replace(
    "@CPU@", str(int(TIMEOUT_S)))


@dataclass(frozen=True, slots=True)
class PythonResult:
    score: float
    error: str | None = None


def _kill(proc: asyncio.subprocess.Process) -> None:
    """End the grader's whole process group (what it started too)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def _drain(stream: asyncio.StreamReader | None, keep: int) -> bytes:
    """Everything ``stream`` says until it closes, of which the first ``keep`` bytes are kept (a grader that
    prints without end costs no memory)."""
    kept = bytearray()
    while stream is not None and (chunk := await stream.read(65536)):
        kept += chunk[:max(0, keep - len(kept))]
    return bytes(kept)


async def run_grader(source: str, sample: dict[str, Any], item: dict[str, Any],
                     timeout_s: float = TIMEOUT_S) -> PythonResult:
    """Run ``grade(sample, item)`` of ``source`` in a child Python; an invalid grade is score 0 with its reason."""
    payload = json.dumps({"source": source, "sample": sample, "item": item}).encode()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
    with tempfile.TemporaryDirectory(prefix="wb-grader-") as workdir:
        env["HOME"] = env["TMPDIR"] = workdir
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-c", _CHILD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=workdir, env=env, start_new_session=True)
        readers = (asyncio.ensure_future(_drain(proc.stdout, 1 << 20)),
                   asyncio.ensure_future(_drain(proc.stderr, 1 << 16)))
        try:
            await asyncio.wait_for(_exchange(proc, payload, readers[0]), timeout_s)
        except TimeoutError:
            return PythonResult(0.0, f"grade ran past {timeout_s:g} s")
        finally:
            _kill(proc)  # the grader and whatever it left running: its pipes close with them
            await proc.wait()
            out, err = await asyncio.gather(*readers)
    try:
        result = json.loads(out.decode("utf-8", "replace") or "null")
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict):
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return PythonResult(0.0, f"the grader process ended without a grade ({tail[0][:200]})")
    if "error" in result:
        return PythonResult(0.0, str(result["error"])[:500])
    return PythonResult(float(result["score"]))


async def _exchange(proc: asyncio.subprocess.Process, payload: bytes, answer: asyncio.Future[bytes]) -> None:
    """Give the grader its input and wait for its answer: its private stdout closes when it ends (a process it
    started holds only its stderr, which is not waited for)."""
    if proc.stdin is not None:
        try:
            proc.stdin.write(payload)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        proc.stdin.close()
    await asyncio.wait({answer})
