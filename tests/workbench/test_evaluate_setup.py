"""``evaluate`` starts the store's writer process before the endpoint is set up (its start-up overlaps the
set-up); a set-up that fails must not leave it behind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from workbench.errors import EndpointError
from workbench.runs.evaluate import EvalOptions, evaluate
from workbench.store import Store


def _writer_processes(db: Path) -> list[int]:
    """Live processes whose command line names this store (the writer process's does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(db).encode() in cmdline and state not in "ZX":
            found.append(int(entry.name))
    return found


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc to find the writer process")
async def test_a_failed_setup_leaves_no_writer_process(tmp_path: Path) -> None:
    db = tmp_path / "setup.db"
    store = Store(db)
    opts = EvalOptions(env="arithmetic", n=4, base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m")
    with pytest.raises(EndpointError, match="cannot reach"):
        await evaluate(opts, store)
    assert _writer_processes(db) == [], "the writer process of a run that never started is gone"
    assert store.conn.execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0
    store.close()
