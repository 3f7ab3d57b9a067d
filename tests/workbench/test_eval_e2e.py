"""`workbench eval` end to end: a subprocess against the mock server, then the SQLite file read directly."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ADDER_ENV,
    CliResult,
    MockServer,
    adder_correct,
    assert_user_error,
    cli_environment,
    count_rollouts,
    last_json,
    query,
    run_workbench,
    write_file,
)

N, R, C = 6, 3, 4
SUMMARY_KEYS = {"run_id", "env", "env_version", "model", "rollouts", "errors", "mean_reward", "rewards", "metrics",
                "rollouts_per_s", "cost_usd"}


def eval_args(env: Path, base_url: str, db: Path, *extra: Any, n: int = 2, r: int = 1, c: int = 4) -> list[Any]:
    return ["eval", env, "--base-url", base_url, "-m", "mock-model", "-n", n, "-r", r, "-c", c, "--db", db,
            "--json", *extra]


class Run:
    """One finished eval shared by the tests of this module."""

    def __init__(self, env_file: Path, db: Path, result: CliResult, env: dict[str, str]) -> None:
        self.env_file, self.db, self.result, self.env = env_file, db, result, env
        self.summary: dict[str, Any] = last_json(result.stdout)

    def cli(self, *args: Any) -> CliResult:
        return run_workbench(args, self.env)


@pytest.fixture(scope="module")
def adder_run(tmp_path_factory: pytest.TempPathFactory, arith_server: MockServer) -> Run:
    home = tmp_path_factory.mktemp("e2e")
    env_file = write_file(home / "adder_env.py", ADDER_ENV)
    db = home / "store.db"
    env = cli_environment(home, db)
    res = run_workbench(eval_args(env_file, arith_server.base_url, db, n=N, r=R, c=C), env, cwd=home)
    assert res.rc == 0, res.stderr
    return Run(env_file, db, res, env)


# -- the JSON summary ---------------------------------------------------------------------------
def test_json_summary_is_the_last_stdout_line(adder_run: Run) -> None:
    s = adder_run.summary
    assert set(s) >= SUMMARY_KEYS, SUMMARY_KEYS - set(s)
    assert s["env"] == "adder" and s["model"] == "mock-model"
    assert isinstance(s["env_version"], str) and len(s["env_version"]) >= 8
    assert s["rollouts"] == N * R
    assert s["errors"] == 0
    assert set(s["rewards"]) == {"correct", "bonus"} and set(s["metrics"]) == {"words"}
    assert s["rollouts_per_s"] > 0
    assert s["cost_usd"] == 0.0
    assert "Traceback" not in adder_run.result.stderr


def test_store_holds_every_rollout_with_scores_and_groups(adder_run: Run) -> None:
    db, run_id = adder_run.db, adder_run.summary["run_id"]
    run = query(db, "SELECT status, env_name, env_version, model, n_tasks, rollouts_per_task FROM run WHERE id=?",
                (run_id,))
    assert run == [("completed", "adder", adder_run.summary["env_version"], "mock-model", N, R)]
    rows = query(db, "SELECT id, task_index, sample_index, status, completion, answer FROM rollout WHERE run_id=?",
                 (run_id,))
    assert len(rows) == N * R
    assert {r[3] for r in rows} == {"ok"}
    assert all(r[4] for r in rows), "every rollout keeps its completion"
    assert {r[0] for r in rows} == {f"{run_id}.{ti}.{si}" for ti in range(N) for si in range(R)}
    groups = defaultdict(set)
    for _, ti, si, *_ in rows:
        groups[ti].add(si)
    assert groups == {ti: set(range(R)) for ti in range(N)}, "r rollouts per task_index"
    names = Counter(name for (name,) in query(
        db, "SELECT s.name FROM score s JOIN rollout r ON r.pk = s.rollout_pk WHERE r.run_id=?", (run_id,)))
    assert names == {"correct": N * R, "bonus": N * R, "words": N * R}
    assert query(db, "SELECT COUNT(*) FROM model_call")[0][0] == N * R
    assert query(db, "SELECT COUNT(*) FROM rollout_error")[0][0] == 0


def test_rewards_and_mean_reward_match_a_recomputation(adder_run: Run) -> None:
    db, s = adder_run.db, adder_run.summary
    rows = query(db, "SELECT pk, sample_index, reward, completion, answer FROM rollout WHERE run_id=?",
                 (s["run_id"],))
    scores: dict[int, dict[str, float]] = defaultdict(dict)
    for pk, name, value in query(db, "SELECT rollout_pk, name, value FROM score"):
        scores[pk][name] = value
    totals = []
    for pk, sample, reward, completion, answer in rows:
        correct = adder_correct(completion, json.loads(answer))
        assert scores[pk]["correct"] == correct, completion
        assert scores[pk]["bonus"] == (1.0 if sample == 0 else 0.0)
        assert scores[pk]["words"] == len(completion.split())
        assert reward == pytest.approx(1.0 * correct + 0.5 * scores[pk]["bonus"])
        totals.append(reward)
    assert s["mean_reward"] == pytest.approx(sum(totals) / len(totals))
    assert s["rewards"]["correct"] == pytest.approx(sum(v["correct"] for v in scores.values()) / len(rows))
    assert s["rewards"]["bonus"] == pytest.approx(1 / R)
    assert s["metrics"]["words"] == pytest.approx(sum(v["words"] for v in scores.values()) / len(rows))


def test_full_text_search_finds_a_word_from_a_completion(adder_run: Run) -> None:
    db = adder_run.db
    pk, completion = query(db, "SELECT pk, completion FROM rollout ORDER BY pk LIMIT 1")[0]
    word = completion.split()[-1].strip(".")
    hits = {r[0] for r in query(db, "SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH ?", (f'"{word}"',))}
    assert pk in hits
    # the prompt text is searchable too
    prompt_hits = query(db, "SELECT rowid FROM rollout_fts WHERE rollout_fts MATCH ?", ('"What"',))
    assert len(prompt_hits) == N * R


# -- reading the store back through the CLI ---------------------------------------------------
def test_runs_json_lists_the_run(adder_run: Run) -> None:
    res = adder_run.cli("runs", "--db", adder_run.db, "--json")
    assert res.rc == 0, res.stderr
    runs = last_json(res.stdout)["runs"]
    mine = [r for r in runs if r["id"] == adder_run.summary["run_id"]]
    assert len(mine) == 1
    assert mine[0]["env_name"] == "adder" and mine[0]["status"] == "completed"
    assert mine[0]["rollouts"] == N * R and mine[0]["errors"] == 0


def test_show_run_json(adder_run: Run) -> None:
    run_id = adder_run.summary["run_id"]
    res = adder_run.cli("show", run_id, "--db", adder_run.db, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["run"]["id"] == run_id and out["run"]["status"] == "completed"
    assert out["summary"]["rollouts"] == N * R
    assert out["summary"]["mean_reward"] == pytest.approx(adder_run.summary["mean_reward"])


def test_show_rollout_prints_a_readable_transcript(adder_run: Run) -> None:
    run_id = adder_run.summary["run_id"]
    prompt, completion = query(adder_run.db, "SELECT prompt, completion FROM rollout WHERE id=?",
                               (f"{run_id}.1.0",))[0]
    res = adder_run.cli("show", f"{run_id}.1.0", "--db", adder_run.db)
    assert res.rc == 0, res.stderr
    assert json.loads(prompt) in res.stdout
    assert completion in res.stdout
    assert "Answer with a number." in res.stdout  # the system prompt


def test_export_jsonl_has_one_line_per_ok_rollout(adder_run: Run) -> None:
    res = adder_run.cli("export", adder_run.summary["run_id"], "--format", "jsonl", "--db", adder_run.db)
    assert res.rc == 0, res.stderr
    lines = [json.loads(ln) for ln in res.stdout.splitlines() if ln.strip()]
    assert len(lines) == N * R
    for row in lines:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]


@pytest.mark.parametrize("target, fragment", [
    ("{db}", "is the store itself"),
    ("{db}-wal", "is the store itself"),
    ("{dir}", "is a directory"),
    ("{dir}/missing/out.jsonl", "does not exist"),
])
def test_export_refuses_an_output_that_cannot_be_one_and_loses_nothing(adder_run: Run, target: str,
                                                                       fragment: str) -> None:
    before = adder_run.db.read_bytes()
    out = target.format(db=adder_run.db, dir=adder_run.db.parent)
    res = adder_run.cli("export", adder_run.summary["run_id"], "-o", out, "--db", adder_run.db)
    assert_user_error(res, fragment)
    assert adder_run.db.read_bytes() == before
    assert count_rollouts(adder_run.db) == N * R


def test_export_to_a_file_replaces_it_whole(adder_run: Run) -> None:
    out = adder_run.db.parent / "sft.jsonl"
    out.write_text("old contents\n")
    res = adder_run.cli("export", adder_run.summary["run_id"], "-o", out, "--min-reward", "1", "--db", adder_run.db)
    assert res.rc == 0, res.stderr
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert rows and all(json.loads(r["metadata"])["reward"] >= 1 for r in rows) and "old contents" not in out.read_text()
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".part")]


def test_unknown_run_is_one_clear_line(adder_run: Run) -> None:
    assert_user_error(adder_run.cli("show", "no-such-run", "--db", adder_run.db, "--json"), "no-such-run")


# -- prices -------------------------------------------------------------------------------------
def test_price_table_costs_the_run(tmp_path: Path, cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                   arith_server: MockServer, store_path: Path) -> None:
    env_file = write_env(ADDER_ENV)
    res = cli("prices", "set", "mock-model", "--input", "1", "--output", "2", "--db", store_path)
    assert res.rc == 0, res.stderr
    res = cli(*eval_args(env_file, arith_server.base_url, store_path, n=4, r=2))
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    rows = query(store_path, "SELECT prompt_tokens, completion_tokens, cost_usd FROM rollout WHERE run_id=?",
                 (s["run_id"],))
    assert len(rows) == 8 and all(p > 0 and c > 0 for p, c, _ in rows)
    for p, c, cost in rows:
        assert cost == pytest.approx((p * 1 + c * 2) / 1e6)
    expected = sum(p * 1 + c * 2 for p, c, _ in rows) / 1e6
    assert s["cost_usd"] == pytest.approx(expected) and expected > 0
    events = query(store_path, "SELECT SUM(usd) FROM cost_event WHERE run_id=?", (s["run_id"],))[0][0]
    assert events == pytest.approx(expected)


# -- retries and failures -----------------------------------------------------------------------
def test_transient_503s_are_retried(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                    mock_server: Callable[..., MockServer], store_path: Path) -> None:
    server = mock_server("arithmetic", fail_first=3, fail_status=503)
    res = cli(*eval_args(write_env(ADDER_ENV), server.base_url, store_path, n=3, r=1, c=3))
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["rollouts"] == 3 and s["errors"] == 0
    assert s.get("retries") == 3
    assert server.requests() == 3 + 3
    assert query(store_path, "SELECT COUNT(*) FROM rollout WHERE status='ok'")[0][0] == 3


def test_persistent_500s_are_recorded_per_rollout_and_the_run_continues(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], mock_server: Callable[..., MockServer],
        store_path: Path) -> None:
    server = mock_server("arithmetic", fail_first=1000, fail_status=500)
    res = cli(*eval_args(write_env(ADDER_ENV), server.base_url, store_path, "--max-retries", "1", n=4, r=1, c=4))
    assert_user_error(res, "every rollout", "model.server", "HTTP 500")  # every rollout failed: exit says why
    s = last_json(res.stdout)
    assert s["rollouts"] == 4 and s["errors"] == 4
    assert s["mean_reward"] is None
    rows = query(store_path, "SELECT status, error_kind, reward FROM rollout WHERE run_id=?", (s["run_id"],))
    assert rows == [("error", "model.server", None)] * 4
    kinds = query(store_path, "SELECT kind, COUNT(*) FROM rollout_error WHERE run_id=? GROUP BY kind",
                  (s["run_id"],))
    assert kinds == [("model.server", 4)]
    assert server.requests() == 4 * 2, "one try and one retry per rollout"
    assert query(store_path, "SELECT status FROM run")[0][0] == "completed"


def test_per_rollout_timeout(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                             mock_server: Callable[..., MockServer], store_path: Path) -> None:
    server = mock_server("script", script=[{"sleep": 5, "content": "too late"}])
    res = cli(*eval_args(write_env(ADDER_ENV), server.base_url, store_path, "--timeout", "0.5", n=2, r=1, c=2))
    assert_user_error(res, "every rollout", "timeout")
    s = last_json(res.stdout)
    assert s["rollouts"] == 2 and s["errors"] == 2
    rows = query(store_path, "SELECT status, error_kind, duration_s FROM rollout")
    assert [(st, kind) for st, kind, _ in rows] == [("error", "timeout")] * 2
    assert all(d < 4.5 for *_, d in rows), "the rollout is cut at its timeout, not when the server answers"


RAISING_REWARD_ENV = '''
import workbench as wb


def load_environment():
    rubric = wb.Rubric()

    @rubric.reward
    def fine(completion: str) -> float:
        return 1.0

    @rubric.reward
    def explodes(completion: str) -> float:
        raise KeyError("missing-field")

    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(3)]
    return wb.Environment(name="raiser", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                          rubric=rubric)
'''


def test_a_reward_that_raises_is_recorded_and_the_run_completes(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], arith_server: MockServer,
        store_path: Path) -> None:
    res = cli(*eval_args(write_env(RAISING_REWARD_ENV), arith_server.base_url, store_path, n=3, r=2))
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["rollouts"] == 6
    assert s["mean_reward"] == pytest.approx(1.0), "the other rewards still count"
    rows = query(store_path, "SELECT kind, source, message FROM rollout_error WHERE run_id=?", (s["run_id"],))
    assert len(rows) == 6
    assert {(k, src) for k, src, _ in rows} == {("reward", "explodes")}
    assert all("missing-field" in msg for *_, msg in rows)
    assert query(store_path, "SELECT DISTINCT status FROM rollout") == [("ok",)]
    assert query(store_path, "SELECT status FROM run") == [("completed",)]


def test_store_is_a_valid_sqlite_file_after_eval(adder_run: Run) -> None:
    conn = sqlite3.connect(adder_run.db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_the_cli_wraps_text_and_never_cuts_an_id(adder_run: Run) -> None:
    """In a narrow terminal or a pipe: message text wraps (every word is there) and run ids are whole."""
    env = {**adder_run.env, "COLUMNS": "60"}
    runs = run_workbench(["runs", "--db", adder_run.db], env)
    assert runs.rc == 0, runs.stderr
    run_id = adder_run.summary["run_id"]
    lines = runs.stdout.splitlines()
    assert lines[0].split("\t")[:3] == ["run", "kind", "env"] and any(ln.startswith(run_id + "\t") for ln in lines)
    rid = query(adder_run.db, "SELECT id FROM rollout WHERE run_id=? LIMIT 1", (run_id,))[0][0]
    show = run_workbench(["show", rid, "--db", adder_run.db], env)
    assert show.rc == 0, show.stderr
    assert rid in show.stdout.splitlines()[0]  # the header is a whole line (the terminal wraps it), id and all
    assert all(len(ln) <= 60 for ln in show.stdout.splitlines() if ln[:1] in ("╭", "│", "╰")), show.stdout
    words = " ".join(ln.strip("│ ").strip() for ln in show.stdout.splitlines()).split()
    for m in json.loads(query(adder_run.db, "SELECT messages FROM rollout WHERE id=?", (rid,))[0][0]):
        for w in str(m["content"]).split():
            assert w in words, (w, show.stdout)


def test_a_long_message_wraps_in_a_narrow_terminal(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                                   arith_server: MockServer, store_path: Path) -> None:
    long_prompt = " ".join(f"word{i}" for i in range(120))
    env_file = write_env(ADDER_ENV.replace('"Answer with a number."', repr(long_prompt)))
    res = cli(*eval_args(env_file, arith_server.base_url, store_path, n=1, r=1))
    assert res.rc == 0, res.stderr
    rid = query(store_path, "SELECT id FROM rollout LIMIT 1")[0][0]
    show = cli("show", rid, "--db", store_path, env={"COLUMNS": "50"})
    assert show.rc == 0, show.stderr
    assert all(len(ln) <= 50 for ln in show.stdout.splitlines() if ln[:1] in ("╭", "│", "╰")), show.stdout
    words = " ".join(ln.strip("│ ").strip() for ln in show.stdout.splitlines()).split()
    assert all(f"word{i}" in words for i in range(120)), show.stdout
