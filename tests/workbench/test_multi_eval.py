"""`workbench eval ENV -m A -m B`: the same tasks on each model at once, one run per model, grouped as a
comparison. Real CLI processes against two real mock endpoints with different accuracies."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json

# slow: evals of several models at once against two mock endpoints
pytestmark = pytest.mark.slow


@pytest.fixture
def two_models(cli: Callable[..., CliResult], mock_server: Callable[..., Any]) -> tuple[Any, Any]:
    good = mock_server("arithmetic", "--accuracy", "1.0")
    bad = mock_server("arithmetic", "--accuracy", "0.0")
    for name, mock in (("good", good), ("bad", bad)):
        assert cli("models", "add", name, "--base-url", mock.base_url, "--model-id", "mock-model").rc == 0
    return good, bad


def test_the_same_tasks_run_on_each_model_as_one_comparison(cli: Callable[..., CliResult], store_path: Path,
                                                            two_models: tuple[Any, Any]) -> None:
    res = cli("eval", "arithmetic", "-m", "good", "-m", "bad", "-n", "12", "-r", "2", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["comparison_id"].startswith("cmp-") and out["env"] == "arithmetic"
    runs = {r["name"]: r for r in out["runs"]}
    assert set(runs) == {"good", "bad"}
    for r in runs.values():
        assert r["rollouts"] == 24 and r["errors"] == 0 and r["model"] == "mock-model"
        assert {"run_id", "mean_reward", "stderr", "pass_at_k", "cost_usd"} <= set(r)
    assert runs["good"]["rewards"]["correct"] == 1.0 and runs["bad"]["rewards"]["correct"] == 0.0
    db = sqlite3.connect(store_path)
    tasks = {rid: {t for (t,) in db.execute("SELECT task_id FROM rollout WHERE run_id = ?", (rid,))}
             for rid in (runs["good"]["run_id"], runs["bad"]["run_id"])}
    assert len(tasks) == 2 and len(set(map(frozenset, tasks.values()))) == 1, "the same 12 tasks on each model"
    configs = [json.loads(c) for (c,) in db.execute("SELECT config FROM run ORDER BY created_at")]
    assert {c["comparison_id"] for c in configs} == {out["comparison_id"]}
    assert all(two.requests() > 0 for two in two_models), "each endpoint served its own run"


@pytest.mark.parametrize(("args", "fragments"), [
    (["-m", "good", "-m", "good"], ["-m good", "twice"]),
    (["-m", "good", "-m", "alias"], ["-m good", "-m alias", "same model"]),
    (["-m", "good", "-m", "goood"], ["'goood'", "did you mean", "'good'"]),
    (["-m", "good", "-m", "bad", "--resume", "1202-000000"], ["--resume", "each run"]),
])
def test_bad_model_lists_are_refused_before_anything_runs(cli: Callable[..., CliResult], store_path: Path,
                                                          two_models: tuple[Any, Any], args: list[str],
                                                          fragments: list[str]) -> None:
    good, _ = two_models
    assert cli("models", "add", "alias", "--base-url", good.base_url, "--model-id", "mock-model").rc == 0
    assert_user_error(cli("eval", "arithmetic", *args, "-n", "2"), *fragments)
    assert sum(m.requests() for m in two_models) == 0
    assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0
