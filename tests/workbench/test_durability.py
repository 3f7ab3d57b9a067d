"""Durability: a killed or interrupted eval leaves a sound store, and ``--resume`` finishes the run exactly."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ADDER_ENV,
    CliResult,
    MockServer,
    count_rollouts,
    last_json,
    query,
    wait_for,
    workbench_argv,
)

# slow: evals killed mid-run, then resumed, each through CLI processes
pytestmark = pytest.mark.slow

# With -c 1 and 10 ms of latency per request the first run cannot finish 1200 rollouts in under ~12 s;
# it is stopped as soon as a few groups are committed (well under a second on an idle machine).
N, R = 600, 2
TOTAL = N * R


@pytest.fixture
def slow_server(mock_server: Callable[..., MockServer]) -> MockServer:
    return mock_server("instant", latency=0.01)


@pytest.fixture
def start_eval(tmp_path: Path, cli_env: dict[str, str], write_env: Callable[..., Path], store_path: Path,
               slow_server: MockServer) -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env_file = write_env(ADDER_ENV)
        args = ["eval", str(env_file), "-a", f'{{"n": {N}}}', "--base-url", slow_server.base_url, "-m", "mock-model",
                "-n", str(N), "-r", str(R), "-c", "1", "--db", str(store_path), "--json"]
        out = open(tmp_path / "eval.stdout", "wb")  # noqa: SIM115
        err = open(tmp_path / "eval.stderr", "wb")  # noqa: SIM115
        proc = subprocess.Popen([*workbench_argv(), *args], env=cli_env, cwd=tmp_path, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        out.close()
        err.close()
        procs.append(proc)
        return proc

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(30)


def wait_until_mid_run(proc: subprocess.Popen[bytes], db: Path) -> int:
    """Block until at least three groups are committed; return how many rollouts that was."""
    return wait_for(lambda: (n if (n := count_rollouts(db)) >= 3 * R else 0), timeout=90,
                    what="the eval to commit its first groups", proc=proc)


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db, timeout=30)  # read-write, so a leftover WAL is recovered first
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def assert_groups_complete(db: Path, run_id: str) -> int:
    rows = query(db, "SELECT task_index, COUNT(*), COUNT(DISTINCT sample_index), MIN(sample_index), "
                     "MAX(sample_index) FROM rollout WHERE run_id=? GROUP BY task_index", (run_id,))
    partial = [r for r in rows if r[1:] != (R, R, 0, R - 1)]
    assert not partial, f"partially committed groups: {partial[:5]}"
    return len(rows)


def assert_finished_exactly(db: Path, run_id: str, summary: dict[str, Any]) -> None:
    assert summary["run_id"] == run_id
    assert summary["rollouts"] == TOTAL and summary["errors"] == 0
    assert summary["status"] == "completed"
    (count, distinct), = query(
        db, "SELECT COUNT(*), COUNT(DISTINCT task_index || '.' || sample_index) FROM rollout WHERE run_id=?",
        (run_id,))
    assert count == TOTAL and distinct == TOTAL, "no missing and no duplicate (task_index, sample_index)"
    assert assert_groups_complete(db, run_id) == N
    assert query(db, "SELECT status FROM run WHERE id=?", (run_id,)) == [("completed",)]
    # no orphaned child rows from a batch that died mid-write
    assert query(db, "SELECT COUNT(*) FROM model_call")[0][0] == TOTAL
    assert query(db, "SELECT COUNT(*) FROM score")[0][0] == TOTAL * 3  # correct, bonus, words
    assert query(db, "SELECT COUNT(*) FROM score s LEFT JOIN rollout r ON r.pk = s.rollout_pk "
                     "WHERE r.pk IS NULL")[0][0] == 0
    assert integrity(db) == "ok"


def the_run_id(db: Path) -> str:
    rows = query(db, "SELECT id FROM run")
    assert len(rows) == 1, rows
    return str(rows[0][0])


def test_kill_9_mid_eval_leaves_a_sound_store_and_resume_finishes_it(
        start_eval: Callable[[], subprocess.Popen[bytes]], store_path: Path, cli: Callable[..., CliResult]) -> None:
    proc = start_eval()
    wait_until_mid_run(proc, store_path)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL

    assert integrity(store_path) == "ok"
    run_id = the_run_id(store_path)
    committed = count_rollouts(store_path)
    assert 3 * R <= committed < TOTAL, "the kill must land in the middle of the run"
    assert assert_groups_complete(store_path, run_id) * R == committed

    res = cli("eval", "--resume", run_id, "--db", store_path, "-c", "32", "--json")
    assert res.rc == 0, res.stderr
    assert_finished_exactly(store_path, run_id, last_json(res.stdout))


def test_ctrl_c_interrupts_cleanly_and_resume_finishes_it(
        start_eval: Callable[[], subprocess.Popen[bytes]], store_path: Path, tmp_path: Path,
        cli: Callable[..., CliResult]) -> None:
    proc = start_eval()
    wait_until_mid_run(proc, store_path)
    proc.send_signal(signal.SIGINT)
    rc = proc.wait(60)
    stderr = (tmp_path / "eval.stderr").read_text()
    stdout = (tmp_path / "eval.stdout").read_text()
    assert rc == 130, f"rc={rc} stderr={stderr}"
    assert "Traceback" not in stderr
    run_id = the_run_id(store_path)
    assert "interrupted" in stderr.lower()
    assert f"--resume {run_id}" in stderr, stderr
    assert last_json(stdout)["status"] == "interrupted"
    assert query(store_path, "SELECT status FROM run WHERE id=?", (run_id,)) == [("interrupted",)]
    assert integrity(store_path) == "ok"
    committed = count_rollouts(store_path)
    assert committed < TOTAL
    assert assert_groups_complete(store_path, run_id) * R == committed

    res = cli("eval", "--resume", run_id, "--db", store_path, "-c", "32", "--json")
    assert res.rc == 0, res.stderr
    assert_finished_exactly(store_path, run_id, last_json(res.stdout))


def test_resuming_a_completed_run_adds_nothing(
        tmp_path: Path, cli: Callable[..., CliResult], write_env: Callable[..., Path], arith_server: MockServer,
        store_path: Path) -> None:
    env_file = write_env(ADDER_ENV)
    first = cli("eval", env_file, "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 3, "-r", 2,
                "--db", store_path, "--json")
    assert first.rc == 0, first.stderr
    run_id = last_json(first.stdout)["run_id"]
    again = cli("eval", "--resume", run_id, "--db", store_path, "--json")
    assert again.rc == 0, again.stderr
    s = last_json(again.stdout)
    assert s["run_id"] == run_id and s["rollouts"] == 6 and s["status"] == "completed"
    assert count_rollouts(store_path) == 6


def test_a_second_resume_of_a_run_being_resumed_refuses_up_front(
        start_eval: Callable[[], subprocess.Popen[bytes]], store_path: Path, cli: Callable[..., CliResult],
        cli_env: dict[str, str], tmp_path: Path) -> None:
    proc = start_eval()
    wait_until_mid_run(proc, store_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    run_id = the_run_id(store_path)
    first = subprocess.Popen([*workbench_argv(), "eval", "--resume", run_id, "--db", str(store_path), "-c", "1",
                              "--json"], env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        before = count_rollouts(store_path)
        wait_for(lambda: count_rollouts(store_path) > before, timeout=90, what="the first resume to commit",
                 proc=first)
        second = cli("eval", "--resume", run_id, "--db", store_path, "--json")
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert second.rc != 0 and "Traceback" not in second.stderr and len(lines) == 1, second.stderr
        assert f"run {run_id} is being run or resumed by process {first.pid}" in lines[0], lines[0]
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(30)
    assert first.returncode == 0, err.decode()
    assert_finished_exactly(store_path, run_id, last_json(out.decode()))


def _writer_pid(db: Path) -> int | None:
    """The store's writer process: a live process whose command line names this store."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(db).encode() in cmdline and b"workbench.store.writer import serve" in cmdline:
            return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds the writer process through /proc")
def test_killing_the_writer_process_leaves_the_run_failed_never_completed(
        start_eval: Callable[[], subprocess.Popen[bytes]], store_path: Path, tmp_path: Path) -> None:
    proc = start_eval()
    wait_until_mid_run(proc, store_path)
    pid = wait_for(lambda: _writer_pid(store_path), timeout=30, what="the writer process", proc=proc)
    os.kill(pid, signal.SIGKILL)
    rc = proc.wait(120)
    err = (tmp_path / "eval.stderr").read_text()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc != 0 and "Traceback" not in err and len(lines) == 1, err
    assert "writer" in lines[0].lower(), lines[0]
    run_id = the_run_id(store_path)
    (status, error), = query(store_path, "SELECT status, error FROM run WHERE id=?", (run_id,))
    assert status == "failed" and error, (status, error)
    assert integrity(store_path) == "ok"
    committed = count_rollouts(store_path)
    assert assert_groups_complete(store_path, run_id) * R == committed < TOTAL


def test_a_full_disk_mid_eval_is_one_clear_line_and_loses_nothing_committed(
        tmp_path: Path, cli_env: dict[str, str], write_env: Callable[..., Path], slow_server: MockServer) -> None:
    import shutil

    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a small file system for the store needs root and mount, which this run lacks")
    disk = tmp_path / "small"
    disk.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs here ({p.stderr.strip()})")
    try:
        db = disk / "store.db"
        env_file = write_env(ADDER_ENV)
        res = subprocess.run([*workbench_argv(), "eval", str(env_file), "-a", f'{{"n": {N}}}', "--base-url",
                              slow_server.base_url, "-m", "mock-model", "-n", str(N), "-r", str(R), "-c", "8",
                              "--db", str(db), "--json"], env=cli_env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=300)
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode != 0 and "Traceback" not in res.stderr and len(lines) == 1, res.stderr
        assert "full" in lines[0].lower(), lines[0]
        assert integrity(db) == "ok"
        rows = query(db, "SELECT id, status FROM run")
        assert len(rows) == 1 and rows[0][1] != "completed", rows
        committed = count_rollouts(db)
        assert assert_groups_complete(db, rows[0][0]) * R == committed < TOTAL
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
