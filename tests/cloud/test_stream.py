"""The streaming protocol: a remote run's store → event log → the laptop's store, exactly once,
through dropped connections, duplicate deliveries and a restarted exporter."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.stream import (
    DirLog,
    Event,
    Exporter,
    KeyValueLog,
    follow,
    ingest,
    read_cursor,
    spent_usd,
)

from workbench.store import Store


def _remote_store(path: Path, cli: Any, mock_server: Any) -> str:
    """A real eval run (into the 'remote' store) plus training records and cost events."""
    mock = mock_server("arithmetic", "--tokens")
    rc, out, err = cli("eval", "arithmetic", "-n", "12", "-r", "2", "--base-url", mock.base_url, "-m", "mock-model",
                       "--db", str(path), "--json")
    assert rc == 0, err
    store = Store(path)
    run_id = store.conn.execute("SELECT id FROM run").fetchone()[0]
    store.conn.execute("UPDATE run SET kind = 'train', status = 'running' WHERE id = ?", (run_id,))
    for step in (1, 2, 3):
        store.record_train(run_id, step, "step", {"reward_mean": step / 10}, f"step-{step}")
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES (?, 'gpu_seconds', 'local', 'cpu', 2.0, 'gpu_seconds', 0.5, ?)",
                           (run_id, time.time() + step))
    store.close()
    return run_id


def _local(path: Path, run_id: str) -> sqlite3.Connection:
    store = Store(path)
    store.create_run(run_id, kind="train", env_name="arithmetic", config={"stream": {"kind": "dir"}})
    store.close()
    return sqlite3.connect(path, isolation_level=None)


def _table(conn: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted(conn.execute(sql).fetchall())


ROLLOUTS = "SELECT id, reward, status, messages, completion FROM rollout"
SCORES = "SELECT r.id, s.name, s.value FROM score s JOIN rollout r ON r.pk = s.rollout_pk"
TRACES = "SELECT r.id, t.token_ids, t.logprobs, t.mask, t.nodes FROM trace t JOIN rollout r ON r.pk = t.rollout_pk"


class Flaky:
    """A log whose reads fail every other time and re-deliver events already read."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def read(self, after: int, limit: int = 500) -> list[Event]:
        self.calls += 1
        if self.calls % 2 == 0:
            raise ConnectionError("connection reset")
        return self.inner.read(max(0, after - 3), min(limit, 7))  # 3 duplicates, small pages

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.parametrize("backing", ["dir", "kv"])
def test_a_run_streams_exactly_once_through_drops_and_duplicates(tmp_path: Path, cli: Any, mock_server: Any,
                                                                 backing: str) -> None:
    remote = tmp_path / "remote.db"
    run_id = _remote_store(remote, cli, mock_server)
    log = DirLog(tmp_path / "stream") if backing == "dir" else KeyValueLog({})
    exporter = Exporter(remote, run_id, log)
    assert exporter.pump() > 0
    assert exporter.pump() == 0  # nothing new
    Store(remote).update_run(run_id, status="completed")
    assert exporter.pump() == 1  # the run's new status
    local = _local(tmp_path / "local.db", run_id)

    flaky = Flaky(log)
    seen: list[Event] = []
    status = follow(local, run_id, flaky, on_event=seen.append, poll_s=0.01, retry_max_s=0.02, timeout_s=60)
    assert status == "completed" and flaky.calls > 4
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))  # every event once, in order
    rem = sqlite3.connect(remote)
    for sql in (ROLLOUTS, SCORES, TRACES):
        assert _table(local, sql) == _table(rem, sql)
    assert local.execute("SELECT COUNT(*) FROM rollout").fetchone()[0] == 24
    assert [r[0] for r in local.execute("SELECT step FROM train_metric ORDER BY step")] == [1, 2, 3]
    assert spent_usd(local, run_id) == pytest.approx(1.5)
    assert local.execute("SELECT status FROM run WHERE id = ?", (run_id,)).fetchone()[0] == "completed"
    # The launch's own config (where the stream lives) is kept.
    assert "stream" in local.execute("SELECT config FROM run WHERE id = ?", (run_id,)).fetchone()[0]
    # Full-text search works on what was ingested.
    assert local.execute("SELECT COUNT(*) FROM rollout_fts WHERE rollout_fts MATCH 'number'").fetchone()[0] > 0

    # A restarted exporter re-sends everything under new sequence numbers: nothing is added twice.
    cursor = read_cursor(local, run_id)
    again = Exporter(remote, run_id, log)
    assert again.pump() > 0
    ingest(local, run_id, log.read(cursor, 10_000))
    assert read_cursor(local, run_id) > cursor
    assert local.execute("SELECT COUNT(*) FROM rollout").fetchone()[0] == 24
    assert local.execute("SELECT COUNT(*) FROM train_metric").fetchone()[0] == 3
    assert local.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_ingest_skips_replays_and_stops_at_a_gap(tmp_path: Path) -> None:
    conn = _local(tmp_path / "local.db", "r1")
    row = {"run_id": "r1", "step": 1, "kind": "step", "metrics": "{}", "message": "", "created_at": 1.0}
    ev = [{"seq": 1, "kind": "train", "row": row}, {"seq": 3, "kind": "train", "row": {**row, "created_at": 3.0}}]
    assert [e["seq"] for e in ingest(conn, "r1", ev)] == [1]  # seq 2 is missing: stop before 3
    assert read_cursor(conn, "r1") == 1
    assert ingest(conn, "r1", ev[:1]) == []  # a duplicate delivery
    ev.insert(1, {"seq": 2, "kind": "train", "row": {**row, "created_at": 2.0}})
    assert [e["seq"] for e in ingest(conn, "r1", ev)] == [2, 3]
    assert conn.execute("SELECT COUNT(*) FROM train_metric").fetchone()[0] == 3


def test_budget_guard_raises_the_stop_flag(tmp_path: Path) -> None:
    conn = _local(tmp_path / "local.db", "r1")
    log = DirLog(tmp_path / "stream")
    cost = {"run_id": "r1", "kind": "gpu_seconds", "provider": "local", "model": "cpu", "quantity": 1.0,
            "unit": "gpu_seconds", "usd": 0.4}
    log.append([{"kind": "cost", "row": {**cost, "created_at": float(i)}} for i in range(3)])
    follow(conn, "r1", log, budget_usd=1.0, poll_s=0.01, until_finished=False, timeout_s=0.3)
    assert log.stop_requested() == "budget reached: $1.2000 spent of $1.0000"


def test_dir_log_reads_from_a_cursor_and_ignores_a_half_written_line(tmp_path: Path) -> None:
    log = DirLog(tmp_path)
    assert log.append([{"kind": "x", "i": i} for i in range(5)]) == 5
    assert [e["i"] for e in log.read(2)] == [2, 3, 4]
    with open(log.file, "ab") as f:
        f.write(b'{"seq": 6, "kind": "x"')  # the writer is mid-line
    assert [e["seq"] for e in log.read(0, limit=100)] == [1, 2, 3, 4, 5]
    assert DirLog(tmp_path).head() == 5  # a reopened log counts only whole lines
