"""What the gateway's tests share besides fixtures: a running gateway, a plain HTTP POST, the store's rows."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import stop_process

PROVIDER_KEY = "sk-provider-" + "Q7x9" * 8  # what the upstream insists on; never in the store
PROVIDER_VAR = "WB_TEST_PROVIDER_KEY"


class Running:
    """A ``workbench gateway`` process and what it printed when it started serving."""

    def __init__(self, proc: subprocess.Popen[str], info: dict[str, Any]) -> None:
        self.proc, self.info = proc, info
        self.base_url = info["base_url"]
        self.root = self.base_url.removesuffix("/v1")

    def stop(self) -> str:
        stop_process(self.proc)
        return self.proc.stderr.read() if self.proc.stderr else ""


def post(url: str, key: str, body: Any) -> tuple[int, dict[str, Any]]:
    """POST ``body`` (JSON, or bytes as they are) with a gateway key: the status and the JSON answer."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rows_of(store: Path) -> list[dict[str, Any]]:
    """Every rollout in the store with its run's kind and route, oldest first."""
    conn = sqlite3.connect(store)
    try:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(
            "SELECT r.*, run.kind AS run_kind, run.model AS route FROM rollout r JOIN run ON run.id = r.run_id "
            "ORDER BY r.created_at")]
    finally:
        conn.close()


def store_bytes(store: Path) -> bytes:
    """The store's bytes, its WAL and shared-memory files included."""
    return b"".join(p.read_bytes() for p in store.parent.glob(store.name + "*"))
