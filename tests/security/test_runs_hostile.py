"""Hostile input to runs: rewards that are not finite or that exit, tools that exit, rows the store
refuses, and stores that are not there or not files. Each case drives the real CLI as a subprocess
against the mock server and asserts the one line, the exit code, and that nothing stored changed (row
counts, ``PRAGMA integrity_check``). Signals and task sets: test_runs_signals.py; compare, resume,
distill, probe, SFT data, play and optimize: test_runs_commands.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import (
    ADDER_ENV,
    CliResult,
    MockServer,
    assert_user_error,
    last_json,
    query,
)
from tests.security import runs_common
from tests.security.runs_common import Seed, snapshot

# slow: a CLI eval against a mock server per case
pytestmark = pytest.mark.slow

seed, store = runs_common.seed, runs_common.store  # the fixtures, shared by the hostile-runs files

# -- rewards that are not finite numbers, or that exit ------------------------------------------
REWARD_ENV = '''
import sys

import workbench as wb


def load_environment(n: int = 4) -> wb.Environment:
    rows = [{{"prompt": f"What is {{i}} + 1?", "answer": str(i + 1)}} for i in range(n)]
    rubric = wb.Rubric()

    @rubric.reward
    def fine(completion: str) -> float:
        return 1.0

    @rubric.{kind}
    def hostile({args}):
        {body}

    return wb.Environment(name="hostile", tasks=wb.TaskSet.from_records(rows, name="hostile"),
                          harness=wb.SingleTurn(), rubric=rubric, sampling=wb.Sampling(max_tokens=8))
'''

#: (id, decorator, arguments, body, what the error row says)
HOSTILE_REWARDS = [
    ("inf", "reward", "completion: str", "return float('inf')", "inf"),
    ("minus-inf", "reward", "completion: str", "return float('-inf')", "-inf"),
    ("nan", "reward", "completion: str", "return float('nan')", "nan"),
    ("overflow", "reward", "completion: str", "return 1e308 * 10", "inf"),
    ("huge-int", "reward", "completion: str", "return 10 ** 400", "too large"),
    ("dict-inf", "reward", "completion: str", "return {'a': 1.0, 'b': float('inf')}", "hostile.b"),
    ("weighted-overflow", "reward(weight=1e308)", "completion: str", "return 1e308", "finite"),
    ("metric-inf", "metric", "completion: str", "return float('inf')", "inf"),
    ("group-inf", "group_reward", "completions: list", "return [float('inf')] * len(completions)", "inf"),
    ("sys-exit", "reward", "completion: str", "sys.exit(3)", "SystemExit"),
    ("keyboard-interrupt", "reward", "completion: str", "raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("group-sys-exit", "group_reward", "completions: list", "sys.exit(0)", "SystemExit"),
]


@pytest.mark.parametrize(("kind", "args", "body", "says"), [c[1:] for c in HOSTILE_REWARDS],
                         ids=[c[0] for c in HOSTILE_REWARDS])
def test_a_hostile_reward_is_an_error_on_its_rollout_and_the_run_goes_on(
        kind: str, args: str, body: str, says: str, cli: Callable[..., CliResult], write_env: Callable[..., Path],
        store: Path, seed: Seed, arith_server: MockServer) -> None:
    before = snapshot(store)
    env_file = write_env(REWARD_ENV.format(kind=kind, args=args, body=body), "hostile_env.py")
    res = cli("eval", env_file, "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 4, "-r", 2, "--json")
    assert res.rc == 0, res.stderr
    assert "Traceback" not in res.stderr
    run_id = last_json(res.stdout)["run_id"]
    assert query(store, "SELECT status FROM run WHERE id=?", (run_id,)) == [("completed",)]
    assert query(store, "SELECT COUNT(*), COUNT(reward) FROM rollout WHERE run_id=?", (run_id,)) == [(8, 8)]
    errors = query(store, "SELECT e.kind, e.source, e.message FROM rollout_error e WHERE e.run_id=?", (run_id,))
    assert len(errors) == 8 and all(k == "reward" and says.lower() in m.lower() for k, _, m in errors), errors
    # Only finite scores are stored; the rollouts' other reward is kept.
    values = [v for (v,) in query(store, "SELECT s.value FROM score s JOIN rollout r ON r.pk = s.rollout_pk "
                                         "WHERE r.run_id=? AND s.name='fine'", (run_id,))]
    assert values == [1.0] * 8
    after = snapshot(store)
    assert after["integrity"] == "ok"
    assert (seed.run_id, "completed") in after["runs"] and after["rollout"] == before["rollout"] + 8


TOOL_ENV = '''
import sys

import workbench as wb


def explode(x: int) -> str:
    """Explode."""
    sys.exit(5)


def load_environment() -> wb.Environment:
    rubric = wb.Rubric()

    @rubric.reward
    def fine(completion: str) -> float:
        return 1.0

    return wb.Environment(name="tooly", tasks=wb.TaskSet.from_records([{"prompt": "go", "answer": "1"}]),
                          harness=wb.ToolLoop(tools=[explode]), rubric=rubric)
'''


def test_a_tool_that_calls_sys_exit_is_a_tool_error_on_its_rollout(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
        mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("script", "--by-turn", script=[
        {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "explode", "arguments": "{\"x\": 1}"}}]},
        "done"])
    env_file = write_env(TOOL_ENV, "tool_env.py")
    res = cli("eval", env_file, "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    run_id = last_json(res.stdout)["run_id"]
    assert query(store, "SELECT status, reward FROM rollout WHERE run_id=?", (run_id,)) == [("ok", 1.0)]
    errors = query(store, "SELECT kind, source, message FROM rollout_error WHERE run_id=?", (run_id,))
    assert errors == [("tool", "explode", "SystemExit: 5")]


def test_the_writer_keeps_a_batch_whose_rows_the_store_refuses(tmp_path: Path) -> None:
    """A record made outside scoring with a non-finite score, and one with a value SQLite cannot hold:
    each is kept (bare where need be), the rest of the batch with it."""
    from workbench.authoring.rubric import Scores
    from workbench.records.rollout import Usage
    from workbench.records.task import Task
    from workbench.store import RolloutRecord, Store

    def record(i: int, scores: Scores, turns: int = 1) -> RolloutRecord:
        task = Task(prompt=f"q{i}", answer=str(i), id=f"t{i}")
        return RolloutRecord(id=f"run.{i}.0", run_id="run", env_name="env", model="m", task=task, task_index=i,
                             sample_index=0, status="ok", error_kind=None, reward=scores.total, usage=Usage(1, 1),
                             duration_s=0.1, turns=turns, completion="a", messages=[], state={}, scores=scores,
                             calls=[], errors=[])

    with Store(tmp_path / "w.db") as store:
        store.create_run("run", env_name="env")
        writer = store.writer(linger_s=30.0)
        writer.submit([record(0, Scores(rewards={"r": 1.0}, total=1.0))])
        writer.submit([record(1, Scores(rewards={"r": float("inf")}, total=float("inf")))])
        writer.submit([record(2, Scores(rewards={"r": 1.0}, total=1.0), turns=2**63 + 5)])  # past SQLite's INTEGER
        writer.flush()
        writer.close()
        assert writer.committed == 3
    rows = query(tmp_path / "w.db", "SELECT task_index, status, error_kind, reward FROM rollout ORDER BY task_index")
    assert rows == [(0, "ok", None, 1.0), (1, "ok", None, None), (2, "error", "store", None)]
    kinds = query(tmp_path / "w.db", "SELECT r.task_index, e.kind FROM rollout_error e JOIN rollout r "
                                     "ON r.pk = e.rollout_pk ORDER BY r.task_index")
    assert kinds == [(1, "reward"), (1, "reward"), (2, "store")]
    assert query(tmp_path / "w.db", "SELECT COUNT(*) FROM score") == [(1,)]
    assert query(tmp_path / "w.db", "PRAGMA integrity_check") == [("ok",)]


# -- a store that is not there, or not a file ----------------------------------------------------
READ_ONLY_COMMANDS = [
    ("runs", ["runs"]),
    ("runs-run", ["runs", "0101-abcdef"]),
    ("show", ["show", "0101-abcdef.0.0"]),
    ("export", ["export", "0101-abcdef", "-o", "out.jsonl"]),
    ("diff", ["diff", "0101-abcdef.0.0", "0101-abcdef.0.1"]),
    ("compare", ["compare", "0101-abcdef", "0101-abcdee"]),
    ("costs", ["costs"]),
]


@pytest.mark.parametrize("args", [c[1] for c in READ_ONLY_COMMANDS], ids=[c[0] for c in READ_ONLY_COMMANDS])
def test_a_read_only_command_refuses_a_store_that_does_not_exist(args: list[str], cli: Callable[..., CliResult],
                                                                 tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "file.db"
    line = assert_user_error(cli(*args, "--db", missing), "no store at", str(missing))
    assert "--db" in line
    assert not (tmp_path / "no").exists()  # no folder, no empty store
    assert not (tmp_path / "out.jsonl").exists()


def _fifo(tmp_path: Path) -> Path:
    import os

    path = tmp_path / "pipe.db"
    os.mkfifo(path)
    return path


NOT_FILES = [
    ("dev-null", lambda tmp: Path("/dev/null"), "a character device"),
    ("dev-zero", lambda tmp: Path("/dev/zero"), "a character device"),
    ("fifo", _fifo, "a named pipe"),
]


@pytest.mark.parametrize(("where", "kind"), [c[1:] for c in NOT_FILES], ids=[c[0] for c in NOT_FILES])
@pytest.mark.parametrize("args", [["runs"], ["costs"], ["prices", "set", "m", "--input", "1", "--output", "2"]], ids=["runs", "costs", "prices-set"])
def test_a_store_that_is_a_device_or_a_pipe_is_refused_by_kind(where: Callable[[Path], Path], kind: str,
                                                              args: list[str], cli: Callable[..., CliResult],
                                                              tmp_path: Path) -> None:
    path = where(tmp_path)
    assert_user_error(cli(*args, "--db", path, timeout=60), str(path), kind, "not a store file")


def test_eval_refuses_dev_null_as_its_store(cli: Callable[..., CliResult], arith_server: MockServer,
                                            write_env: Callable[..., Path]) -> None:
    env_file = write_env(ADDER_ENV, "adder_env.py")
    assert_user_error(cli("eval", env_file, "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 1,
                          "--db", "/dev/null"), "/dev/null", "a character device")
