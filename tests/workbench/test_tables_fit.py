"""Tables that fit: at 80 columns every CLI table keeps its ids, numbers, intervals and costs whole (text folds,
the least needed columns are left out and a dim line says which), costs print with significant digits, and a
comparison names its tasks by index and the start of the prompt, not by their id (a hash)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tests.helpers import CliResult, last_json
from workbench.authoring.rubric import Scores
from workbench.cli.tables import Col, build_table, fit_columns
from workbench.format import fcost
from workbench.records.rollout import ModelCall, Usage
from workbench.records.task import Task
from workbench.store import RolloutRecord, Store

T0 = 1_700_000_000.0
BASE, CANDIDATE = "1204-a1b2c3d4e5f6-baseline", "1204-f6e5d4c3b2a1-candidate"
LONG_URL = "https://my-gateway.internal.example.com/openai/deployments/v1"
NARROW = {"COLUMNS": "80"}


@pytest.mark.parametrize(("amount", "shown"), [
    (None, "-"),
    (float("nan"), "-"),
    (0, "$0.0000"),
    (0.5, "$0.5000"),
    (0.0847, "$0.0847"),
    (0.001, "$0.0010"),
    (0.0001, "$0.0001"),  # the house's four places when they say it whole
    (0.00065, "$0.00065"),  # below a tenth of a cent: three significant digits
    (0.000021, "$0.000021"),
    (0.0000213456, "$0.0000213"),
    (1234.5, "$1,234.5000"),
    (-0.000021, "-$0.000021"),
])
def test_money_keeps_significant_digits(amount: float | None, shown: str) -> None:
    assert fcost(amount) == shown


COLS = (Col("name", fold_to=6), Col("id", keep=True), Col("cost", keep=True, drop=1), Col("url", keep=True, drop=2))
ROW = ("a long descriptive name", "1204-abcdef-0123", "$0.000021", "http://127.0.0.1:8000/v1")


@pytest.mark.parametrize(("width", "shown"), [
    (200, [0, 1, 2, 3]),  # everything fits
    (62, [0, 1, 2, 3]),  # the name folds
    (40, [0, 1, 2]),  # the url (highest drop) goes
    (30, [0, 1]),  # then the cost
    (10, [0, 1]),  # nothing more may go: the id stays whole, the line runs over
])
def test_columns_are_left_out_by_priority(width: int, shown: list[int]) -> None:
    assert fit_columns(COLS, [ROW], width) == shown


def test_a_late_wide_column_makes_room_for_an_early_narrow_one() -> None:
    cols = (Col("id", keep=True), Col("short", keep=True, drop=2), Col("wide", keep=True, drop=1))
    assert fit_columns(cols, [("id-1", "s", "w" * 40)], 20) == [0, 1], "the wide one goes, the short one comes back"


def test_kept_columns_are_never_cut() -> None:
    table, hidden = build_table(COLS, [ROW], 40)
    console = Console(width=40, record=True, color_system=None)
    console.print(table, crop=False)
    text = console.export_text()
    assert hidden == ["url"]
    for whole in ("1204-abcdef-0123", "$0.000021"):
        assert whole in text, text
    assert "…" not in text


def _rollout(run: str, model: str, i: int, reward: float) -> RolloutRecord:
    task = Task(prompt=f"What is {i} + {i + 1}? Think step by step, then answer with one number only, nothing "
                       "else at all.", answer=str(2 * i + 1), info={})
    messages = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": task.prompt},
                {"role": "assistant", "content": "x"}]
    return RolloutRecord(
        id=f"{run}.{i}.0", run_id=run, env_name="adder", model=model, task=task, task_index=i, sample_index=0,
        status="ok", error_kind=None, reward=reward, usage=Usage(12, 3, 0.0000021 * (i + 1)), duration_s=0.25 + i / 100,
        turns=1, completion="x", messages=messages, state={}, scores=Scores(rewards={"correct": reward}, metrics={},
                                                                             total=reward),
        calls=[ModelCall(0, 2, None, "stop", 12, 3, 0.05)], errors=[], created_at=T0 + 60 * i)


@pytest.fixture
def compared_store(store_path: Path) -> Path:
    """Two eval runs of 12 tasks with long run ids and model names: the candidate fails the even tasks."""
    with Store(store_path) as store:
        for run, model, good in ((BASE, "meta-llama/Llama-3.1-8B-Instruct", True),
                                 (CANDIDATE, "qwen/qwen2.5-7b-instruct", False)):
            store.create_run(run, kind="eval", env_name="adder", env_version="0123456789ab", env_source="test",
                             model=model, n_tasks=12, rollouts_per_task=1, status="completed", created_at=T0,
                             finished_at=T0 + 30, config={})
            w = store.writer()
            w.submit([_rollout(run, model, i, 1.0 if good or i % 2 else 0.0) for i in range(12)])
            w.close()
    return store_path


def _whole(res: CliResult, *fragments: str) -> str:
    assert res.rc == 0, res.stderr
    for fragment in fragments:
        assert fragment in res.stdout, (fragment, res.stdout)
    return res.stdout


def test_compare_at_80_columns_keeps_ids_intervals_and_costs_whole(cli: Callable[..., CliResult],
                                                                   compared_store: Path) -> None:
    out = last_json(cli("compare", BASE, CANDIDATE, "--json").stdout)
    cand = out["models"][1]
    assert out["task_labels"][cand["regressions"][0]]["prompt"].startswith("What is ")
    text = _whole(cli("compare", BASE, CANDIDATE, env=NARROW), BASE, CANDIDATE, "1.000–1.000",
                  f"{cand['mean_ci95'][0]:.3f}–{cand['mean_ci95'][1]:.3f}", fcost(cand["cost_per_solved_task"]),
                  "(cost, errors, p50 s, p95 s hidden at 80 columns; --json has every field)")
    assert "$0.0000 " not in text and not text.count("$0.0000\n"), "significant digits, never a row of zeros"
    board = text.split(" vs baseline")[0]
    assert "…" not in board, board


def test_compare_names_regressed_tasks_by_index_and_prompt(cli: Callable[..., CliResult],
                                                           compared_store: Path) -> None:
    out = last_json(cli("compare", BASE, CANDIDATE, "--json").stdout)
    text = _whole(cli("compare", BASE, CANDIDATE, env=NARROW), "regressed (6), worst first:")
    lines = text.splitlines()
    task_lines = lines[lines.index("  regressed (6), worst first:") + 1:]
    assert len(task_lines) == 6
    for task_id, line in zip(out["models"][1]["regressions"], task_lines, strict=True):
        label = out["task_labels"][task_id]
        assert line.split()[:2] == [f"#{label['task_index']}", "-1.00"], line
        assert f"What is {label['task_index']} + {label['task_index'] + 1}?" in line
        assert task_id not in line, "the task's index names it, not its hash"
        assert len(line) <= 80 and line.endswith("…"), "one line, the prompt cut to the width"


def test_models_list_hides_the_base_url_at_80_columns(cli: Callable[..., CliResult]) -> None:
    assert cli("models", "add", "gateway", "--base-url", LONG_URL, "--model-id", "gpt-4o-mini-2024-07-18",
               "--input-price", "0.15", "--output-price", "0.6").rc == 0
    narrow = _whole(cli("models", "list", env=NARROW), "gateway", "gpt-4o-mini-2024-07-18", "0.150", "0.600",
                    "(base url hidden at 80 columns; --json has every field)")
    assert "https://" not in narrow, "left out, not cut"
    wide = _whole(cli("models", "list", env={"COLUMNS": "160"}), LONG_URL)
    assert "hidden" not in wide


@pytest.mark.parametrize(("args", "whole"), [
    (("prices", "list"), ("claude-3-5-sonnet*", "anthropic", "15.000")),
    (("gpu-prices", "list"), ("A100-80GB", "0.000694", "2.50")),
    (("envs",), ("arithmetic", "support_desk", "bundled")),
])
def test_listings_at_80_columns_keep_names_and_numbers_whole(cli: Callable[..., CliResult], compared_store: Path,
                                                             args: tuple[str, ...],
                                                             whole: tuple[str, ...]) -> None:
    text = _whole(cli(*args, env=NARROW), *whole)
    assert "…" not in text


def test_probe_at_80_columns_keeps_policy_names_whole(cli: Callable[..., CliResult]) -> None:
    res = cli("probe", "arithmetic", "-n", "2", env=NARROW)
    out: Any = res.stdout
    for name in ("judge_injection", "every_answer", "echo_prompt"):
        assert name in out, (name, out)
    assert "(by function hidden at 80 columns; --json has every field)" in out
