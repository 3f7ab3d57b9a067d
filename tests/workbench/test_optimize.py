"""`workbench optimize`: GEPA improves the harness's system prompt, the env's rubric the metric.

Real CLI processes against two real mock endpoints: a task model whose arithmetic accuracy depends on its
system prompt (30% by default, 90% when told to work "step by step") and a scripted reflection model that
proposes exactly that instruction. The search must find it, the held-out score must rise significantly,
and every evaluation must be a run in the store; `--apply` keeps the prompt as an override that eval and
package pick up."""

from __future__ import annotations

import json
import sqlite3
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json

# slow: GEPA searches, each many evals against two mock endpoints
pytestmark = pytest.mark.slow

BETTER = "Answer with a number. Work it out step by step, then give only the final integer."
REFLECTION = f"Having read the feedback, a better instruction:\n```\n{BETTER}\n```"
ENV_ARGS = ["-a", '{"n": 40}']


@pytest.fixture
def models(cli: Callable[..., CliResult], mock_server: Callable[..., Any]) -> tuple[Any, Any]:
    task = mock_server("arithmetic", "--accuracy", "0.3", "--instruction-accuracy", '{"step by step": 0.9}')
    reflector = mock_server("script", "--script", json.dumps([REFLECTION]))
    for name, mock, prices in (("task", task, ("0.15", "0.6")), ("reflector", reflector, ("3", "15"))):
        assert cli("models", "add", name, "--base-url", mock.base_url, "--model-id", "mock-model",
                   "--input-price", prices[0], "--output-price", prices[1]).rc == 0
    return task, reflector


def test_the_search_finds_the_better_prompt_and_the_heldout_score_rises(
        cli: Callable[..., CliResult], store_path: Path, models: tuple[Any, Any]) -> None:
    task, reflector = models
    res = cli("optimize", "arithmetic", *ENV_ARGS, "-m", "task", "--reflection-model", "reflector",
              "--max-evals", "120", "--heldout", "10", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["status"] == "completed" and out["best_prompt"] == BETTER
    assert out["seed_prompt"] == "Answer with a number."
    before, after = out["heldout_before"], out["heldout_after"]
    assert before["run_id"] != after["run_id"]
    assert after["mean_reward"] - before["mean_reward"] >= 0.4, out
    assert out["significant"] is True and out["delta_ci95"][0] > 0
    assert out["delta"] == pytest.approx(after["mean_reward"] - before["mean_reward"])
    cands = {c["index"]: c for c in out["candidates"]}
    assert cands[0]["prompt"] == "Answer with a number." and cands[0]["parent"] is None
    best = next(c for c in cands.values() if c["prompt"] == BETTER)
    assert best["parent"] == 0 and best["score"] > cands[0]["score"]
    assert all(c["parent"] == 0 for c in cands.values() if c["index"] > 0), "each proposal names its parent"
    # GEPA checks its budget between iterations: at most one more iteration (a minibatch for the parent and
    # the child, and the training split for an accepted child) past --max-evals.
    assert 120 <= out["evals"] <= 120 + 2 * 3 + 30
    assert out["cost_usd"] > out["reflection_cost_usd"] > 0

    db = sqlite3.connect(store_path)
    pid = out["pipeline_id"]
    kind, summary = db.execute("SELECT kind, summary FROM run WHERE id = ?", (pid,)).fetchone()
    assert kind == "optimize" and json.loads(summary)["best_prompt"] == BETTER
    stages = {}
    for run_id, config in db.execute("SELECT id, config FROM run WHERE kind = 'eval'"):
        cfg = json.loads(config)
        assert cfg["pipeline"]["id"] == pid
        stages.setdefault(cfg["pipeline"]["stage"], []).append((run_id, cfg))
    assert {"heldout-before", "heldout-after", "candidate 0"} <= set(stages)
    evaluated = [r for c in out["candidates"] for r in c["runs"]]
    assert sorted(evaluated) == sorted(r for s, runs in stages.items() if s.startswith("candidate") for r, _ in runs)
    held = set(range(30, 40))
    for stage, runs in stages.items():
        for run_id, cfg in runs:
            indices = {i for (i,) in db.execute("SELECT task_index FROM rollout WHERE run_id = ?", (run_id,))}
            assert indices == set(cfg["task_indices"])
            assert (indices == held) if stage.startswith("heldout") else not (indices & held), "held-out stays out"
    assert stages["heldout-after"][0][1]["system_prompt"] == BETTER
    assert db.execute("SELECT COUNT(*) FROM cost_event WHERE run_id = ? AND usd > 0", (pid,)).fetchone()[0] >= 1
    feedback = " ".join(m["content"] for b in reflector.bodies() for m in b["messages"])
    assert "the expected answer is" in feedback and "reward" in feedback, "the reflection model read the rollouts"

    cmp = cli("compare", pid, "--json")
    assert cmp.rc == 0, cmp.stderr
    pair = last_json(cmp.stdout)["models"]
    assert [m["run_id"] for m in pair] == [before["run_id"], after["run_id"]]
    assert [m["label"] for m in pair] == ["task (heldout-before)", "task (heldout-after)"]


def test_apply_keeps_the_prompt_as_an_override_that_eval_and_package_load(
        cli: Callable[..., CliResult], tmp_path: Path, models: tuple[Any, Any]) -> None:
    task, _ = models
    plain = last_json(cli("eval", "arithmetic", "-m", "task", "-n", "2", "--json").stdout)
    res = cli("optimize", "arithmetic", *ENV_ARGS, "-m", "task", "--reflection-model", "reflector",
              "--max-evals", "80", "--heldout", "8", "--apply", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["applied"]

    seen = len(task.bodies())
    applied = cli("eval", "arithmetic", "-m", "task", "-n", "2", "--json")
    assert applied.rc == 0, applied.stderr
    systems = {b["messages"][0]["content"] for b in task.bodies()[seen:]}
    assert systems == {BETTER}
    assert last_json(applied.stdout)["env_version"] != plain["env_version"], "the override marks the version"
    envs = last_json(cli("envs", "--json").stdout)
    row = next(e for e in envs["envs"] if e["name"] == "arithmetic")
    assert row["override"]["system_prompt"] == BETTER and row["override"]["origin"].startswith("optimize opt-")

    pkg = cli("package", "arithmetic", "-o", str(tmp_path / "dist"), "--json")
    assert pkg.rc == 0, pkg.stderr
    wheel = next(Path(last_json(pkg.stdout)["path"]).glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        shipped = [n for n in zf.namelist() if n.endswith("/workbench_override.json")]
        assert shipped and json.loads(zf.read(shipped[0]))["system_prompt"] == BETTER

    assert cli("optimize", "arithmetic", "--unapply").rc == 0
    again = last_json(cli("eval", "arithmetic", "-m", "task", "-n", "2", "--json").stdout)
    assert again["env_version"] == plain["env_version"]


@pytest.mark.parametrize(("flags", "fragments"), [
    ({"--budget": "0.000001"}, ["--budget $1e-06 is below one evaluation", "rollouts", "per Mtok", "raise --budget"]),
    ({"--budget": "-1"}, ["--budget must be a positive number"]),
    ({"--max-evals": "5"}, ["--max-evals 5 is below one evaluation", "32 tasks"]),
    ({"--heldout": "40"}, ["--heldout 40 leaves no training tasks", "40"]),
    ({"--reflection-model": "reflectr"}, ["'reflectr'", "did you mean", "'reflector'"]),
    ({"-m": "tsk"}, ["'tsk'", "did you mean", "'task'"]),
])
def test_bad_input_is_refused_before_anything_runs(cli: Callable[..., CliResult], store_path: Path,
                                                   models: tuple[Any, Any], flags: dict[str, str],
                                                   fragments: list[str]) -> None:
    given = {"-m": "task", "--reflection-model": "reflector", "--heldout": "8", **flags}
    assert_user_error(cli("optimize", "arithmetic", *ENV_ARGS, *[x for kv in given.items() for x in kv]), *fragments)
    assert sum(m.requests() for m in models) == 0
    assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0


def test_a_budget_needs_a_price_and_a_reflection_model_is_required(
        cli: Callable[..., CliResult], mock_server: Callable[..., Any], models: tuple[Any, Any]) -> None:
    free = mock_server("arithmetic")
    assert cli("models", "add", "unpriced", "--base-url", free.base_url, "--model-id", "mock-model").rc == 0
    assert_user_error(cli("optimize", "arithmetic", *ENV_ARGS, "-m", "unpriced", "--reflection-model", "reflector",
                          "--budget", "1"), "--budget needs a price for mock-model", "models add")
    assert_user_error(cli("optimize", "arithmetic", *ENV_ARGS, "-m", "task"), "needs a reflection model")


def test_the_reflection_model_may_speak_anthropics_messages_api(
        cli: Callable[..., CliResult], tmp_path: Path, models: tuple[Any, Any]) -> None:
    from tests.helpers import MockServer

    claude = MockServer(["--script", json.dumps([REFLECTION]), "--require-key", "sk-ant-test", "--models",
                         "claude-mock"], tmp_path / "anthropic.log", module="workbench.testing.mock_anthropic")
    try:
        assert cli("models", "add", "claude", "--base-url", claude.base_url, "--model-id", "claude-mock",
                   "--provider", "anthropic", "--api-key-env", "ANTHROPIC_TEST_KEY", "--input-price", "3",
                   "--output-price", "15").rc == 0
        res = cli("optimize", "arithmetic", *ENV_ARGS, "-m", "task", "--reflection-model", "claude",
                  "--max-evals", "60", "--heldout", "8", "--json", env={"ANTHROPIC_TEST_KEY": "sk-ant-test"})
        assert res.rc == 0, res.stderr
        out = last_json(res.stdout)
        assert out["best_prompt"] == BETTER and out["reflection_cost_usd"] > 0
        bodies = claude.bodies()
        assert bodies and all(b["model"] == "claude-mock" and b["max_tokens"] > 0 for b in bodies)
        assert "expected answer" in bodies[0]["messages"][0]["content"]
    finally:
        claude.stop()
