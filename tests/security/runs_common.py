"""What the hostile-runs tests share: a seeded store of one finished adder run (each test works on its
own copy) and the snapshot that "nothing stored changed" compares."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ADDER_ENV,
    MockServer,
    cli_environment,
    copy_store,
    last_json,
    run_workbench,
    write_file,
)

TABLES = ("run", "rollout", "score", "rollout_error", "model_call", "cost_event")


def snapshot(db: Path) -> dict[str, Any]:
    """Row counts of the store's tables and its integrity check (what "nothing changed" compares)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
        counts["integrity"] = conn.execute("PRAGMA integrity_check").fetchone()[0]
        counts["runs"] = sorted(conn.execute("SELECT id, status FROM run").fetchall())
        return counts
    finally:
        conn.close()


class Seed:
    def __init__(self, db: Path, run_id: str) -> None:
        self.db, self.run_id = db, run_id


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory, arith_server: MockServer) -> Seed:
    """A store holding one finished adder run; each test works on its own copy."""
    home = tmp_path_factory.mktemp("seed")
    env_file = write_file(home / "adder_env.py", ADDER_ENV)
    db = home / "seed.db"
    res = run_workbench(["eval", env_file, "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 2,
                         "-r", 2, "--db", db, "--json"], cli_environment(home, db), cwd=home)
    assert res.rc == 0, res.stderr
    return Seed(db, last_json(res.stdout)["run_id"])


@pytest.fixture
def store(seed: Seed, store_path: Path) -> Path:
    return copy_store(seed.db, store_path)
