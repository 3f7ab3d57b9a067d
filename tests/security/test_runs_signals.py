"""Runs bounded by what they use and ended by signals: task sets of a billion tasks read only as far as
the run goes, SIGTERM and Ctrl-C ending eval within seconds with one line, and the arithmetic rubric on
numbers of any length. Real CLI subprocesses against the mock server; nothing stored is lost."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import (
    ADDER_ENV,
    CliResult,
    MockServer,
    last_json,
    query,
    write_file,
)
from tests.security import runs_common
from tests.security.runs_common import Seed, snapshot

# slow: evals ended by signals and runs of long task sets
pytestmark = pytest.mark.slow

seed, store = runs_common.seed, runs_common.store  # the fixtures, shared by the hostile-runs files

# -- task sets bounded by the run, and signals that always end a command ----------------------------
BILLION = '{"n": 1000000000}'


def test_a_billion_task_arithmetic_run_of_one_task_builds_one(cli: Callable[..., CliResult],
                                                               arith_server: MockServer, store_path: Path) -> None:
    res = cli("eval", "arithmetic", "-a", BILLION, "-n", 1, "--base-url", arith_server.base_url,
              "-m", "mock-model", "--json", timeout=120)
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["rollouts"] == 1
    assert query(store_path, "SELECT n_tasks FROM run") == [(1,)]


def test_play_and_probe_of_a_billion_task_set_read_only_what_they_use(cli_env: dict[str, str], tmp_path: Path,
                                                                      cli: Callable[..., CliResult],
                                                                      store_path: Path) -> None:
    import subprocess

    from tests.helpers import workbench_argv

    p = subprocess.run([*workbench_argv(), "play", "arithmetic", "-a", BILLION, "--task", "2", "--json"],
                       input="7\n", capture_output=True, text=True, timeout=120, cwd=tmp_path, env=cli_env)
    assert p.returncode == 0, p.stderr
    assert last_json(p.stdout)["status"] == "ok"
    res = cli("probe", "arithmetic", "-a", BILLION, "-n", 2, "--json", timeout=120)
    assert res.rc in (0, 1), res.stderr  # 1: a policy found an exploit, which is the probe's own verdict
    assert last_json(res.stdout)["tasks"] == 2
    assert query(store_path, "PRAGMA integrity_check") == [("ok",)]


STUCK_ENV = '''
from pathlib import Path

import workbench as wb


def load_environment() -> wb.Environment:
    Path({marker!r}).write_text("building")
    i = 0
    while True:  # a task set that never finishes building, in code that never yields
        i += 1
'''

SLOW_ENV = ADDER_ENV  # served by a mock that answers after a long sleep: the run is in flight


def _started(marker: Path, store: Path, phase: str) -> Callable[[], bool]:
    if phase == "building":
        return marker.exists
    return lambda: bool(store.exists() and _running(store))


def _running(store: Path) -> bool:
    try:
        return bool(query(store, "SELECT 1 FROM run WHERE status='running' AND id NOT IN "
                                 "(SELECT id FROM run WHERE kind != 'eval')"))
    except sqlite3.OperationalError:
        return False


SIGNAL_CASES = [
    ("sigterm-building", "SIGTERM", "building"),
    ("sigint-building", "SIGINT", "building"),
    ("sigterm-in-flight", "SIGTERM", "in-flight"),
    ("sigint-in-flight", "SIGINT", "in-flight"),
]


@pytest.mark.parametrize(("signame", "phase"), [c[1:] for c in SIGNAL_CASES], ids=[c[0] for c in SIGNAL_CASES])
def test_a_signal_ends_eval_within_seconds_with_one_line(signame: str, phase: str, cli_env: dict[str, str],
                                                         tmp_path: Path, store: Path, seed: Seed,
                                                         mock_server: Callable[..., MockServer]) -> None:
    import signal
    import subprocess

    from tests.helpers import stderr_lines, wait_for, workbench_argv

    before = snapshot(store)
    marker = tmp_path / "building.marker"
    if phase == "building":
        env_file = write_file(tmp_path / "src" / "stuck_env.py", STUCK_ENV.format(marker=str(marker)))
        base_url = "http://127.0.0.1:9/v1"
    else:
        env_file = write_file(tmp_path / "src" / "slow_env.py", SLOW_ENV)
        base_url = mock_server("script", script=[{"sleep": 600, "content": "1"}]).base_url
    proc = subprocess.Popen([*workbench_argv(), "eval", str(env_file), "--base-url", base_url, "-m", "mock-model",
                             "-n", "2"], env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        wait_for(_started(marker, store, phase), 60, f"eval to be {phase}", proc=proc)
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=60)  # a bound, not a timing: the grace is seconds
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = stderr_lines(err)
    assert len(lines) == 1, err
    after = snapshot(store)
    assert after["integrity"] == "ok"
    if phase == "building":
        assert lines[0] in ("interrupted", "aborted")
        assert after == before
    else:
        assert lines[0].startswith("interrupted: 0 rollouts kept; finish with `workbench eval --resume ")
        assert after["rollout"] == before["rollout"]
        assert [s for _, s in after["runs"]].count("interrupted") == 1


# -- the bundled arithmetic rubric and numbers of any length ---------------------------------------
LONG_ANSWERS = [
    ("twenty-million-digits", "1" * 20_000_000, "5", 0.0),
    ("past-the-int-limit", "9" * 5000, "5", 0.0),
    ("leading-zeros-right", "0" * 5000 + "5", "5", 1.0),
    ("long-decimal-zeros", "5." + "0" * 5000, "5", 1.0),
    ("long-decimal-not-integer", "5." + "0" * 5000 + "1", "5", 0.0),
]


@pytest.mark.parametrize(("completion", "answer", "reward"), [c[1:] for c in LONG_ANSWERS],
                         ids=[c[0] for c in LONG_ANSWERS])
def test_the_arithmetic_rubric_scores_a_number_of_any_length(completion: str, answer: str, reward: float) -> None:
    import asyncio

    from workbench.authoring.discovery import load

    env = load("arithmetic", {"n": 1})
    scores = asyncio.run(env.rubric.score_rollout({"completion": completion, "answer": answer}))
    assert scores.errors == []
    assert scores.rewards["correct"] == reward


def test_eval_of_arithmetic_answered_past_the_int_limit_has_no_reward_errors(
        cli: Callable[..., CliResult], mock_server: Callable[..., MockServer], store_path: Path) -> None:
    server = mock_server("instant", reply="7" * 5000)
    res = cli("eval", "arithmetic", "-n", 2, "-r", 2, "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["errors"] == 0
    assert query(store_path, "SELECT COUNT(*) FROM rollout_error") == [(0,)]
    assert query(store_path, "SELECT COUNT(*), SUM(reward) FROM rollout") == [(4, 0.0)]
