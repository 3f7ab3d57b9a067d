"""`workbench compare`: real runs from real CLI evals against mocks whose accuracy is known (1.0 and 0.0), so
every number is known by hand: arithmetic's reward is `correct` (1) plus the `concise` group bonus (0.2 for the
shortest correct answer, the only one at -r 1), so a right answer scores 1.2 and a wrong one 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json

# slow: several CLI evals and compares per test
pytestmark = pytest.mark.slow


def _eval(cli: Callable[..., CliResult], mock: Any, *args: str) -> dict[str, Any]:
    res = cli("eval", "arithmetic", "--base-url", mock.base_url, "-m", "mock-model", "--json", *args)
    assert res.rc == 0, res.stderr
    return last_json(res.stdout)


@pytest.fixture
def mocks(mock_server: Callable[..., Any]) -> dict[str, Any]:
    return {"right": mock_server("arithmetic", "--accuracy", "1.0"),
            "wrong": mock_server("arithmetic", "--accuracy", "0.0")}


def test_a_worse_model_regresses_on_every_task(cli: Callable[..., CliResult], mocks: dict[str, Any]) -> None:
    base = _eval(cli, mocks["right"], "-n", "8")
    worse = _eval(cli, mocks["wrong"], "-n", "8")
    same = _eval(cli, mocks["right"], "-n", "8")
    res = cli("compare", base["run_id"], worse["run_id"], same["run_id"], "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["baseline"] == base["run_id"] and out["tasks"] == 8 and out["notes"] == []
    models = {m["run_id"]: m for m in out["models"]}
    assert models[base["run_id"]]["mean_reward"] == pytest.approx(1.2)
    assert models[base["run_id"]]["mean_ci95"] == pytest.approx([1.2, 1.2]), "no spread: the CI is the mean"
    assert models[worse["run_id"]]["mean_reward"] == 0.0 and models[worse["run_id"]]["solved_tasks"] == 0
    assert models[worse["run_id"]]["cost_per_solved_task"] is None
    assert models[base["run_id"]]["pass_at_k"] == {"pass@1": 1.0}
    assert models[base["run_id"]]["baseline"] is True and "delta" not in models[base["run_id"]]
    assert models[base["run_id"]]["label"] == "mock-model", "no registered name: the model id"
    vs_worse, vs_same = models[worse["run_id"]], models[same["run_id"]]
    assert vs_worse["delta"] == pytest.approx(-1.2) and vs_worse["ci95"] == pytest.approx([-1.2, -1.2])
    assert vs_worse["significant"] is True and vs_worse["ci_method"] == "paired bootstrap"
    assert len(vs_worse["regressions"]) == 8 and vs_worse["improvements"] == []
    assert vs_same["delta"] == 0.0 and vs_same["ci95"] == [0.0, 0.0] and vs_same["significant"] is False
    assert vs_same["regressions"] == [] and vs_same["improvements"] == []
    text = cli("compare", base["run_id"], worse["run_id"]).stdout
    assert "regressed (8)" in text and "worse" in text


def test_a_comparison_id_names_its_runs(cli: Callable[..., CliResult], mocks: dict[str, Any]) -> None:
    for name, mock in mocks.items():
        assert cli("models", "add", name, "--base-url", mock.base_url, "--model-id", "mock-model").rc == 0
    cmp = last_json(cli("eval", "arithmetic", "-m", "right", "-m", "wrong", "-n", "6", "--json").stdout)
    out = last_json(cli("compare", cmp["comparison_id"], "--json").stdout)
    assert [m["run_id"] for m in out["models"]] == [r["run_id"] for r in cmp["runs"]]
    assert [m["label"] for m in out["models"]] == ["right", "wrong"], "the registered names, both serving mock-model"
    assert {m["model"] for m in out["models"]} == {"mock-model"}
    p = out["models"][1]
    assert p["delta"] == pytest.approx(-1.2) and p["significant"] and len(p["regressions"]) == 6
    flipped = last_json(cli("compare", cmp["comparison_id"], "--baseline", cmp["runs"][1]["run_id"], "--json").stdout)
    assert flipped["models"][1]["delta"] == pytest.approx(1.2)
    assert len(flipped["models"][1]["improvements"]) == 6


def test_runs_over_different_tasks_are_refused_or_cut_to_the_common_ones(
        cli: Callable[..., CliResult], mocks: dict[str, Any], write_env: Callable[..., Any]) -> None:
    a = _eval(cli, mocks["right"], "-n", "6")
    b = _eval(cli, mocks["wrong"], "-n", "4")
    assert_user_error(cli("compare", a["run_id"], b["run_id"]), "same tasks", "4 in common", "--allow-mismatch")
    out = last_json(cli("compare", a["run_id"], b["run_id"], "--allow-mismatch", "--json").stdout)
    assert out["tasks"] == 4 and "only the 4 tasks" in out["notes"][0]
    assert out["models"][0]["rollouts"] == 6 and out["models"][0]["tasks"] == 4
    other = write_env('''
        import workbench as wb
        def load_environment():
            return wb.Environment(name="other", tasks=wb.TaskSet.from_records([{"prompt": "hi", "answer": "x"}]),
                                  harness=wb.SingleTurn())
        ''', "other.py")
    res = cli("eval", other, "--base-url", mocks["right"].base_url, "-m", "mock-model", "--json")
    c = last_json(res.stdout)
    assert_user_error(cli("compare", a["run_id"], c["run_id"]), "different environments", "'other'")
    assert_user_error(cli("compare", a["run_id"]), "at least two runs")
    assert_user_error(cli("compare", a["run_id"], "1202-nosuch"), "no run 1202-nosuch")
    assert_user_error(cli("compare", "cmp-nosuch"), "no runs belong to comparison cmp-nosuch")
