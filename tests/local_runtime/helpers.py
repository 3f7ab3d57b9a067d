"""Helpers for the embedded-server tests: free ports, and server subprocesses on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVED = "workbench-tiny"
ARITH = [{"role": "system", "content": "Answer with a number."},
         {"role": "user", "content": "What is 7 + 5? Answer with just the number."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def post_json(url: str, body: dict[str, Any], timeout: float = 60.0) -> tuple[int, dict[str, Any]]:
    """POST ``body`` as JSON; (status, JSON answer), error statuses included."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["HF_HUB_OFFLINE"] = "1"
    return env


@contextlib.contextmanager
def run_server(model: Path | str, *args: str, timeout: float = 120.0) -> Iterator[str]:
    """A server subprocess on a free port; yields its root URL (without /v1) and stops it after."""
    port = free_port()
    cmd = [sys.executable, "-m", "workbench_local.server", "--model", str(model), "--port", str(port),
           "--threads", "1", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=server_env(), cwd=ROOT)
    root = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                out = proc.stdout.read().decode() if proc.stdout else ""
                raise RuntimeError(f"server exited with {proc.returncode}:\n{out}")
            with contextlib.suppress(OSError):
                get_json(root + "/health", timeout=1.0)
                break
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.2)
        yield root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
