"""Errors a user can cause: non-zero exit, one clear line on stderr, no traceback, nothing written lost."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ADDER_ENV,
    BUNDLED_DIR,
    CliResult,
    MockServer,
    assert_user_error,
    cli_environment,
    copy_store,
    immutable,
    last_json,
    query,
    run_workbench,
    write_file,
)
from workbench.store import SCHEMA_VERSION

# slow: a CLI process per case (the fast lane's CLI errors: test_option_errors.py)
pytestmark = pytest.mark.slow


class Seed:
    """A store holding one finished run; each test works on its own copy."""

    def __init__(self, db: Path, run_id: str, rollouts: int) -> None:
        self.db, self.run_id, self.rollouts = db, run_id, rollouts


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory, arith_server: MockServer) -> Seed:
    home = tmp_path_factory.mktemp("seed")
    env_file = write_file(home / "adder_env.py", ADDER_ENV)
    db = home / "seed.db"
    res = run_workbench(["eval", env_file, "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 2,
                         "-r", 2, "--db", db, "--json"], cli_environment(home, db), cwd=home)
    assert res.rc == 0, res.stderr
    return Seed(db, last_json(res.stdout)["run_id"], 4)


@pytest.fixture
def store(seed: Seed, store_path: Path) -> Path:
    """This test's store: a copy of the seeded one, at the path the ``cli`` fixture uses."""
    return copy_store(seed.db, store_path)


def assert_kept(db: Path, seed: Seed) -> None:
    """The run written before the failing command is still there, whole."""
    assert query(db, "SELECT id, status FROM run WHERE id=?", (seed.run_id,)) == [(seed.run_id, "completed")]
    assert query(db, "SELECT COUNT(*) FROM rollout WHERE run_id=?", (seed.run_id,))[0][0] == seed.rollouts
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def eval_cmd(env: Any, base_url: str, *extra: Any) -> list[Any]:
    return ["eval", env, "--base-url", base_url, "-m", "mock-model", "-n", 2, "--json", *extra]


# -- broken environments ------------------------------------------------------------------------
def test_env_file_with_a_syntax_error(cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
                                      seed: Seed, arith_server: MockServer) -> None:
    env_file = write_env("import workbench as wb\n\n\ndef load_environment(:\n    pass\n", "broken.py")
    line = assert_user_error(cli(*eval_cmd(env_file, arith_server.base_url)), "broken.py:4", "syntax")
    assert str(env_file) in line
    assert_kept(store, seed)


def test_module_without_load_environment(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                         store: Path, seed: Seed, arith_server: MockServer) -> None:
    env_file = write_env("def make_env():\n    return None\n", "noloader.py")
    assert_user_error(cli(*eval_cmd(env_file, arith_server.base_url)), "noloader.py", "load_environment")
    assert_kept(store, seed)


def test_load_environment_raising(cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
                                  seed: Seed, arith_server: MockServer) -> None:
    env_file = write_env("def load_environment():\n    raise FileNotFoundError('tasks.parquet is missing')\n",
                         "raiser.py")
    assert_user_error(cli(*eval_cmd(env_file, arith_server.base_url)), "FileNotFoundError",
                      "tasks.parquet is missing")
    assert_kept(store, seed)


@pytest.mark.skipif(not (BUNDLED_DIR / "arithmetic" / "__init__.py").is_file()
                    and not (BUNDLED_DIR / "arithmetic.py").is_file(),
                    reason="needs the bundled arithmetic environment (envs/arithmetic) for the suggestion")
def test_misspelled_env_name_suggests_the_right_one(cli: Callable[..., CliResult], store: Path, seed: Seed,
                                                     arith_server: MockServer) -> None:
    line = assert_user_error(cli(*eval_cmd("arithmatic", arith_server.base_url)), "arithmatic", "arithmetic")
    assert "did you mean" in line.lower()
    assert_kept(store, seed)


def test_reward_with_an_unknown_argument(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                         store: Path, seed: Seed, arith_server: MockServer) -> None:
    env_file = write_env('''
        import workbench as wb


        def load_environment():
            rubric = wb.Rubric()

            @rubric.reward
            def exact_match(completion, gold_answer):
                return float(completion == gold_answer)

            return wb.Environment(name="typo", tasks=wb.TaskSet.from_records([{"prompt": "1+1?", "answer": "2"}]),
                                  harness=wb.SingleTurn(), rubric=rubric)
        ''', "typo.py")
    assert_user_error(cli(*eval_cmd(env_file, arith_server.base_url)), "exact_match", "gold_answer")
    assert_kept(store, seed)


# -- endpoints ----------------------------------------------------------------------------------
def test_unreachable_endpoint(cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
                              seed: Seed, closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/v1"
    assert_user_error(cli(*eval_cmd(write_env(ADDER_ENV), url)), f"127.0.0.1:{closed_port}", "--base-url")
    assert_kept(store, seed)
    assert query(store, "SELECT COUNT(*) FROM run")[0][0] == 1, "no run is created for an endpoint that never answered"


def test_missing_api_key_then_the_right_one(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                            store: Path, seed: Seed, mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("arithmetic", require_key="secret")
    env_file = write_env(ADDER_ENV)
    line = assert_user_error(cli(*eval_cmd(env_file, server.base_url)), "API key")
    assert "secret" not in line
    assert_kept(store, seed)
    ok = cli(*eval_cmd(env_file, server.base_url, "--api-key", "secret"))
    assert ok.rc == 0, ok.stderr
    s = last_json(ok.stdout)
    assert s["rollouts"] == 2 and s["errors"] == 0
    assert_kept(store, seed)


def test_unknown_model_suggests_the_served_ones(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                                store: Path, seed: Seed, arith_server: MockServer) -> None:
    res = cli("eval", write_env(ADDER_ENV), "--base-url", arith_server.base_url, "-m", "nope", "-n", 2, "--json")
    assert_user_error(res, "nope", "mock-model", "-m")
    assert_kept(store, seed)


@pytest.mark.parametrize("raw", ["", "not json"], ids=["empty", "malformed"])
def test_bad_model_responses_are_rollout_errors_and_the_run_goes_on(
        raw: str, cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path, seed: Seed,
        mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("script", script=[{"raw": raw}])
    res = cli(*eval_cmd(write_env(ADDER_ENV), server.base_url, "-r", 2))
    # Every rollout failed on the model: the run is kept whole, and the exit says so in one line.
    assert_user_error(res, "every rollout", "failed", "model.bad_response")
    s = last_json(res.stdout)
    assert s["rollouts"] == 4 and s["errors"] == 4
    rows = query(store, "SELECT status, error_kind FROM rollout WHERE run_id=?", (s["run_id"],))
    assert rows == [("error", "model.bad_response")] * 4
    assert query(store, "SELECT status FROM run WHERE id=?", (s["run_id"],)) == [("completed",)]
    assert_kept(store, seed)


# -- flags --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "fragments"), [
    (["-a", "{n: 3"], ["-a", "JSON"]),
    (["-a", "[1]"], ["-a", "object"]),
    (["-a", '{"bogus": 1}'], ["bogus", "load_environment"]),
    (["-n", "0"], ["-n"]),
    (["-r", "0"], ["-r"]),
    (["--pass-threshold", "nan"], ["--pass-threshold", "finite"]),
    (["-t", "-1"], ["--temperature", "0 to 5"]),
    (["-t", "inf"], ["--temperature"]),
    (["--max-tokens", "0"], ["--max-tokens", "at least 1"]),
    (["--max-retries", "-1"], ["--max-retries"]),
    (["--timeout", "0"], ["--timeout", "positive"]),
    (["--timeout", "nan"], ["--timeout"]),
    (["--runtime", "toy"], ["unknown --runtime 'toy'", "local"]),
    (["--runtime", "local:img"], ["local takes no argument"]),
], ids=["a-not-json", "a-not-object", "a-unknown-kwarg", "n0", "r0", "pass-nan", "t-negative", "t-inf",
        "max-tokens-0", "max-retries-negative", "timeout-0", "timeout-nan", "runtime-unknown", "runtime-arg"])
def test_bad_flags(args: list[str], fragments: list[str], cli: Callable[..., CliResult],
                   write_env: Callable[..., Path], store: Path, seed: Seed, arith_server: MockServer) -> None:
    res = cli("eval", write_env(ADDER_ENV), "--base-url", arith_server.base_url, "-m", "mock-model", *args)
    assert_user_error(res, *fragments)
    assert_kept(store, seed)


@pytest.mark.parametrize(("url", "fragments"), [
    ("http://[::zz", ["not a valid URL"]),
    ("ftp://127.0.0.1/v1", ["scheme is 'ftp'", "http://"]),
    ("127.0.0.1:8000/v1", ["cannot work", "http://"]),
    ("localhost:8000", ["cannot work"]),
    ("http:///v1", ["no host"]),
    ("http://127.0.0.1:99999/v1", ["not a valid URL"]),
], ids=["bad-ipv6", "ftp", "no-scheme", "host-port-only", "no-host", "port-out-of-range"])
def test_a_base_url_that_cannot_work_is_refused_before_the_run(
        url: str, fragments: list[str], cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
        seed: Seed) -> None:
    res = cli("eval", write_env(ADDER_ENV), "--base-url", url, "-m", "mock-model", "-n", 2, "--json")
    assert_user_error(res, "--base-url", *fragments)
    assert_kept(store, seed)
    assert query(store, "SELECT COUNT(*) FROM run")[0][0] == 1, "no run is created for a URL that cannot work"


def test_resume_of_an_unknown_run(cli: Callable[..., CliResult], store: Path, seed: Seed) -> None:
    assert_user_error(cli("eval", "--resume", "0000-ffffff", "--db", store), "0000-ffffff")
    assert_kept(store, seed)


# -- the store file -----------------------------------------------------------------------------
def test_db_pointing_at_a_text_file(cli: Callable[..., CliResult], write_env: Callable[..., Path], tmp_path: Path,
                                    arith_server: MockServer) -> None:
    notes = tmp_path / "notes.txt"
    text = "my precious notes\n" * 200
    notes.write_text(text)
    res = cli(*eval_cmd(write_env(ADDER_ENV), arith_server.base_url, "--db", notes))
    assert_user_error(res, "notes.txt", "not a Workbench store")
    assert notes.read_text() == text, "the file must be left untouched"


def test_db_pointing_at_a_foreign_sqlite_file(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                              tmp_path: Path, arith_server: MockServer) -> None:
    other = tmp_path / "inventory.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
    conn.executemany("INSERT INTO items (name) VALUES (?)", [("apple",), ("pear",)])
    conn.commit()
    conn.close()
    res = cli(*eval_cmd(write_env(ADDER_ENV), arith_server.base_url, "--db", other))
    assert_user_error(res, "inventory.sqlite", "not a Workbench store", "items")
    conn = sqlite3.connect(other)
    try:
        assert conn.execute("SELECT name FROM items ORDER BY id").fetchall() == [("apple",), ("pear",)]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert tables == {"items"}, "no Workbench tables were added to someone else's database"
        assert conn.execute("PRAGMA application_id").fetchone()[0] == 0
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete", "not even switched to WAL"
    finally:
        conn.close()


def test_db_written_by_a_newer_workbench(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                         store: Path, seed: Seed, arith_server: MockServer) -> None:
    conn = sqlite3.connect(store)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 3}")
    conn.close()
    res = cli(*eval_cmd(write_env(ADDER_ENV), arith_server.base_url, "--db", store))
    assert_user_error(res, "newer", str(store.name))
    assert query(store, "PRAGMA user_version")[0][0] == SCHEMA_VERSION + 3, "the newer store is not touched"
    assert_kept(store, seed)


# -- a store this process cannot write -----------------------------------------------------------
@pytest.mark.parametrize(("args", "reads"), [
    (["runs", "--json"], True),
    (["show", "{run}", "--json"], True),
    (["export", "{run}"], True),
    (["prices", "list", "--json"], True),
    (["costs", "--json"], True),
    (["prices", "set", "m", "--input", "1", "--output", "2"], False),
    (["eval", "{env}", "--base-url", "{url}", "-m", "mock-model", "-n", "2"], False),
], ids=["runs", "show", "export", "prices-list", "costs", "prices-set", "eval"])
def test_a_read_only_store_is_read_by_the_reading_commands_and_refused_in_one_line_by_the_others(
        args: list[str], reads: bool, cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path,
        seed: Seed, arith_server: MockServer) -> None:
    env_file = write_env(ADDER_ENV)
    argv = [a.format(run=seed.run_id, env=env_file, url=arith_server.base_url) for a in args]
    with immutable(store):  # checkpoints the WAL first: the store file is then the whole store
        before = store.read_bytes()
        res = cli(*argv, "--db", store)
    if reads:
        assert res.rc == 0 and "Traceback" not in res.stderr, res.stderr
        assert seed.run_id in res.stdout or argv[0] in ("prices", "costs"), res.stdout[-500:]
    else:
        line = assert_user_error(res, "is read-only", "chattr -i")
        assert "remove the file" not in line
    assert store.read_bytes() == before
    assert_kept(store, seed)


def test_a_store_on_a_read_only_mount_is_read_not_called_foreign(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], store: Path, seed: Seed, tmp_path: Path,
        arith_server: MockServer) -> None:
    import os
    import subprocess

    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root, which this test runs without")
    p = subprocess.run(["mount", "--bind", str(store.parent), str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"this machine does not allow bind mounts here ({p.stderr.strip()})")
    try:
        p = subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"this machine does not allow a read-only remount ({p.stderr.strip()})")
        ro = mnt / store.name
        res = cli("runs", "--json", "--db", ro)
        assert res.rc == 0 and seed.run_id in res.stdout, res.stderr
        line = assert_user_error(cli(*eval_cmd(write_env(ADDER_ENV), arith_server.base_url, "--db", ro)),
                                 "is read-only")
        assert "not a Workbench store" not in line and "remove the file" not in line
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
    assert_kept(store, seed)
