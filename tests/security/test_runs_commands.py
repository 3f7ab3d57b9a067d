"""Commands over runs that say what they mean: compare without rewards, probe flags, distill's student,
eval --resume of a registered model, SFT data of another environment, play's refused input, and
optimize keeping its seed and resuming after a kill. Real CLI subprocesses against the mock server;
each refusal is one line with nothing stored changed."""

from __future__ import annotations

import json
import sqlite3
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
    write_file,
)
from tests.security import runs_common
from tests.security.runs_common import Seed, snapshot

# slow: CLI evals per case, an optimisation killed and resumed
pytestmark = pytest.mark.slow

seed, store = runs_common.seed, runs_common.store  # the fixtures, shared by the hostile-runs files

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
