"""What the hostile-runs tests share: a seeded store of one finished adder run (each test works on its
own copy) and the snapshot that "nothing stored changed" compares."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

# the seeded store of one finished adder run, and each test's copy of it: the bad-input tests' own
from tests.workbench.test_bad_input import Seed, seed, store

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


__all__ = ["TABLES", "Seed", "seed", "snapshot", "store"]
