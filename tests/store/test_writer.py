"""The batch writer: groups committed whole by its writer process, failures surfaced to the caller,
and nothing left behind or half-written when the process that owns it is killed."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workbench.authoring.rubric import Scores
from workbench.errors import StoreError
from workbench.records.rollout import Usage
from workbench.records.task import Task
from workbench.store import BatchWriter, RolloutRecord, Store

ROOT = Path(__file__).resolve().parents[2]


def group(task_index: int, word: str = "answer", r: int = 2) -> list[RolloutRecord]:
    task = Task(prompt=f"What is {task_index}?", answer=str(task_index), id=f"t{task_index}")
    return [RolloutRecord(
        id=f"run.{task_index}.{s}", run_id="run", env_name="env", model="m", task=task, task_index=task_index,
        sample_index=s, status="ok", error_kind=None, reward=1.0, usage=Usage(10, 2), duration_s=0.1, turns=1,
        completion=word, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"},
                                   {"role": "assistant", "content": word}],
        state={}, scores=Scores(rewards={"correct": 1.0}, metrics={"words": 1.0}, total=1.0), calls=[], errors=[],
    ) for s in range(r)]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "w.db") as s:
        s.create_run("run", env_name="env")
        yield s


def rows(store: Store, sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.conn.execute(sql)]


def test_groups_are_committed_with_their_side_tables_and_are_searchable(store: Store) -> None:
    writer = store.writer()
    writer.submit(group(0, "zebra"))
    writer.submit(group(1, "okapi"))
    writer.flush()
    assert writer.committed == 4
    assert rows(store, "SELECT COUNT(*) FROM score") == [(8,)]
    assert rows(store, "SELECT run_id, quantity FROM cost_event") == [("run", 48.0)]
    found = rows(store, "SELECT r.id FROM rollout_fts f JOIN rollout r ON r.pk = f.rowid "
                        "WHERE rollout_fts MATCH 'okapi' ORDER BY r.id")
    assert found == [("run.1.0",), ("run.1.1",)]
    assert rows(store, "SELECT COUNT(*) FROM rollout_fts WHERE rollout_fts MATCH 'brief'") == [(0,)]  # system prompt
    writer.close()


def test_a_failed_commit_surfaces_on_flush_submit_and_close_and_commits_nothing_of_its_batch(store: Store) -> None:
    writer = store.writer(linger_s=30.0)  # so that only a flush ends a batch
    writer.submit(group(0))
    writer.flush()
    writer.submit(group(1))
    writer.submit(group(0))  # the same slots again: the batch breaks the unique index
    with pytest.raises(sqlite3.IntegrityError):
        writer.flush()
    with pytest.raises(sqlite3.IntegrityError):
        writer.submit(group(2))
    with pytest.raises(sqlite3.IntegrityError):
        writer.close()
    assert rows(store, "SELECT task_index, COUNT(*) FROM rollout GROUP BY task_index") == [(0, 2)]


def test_a_writer_process_that_dies_surfaces_as_a_store_error(store: Store) -> None:
    writer = store.writer()
    writer.submit(group(0))
    writer.flush()
    writer._proc.kill()
    with pytest.raises(StoreError, match="writer process stopped"):
        writer.flush()
    with pytest.raises(StoreError):
        writer.submit(group(1))
    with pytest.raises(StoreError):
        writer.close()
    assert writer.committed == 2


def test_a_writer_process_that_cannot_start_says_why(tmp_path: Path) -> None:
    writer = BatchWriter(tmp_path / "no such directory" / "w.db")
    with pytest.raises(StoreError, match="unable to open database file"):
        writer.flush()
    with pytest.raises(StoreError):
        writer.close()


_OWNER = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from tests.store.test_writer import group
from workbench.store import Store

store = Store(sys.argv[2])
store.create_run("run", env_name="env")
writer = store.writer(linger_s=30.0)
writer.submit(group(0))
writer.flush()
writer.submit(group(1))  # still lingering in the writer process when its owner dies
print(writer._proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _exited(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"  # dead, or a zombie
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_killing_the_owner_ends_the_writer_process_without_committing_what_it_had_not(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    owner = subprocess.run([sys.executable, "-c", _OWNER, str(ROOT), str(db)], capture_output=True, text=True,
                           timeout=60)
    assert owner.returncode == -signal.SIGKILL, owner.stderr
    pid = int(owner.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _exited(pid):
        assert time.monotonic() < deadline, "the writer process outlived its owner"
        time.sleep(0.02)
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT task_index, COUNT(*) FROM rollout GROUP BY task_index").fetchall() == [(0, 2)]
    conn.close()


async def test_groups_submitted_under_an_event_loop_go_down_the_pipe_without_blocking_it(store: Store) -> None:
    """Under a loop, submit never writes at once: groups gather for a few milliseconds and go in one
    non-blocking write; far more than the pipe holds (64 KiB) still arrives whole, and what is still
    gathering when the writer is closed is written by close."""
    import asyncio

    writer = store.writer()
    big = "x" * 20_000  # 100 groups of ~40 KB: the pipe fills over and over
    for i in range(100):
        writer.submit(group(i, word=f"w{i} {big}"))
        if i % 10 == 0:
            await asyncio.sleep(0.01)  # let some scheduled writes happen in between
    writer.submit(group(100, "last"))  # still gathering: close must write it
    writer.close()
    assert rows(store, "SELECT COUNT(*), COUNT(DISTINCT task_index) FROM rollout") == [(202, 101)]
    assert rows(store, "SELECT completion FROM rollout WHERE task_index = 100") == [("last",), ("last",)]


def test_values_json_cannot_hold_are_stored_as_text_not_lost(store: Store) -> None:
    """A rollout whose state holds an integer beyond 64 bits (orjson refuses it) or an object that is not
    JSON is stored with the integer as text and the object's repr; the other rollouts of its group too."""

    class Opaque:
        def __repr__(self) -> str:
            return "<opaque thing>"

    g = group(0)
    g[0].state = {"huge": 2**70, "nested": [1, {"deeper": -(2**65)}], "thing": Opaque()}
    writer = store.writer()
    writer.submit(g)
    writer.close()
    import json

    states = {r[0]: json.loads(r[1]) for r in rows(store, "SELECT sample_index, state FROM rollout")}
    assert states[0] == {"huge": str(2**70), "nested": [1, {"deeper": str(-(2**65))}], "thing": "<opaque thing>"}
    assert states[1] == {}
