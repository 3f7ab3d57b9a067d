"""Hostile input to runs: rewards, stores, signals, pipelines. Each case drives the real CLI as a
subprocess against the mock server and asserts the one line, the exit code, and that nothing stored
changed (row counts, ``PRAGMA integrity_check``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ADDER_ENV,
    CliResult,
    MockServer,
    assert_user_error,
    cli_environment,
    copy_store,
    last_json,
    query,
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
    from workbench.authoring.tasks import Task
    from workbench.rollouts.rollout import Usage
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


# -- compare, resume, distill and probe say what they mean ------------------------------------------
FAILING_ENV = ADDER_ENV.replace(
    'harness=wb.SingleTurn(system_prompt="Answer with a number."),', 'harness=Broken(),').replace(
    "def load_environment(", '''class Broken(wb.SingleTurn):
    async def run(self, rollout):
        raise RuntimeError("this harness never answers")


def load_environment(''')


def _eval_run(cli: Callable[..., CliResult], env_file: Path, base_url: str) -> str:
    cli("eval", env_file, "--base-url", base_url, "-m", "mock-model", "-n", 2, "--json")
    res = cli("runs", "--json")
    return str(json.loads(res.stdout.splitlines()[-1])["runs"][0]["id"])


COMPARE_CASES = [
    ("both-unscored", ("failing", "failing"), "no rollout of any of the runs"),
    ("baseline-unscored", ("failing", "scored"), "no rollout of run "),
    ("other-unscored", ("scored", "failing"), "no rollout of run "),
]


@pytest.mark.parametrize(("kinds", "says"), [c[1:] for c in COMPARE_CASES], ids=[c[0] for c in COMPARE_CASES])
def test_compare_of_runs_without_rewards_says_there_are_none(kinds: tuple[str, str], says: str,
                                                            cli: Callable[..., CliResult], tmp_path: Path,
                                                            store: Path, arith_server: MockServer) -> None:
    files = {"failing": write_file(tmp_path / "src" / "adder_env.py", FAILING_ENV)}
    ids = []
    for kind in kinds:
        if kind == "failing":
            ids.append(_eval_run(cli, files["failing"], arith_server.base_url))
        else:  # the same environment (name and version), its rewards back
            files["failing"].write_text(FAILING_ENV)
            good = write_file(tmp_path / "good" / "adder_env.py", ADDER_ENV)
            ids.append(_eval_run(cli, good, arith_server.base_url))
    before = snapshot(store)
    line = assert_user_error(cli("compare", *ids, "--allow-mismatch"), "there are no rewards to compare", says)
    for run_id, kind in zip(ids, kinds, strict=True):
        assert (run_id in line) == (kind == "failing"), line
    assert "0.000" not in line
    assert snapshot(store) == before


PROBE_CASES = [
    ("no-module", "nosuchmod:X", ["--probe 'nosuchmod:X'", "cannot import nosuchmod"]),
    ("no-file", "/no/such/probe.py:X", ["--probe file /no/such/probe.py does not exist"]),
    ("no-attribute", "json:nothere", ["--probe 'json:nothere'", "no attribute 'nothere'"]),
    ("no-colon", "justaname", ["--probe 'justaname' must look like module:Name"]),
    ("not-a-probe", "json:dumps", ["--probe 'json:dumps'", "not a wb.Probe subclass"]),
]


@pytest.mark.parametrize(("spec", "says"), [c[1:] for c in PROBE_CASES], ids=[c[0] for c in PROBE_CASES])
def test_probe_names_the_probe_flag_for_a_bad_probe(spec: str, says: list[str], cli: Callable[..., CliResult],
                                                    store: Path) -> None:
    before = snapshot(store)
    line = assert_user_error(cli("probe", "arithmetic", "--probe", spec), *says)
    assert "--harness" not in line
    assert snapshot(store) == before


DISTILL_STUDENTS = [
    ("no-directory", "/no/such/model-dir", "no model directory at /no/such/model-dir"),
    ("directory-not-a-model", "{tmp}", "is a directory but not a model"),
    ("uncached-hub-id", "nosuchorg-wb/nosuchmodel-wb", "not in the Hugging Face cache"),
]


@pytest.mark.parametrize(("student", "says"), [c[1:] for c in DISTILL_STUDENTS], ids=[c[0] for c in DISTILL_STUDENTS])
def test_distill_refuses_a_student_that_cannot_be_served_before_the_teacher_runs(
        student: str, says: str, cli: Callable[..., CliResult], store: Path, tmp_path: Path,
        mock_server: Callable[..., MockServer]) -> None:
    teacher = mock_server("arithmetic")
    student = student.format(tmp=tmp_path)
    before = snapshot(store)
    line = assert_user_error(cli("distill", "arithmetic", "-a", '{"n": 10}', "--teacher", "mock-model",
                                 "--teacher-base-url", teacher.base_url, "--student", student, "-r", 1, "--steps", 1,
                                 env={"HF_HUB_OFFLINE": "1"}), f"--student {student} cannot be served here", says)
    assert "Traceback" not in line
    assert teacher.requests() == 0
    assert snapshot(store) == before


def test_eval_resume_of_a_run_made_with_a_registered_model_resolves_the_name_again(
        cli: Callable[..., CliResult], cli_env: dict[str, str], tmp_path: Path, store: Path, seed: Seed,
        mock_server: Callable[..., MockServer]) -> None:
    """The registered model takes its key from a variable: the resumed run must use it (and its endpoint)."""
    import signal
    import subprocess

    from tests.helpers import wait_for, workbench_argv

    server = mock_server("script", "--require-key", "sk-resume-test",
                         script=["3", "5", {"sleep": 600, "content": "7"}])
    env = {**cli_env, "RESUME_TEST_KEY": "sk-resume-test"}
    assert cli("models", "add", "mine", "--base-url", server.base_url, "--model-id", "mock-model",
               "--api-key-env", "RESUME_TEST_KEY", env=env).rc == 0
    env_file = write_file(tmp_path / "src" / "adder_env.py", ADDER_ENV)
    proc = subprocess.Popen([*workbench_argv(), "eval", str(env_file), "-m", "mine", "-n", "3", "-c", "1"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: query(store, "SELECT COUNT(*) FROM rollout r JOIN run ON run.id = r.run_id "
                                      "WHERE run.env_name = 'adder' AND run.id != ?", (seed.run_id,))[0][0] == 2,
                 60, "two rollouts of the run to be stored", proc=proc)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    [(run_id, status)] = query(store, "SELECT id, status FROM run WHERE id != ?", (seed.run_id,))
    assert status == "interrupted"
    res = cli("eval", "--resume", run_id, "--json", env={"RESUME_TEST_KEY": "sk-resume-test"})
    assert res.rc == 0, res.stderr
    assert query(store, "SELECT status FROM run WHERE id=?", (run_id,)) == [("completed",)]
    assert query(store, "SELECT COUNT(*), COUNT(reward) FROM rollout WHERE run_id=?", (run_id,)) == [(3, 3)]
    assert query(store, "SELECT COUNT(*) FROM rollout_error WHERE run_id=?", (run_id,)) == [(0,)]
    assert query(store, "SELECT json_extract(config, '$.model_name') FROM run WHERE id=?", (run_id,)) == [("mine",)]
    assert snapshot(store)["integrity"] == "ok"


# -- SFT data of another environment ----------------------------------------------------------------
TRAIN_OTHER_ENV = [
    ("other-env", [], ["--data {run} is a run of 'adder', not of 'arithmetic'", "--allow-other-env"]),
    ("the-run-twice", ["--data", "{run}"], ["--data {run} is a run of 'adder'", "--allow-other-env"]),
    ("bad-allow-value", ["--data.allow_other_env", "yes"], ["data.allow_other_env must be true or false"]),
]


@pytest.mark.parametrize(("extra", "says"), [c[1:] for c in TRAIN_OTHER_ENV], ids=[c[0] for c in TRAIN_OTHER_ENV])
def test_sft_on_a_run_of_another_environment_is_refused_unless_allowed(
        extra: list[str], says: list[str], cli: Callable[..., CliResult], store: Path, seed: Seed) -> None:
    before = snapshot(store)
    fill = [a.replace("{run}", seed.run_id) for a in extra]
    res = cli("train", "arithmetic", "--algorithm.name", "sft", "--data", seed.run_id, *fill, "--max-steps", 1)
    assert_user_error(res, *(s.replace("{run}", seed.run_id) for s in says))
    assert snapshot(store) == before


def test_sft_data_of_another_environment_allowed_names_what_it_mixes(store: Path, seed: Seed) -> None:
    from workbench.errors import ConfigError
    from workbench.training import sft_data

    conn = sqlite3.connect(store)
    try:
        with pytest.raises(ConfigError, match="is a run of 'adder', not of 'arithmetic'"):
            sft_data.select(conn, [seed.run_id], env_name="arithmetic")
        items, counts = sft_data.select(conn, [seed.run_id], env_name="arithmetic", allow_other_env=True)
        assert counts[seed.run_id]["other_env"] == "adder" and len(items) == 4
        _, same = sft_data.select(conn, [seed.run_id], env_name="adder")
        assert "other_env" not in same[seed.run_id]
    finally:
        conn.close()


# -- play: input that is not a reply stores nothing --------------------------------------------------
PLAY_INPUT = [
    ("not-utf8", b"\xff\xfe 7\n", ["line 1: the reply is not UTF-8 text", "nothing was stored"]),
    ("latin-1", b"", ["line 1: the reply is not UTF-8 text"]),
    ("unknown-slash-command", b"/nosuch 7\n", ["line 1: unknown command /nosuch", "/call", "nothing was stored"]),
    ("unknown-command-alone", b"/help\n", ["unknown command /help"]),
]


@pytest.mark.parametrize(("stdin", "says"), [c[1:] for c in PLAY_INPUT], ids=[c[0] for c in PLAY_INPUT])
def test_play_refuses_input_that_is_not_a_reply_and_stores_nothing(stdin: bytes, says: list[str],
                                                                   cli_env: dict[str, str], tmp_path: Path,
                                                                   store: Path) -> None:
    import subprocess

    from tests.helpers import workbench_argv

    if not stdin:
        stdin = "caf\u00e9 7\n".encode("latin-1")
    before = snapshot(store)
    p = subprocess.run([*workbench_argv(), "play", "arithmetic"], input=stdin, capture_output=True, timeout=120,
                       cwd=tmp_path, env={**cli_env, "WORKBENCH_USER_NAME": "alice"})
    res = CliResult(p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"))
    assert_user_error(res, *says)
    assert snapshot(store) == before


def test_a_reply_line_may_start_with_a_slash_written_twice() -> None:
    from workbench.rollouts.human import parse_reply

    assert parse_reply("//help is not a command", None)["content"] == "/help is not a command"
    assert parse_reply("/usr/bin is a path", None)["content"] == "/usr/bin is a path"


# -- optimize: the seed prompt staying is an outcome, and a killed optimisation is not left running --
REFLECTION = "A better instruction:\n```\nAnswer with a number. Think step by step.\n```"


@pytest.fixture
def optimize_models(cli: Callable[..., CliResult], mock_server: Callable[..., MockServer]) -> tuple[MockServer, MockServer]:
    """A task model that never answers with a number (every prompt scores 0) and a reflection model."""
    task = mock_server("instant", reply="no idea")
    reflector = mock_server("script", script=[REFLECTION])
    for name, mock in (("task", task), ("reflector", reflector)):
        assert cli("models", "add", name, "--base-url", mock.base_url, "--model-id", "mock-model").rc == 0
    return task, reflector


OPTIMIZE_ARGS = ["optimize", "arithmetic", "-a", '{"n": 10}', "-m", "task", "--reflection-model", "reflector",
                 "--heldout", "2", "--max-evals", "16"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_optimize_where_no_candidate_beats_the_seed_completes_and_keeps_the_seed(
        as_json: bool, cli: Callable[..., CliResult], store_path: Path,
        optimize_models: tuple[MockServer, MockServer]) -> None:
    res = cli(*OPTIMIZE_ARGS, *(["--json"] if as_json else []))
    assert res.rc == 0, res.stderr
    assert "compare needs" not in res.stderr and "Traceback" not in res.stderr
    if as_json:
        out = last_json(res.stdout)
        assert out["status"] == "completed" and out["seed_kept"] is True
        assert out["best_prompt"] == out["seed_prompt"] == "Answer with a number."
        assert out["heldout_before"]["run_id"] == out["heldout_after"]["run_id"]
    else:
        assert "the seed prompt stays" in res.stdout
    assert query(store_path, "SELECT status FROM run WHERE kind = 'optimize'") == [("completed",)]
    assert query(store_path, "SELECT COUNT(*) FROM run WHERE status != 'completed'") == [(0,)]


def test_a_killed_optimisation_is_marked_interrupted_at_the_next_start_and_resumes(
        cli: Callable[..., CliResult], cli_env: dict[str, str], tmp_path: Path, store_path: Path,
        mock_server: Callable[..., MockServer]) -> None:
    import signal
    import subprocess

    from tests.helpers import wait_for, workbench_argv

    task = mock_server("arithmetic", "--latency", "0.05", "--accuracy", "0.5")
    reflector = mock_server("script", script=[REFLECTION, "```\nAnswer with a number only.\n```"])
    for name, mock in (("task", task), ("reflector", reflector)):
        assert cli("models", "add", name, "--base-url", mock.base_url, "--model-id", "mock-model").rc == 0
    args = ["optimize", "arithmetic", "-a", '{"n": 10}', "-m", "task", "--reflection-model", "reflector",
            "--heldout", "2", "--max-evals", "60"]
    proc = subprocess.Popen([*workbench_argv(), *args], env=cli_env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    state_dir = store_path.with_name(store_path.name + ".optimize")
    try:
        saved = wait_for(lambda: list(state_dir.glob("opt-*/gepa_state.bin")), 120, "GEPA to save its state",
                         proc=proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    pid = saved[0].parent.name
    assert query(store_path, "SELECT status FROM run WHERE id=?", (pid,)) == [("running",)]
    evals_at_kill = json.loads(query(store_path, "SELECT summary FROM run WHERE id=?", (pid,))[0][0])["evals"]

    # The next start (here one that is refused) marks what the killed process left running.
    assert_user_error(cli("optimize", "--resume", "opt-00000000"), "no run")
    assert query(store_path, "SELECT COUNT(*) FROM run WHERE status = 'running'") == [(0,)]
    assert query(store_path, "SELECT status FROM run WHERE id=?", (pid,)) == [("interrupted",)]

    res = cli("optimize", "--resume", pid, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["pipeline_id"] == pid and out["status"] == "completed"
    assert out["evals"] >= evals_at_kill
    assert query(store_path, "SELECT status FROM run WHERE id=?", (pid,)) == [("completed",)]
    assert query(store_path, "SELECT COUNT(*) FROM run WHERE kind = 'optimize'") == [(1,)]
    stages = query(store_path, "SELECT json_extract(config, '$.pipeline.stage'), status FROM run WHERE kind='eval'")
    assert [s for s, _ in stages].count("heldout-before") == 1, "the held-out run before is kept, not run again"
    assert all(st in ("completed", "interrupted") for _, st in stages)
    assert query(store_path, "PRAGMA integrity_check") == [("ok",)]
    assert not (state_dir / pid).exists(), "a finished optimisation's search state is removed"

    again = cli("optimize", "--resume", pid)
    assert_user_error(again, f"optimisation {pid} is already completed")
    assert_user_error(cli("optimize", "arithmetic", "--resume", pid), "keeps its own options")
