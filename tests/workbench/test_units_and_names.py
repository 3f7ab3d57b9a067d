"""Every number the text outputs print carries its name or its unit, and docs/glossary.md defines every
name the training step line and the cost table print (so the glossary cannot fall behind the outputs).

The commands run as real CLI processes against real mock endpoints and a real SQLite store; the step
line is the formatter the CLI calls for every training record."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CHAT_ENV, CliResult, MockServer, last_json
from workbench.cli.costs_cmd import KIND_COLUMNS
from workbench.cli.train_cmd import step_line
from workbench.store import Store

GLOSSARY = Path(__file__).resolve().parents[2] / "docs" / "glossary.md"

STEP_METRICS = {"reward_mean": 0.45, "reward_std": 0.12, "loss": 0.0123, "mismatch_kl": 0.0001,
                "masked_fraction": 0.02, "entropy": 1.234, "tokens_per_s": 1840.0, "dropped": 3.0,
                "staleness_0": 8.0, "staleness_1": 120.0, "staleness_2": 1.0, "wait_s": 1.25, "train_s": 3.4,
                "update_s": 0.5}


def glossary_terms() -> set[str]:
    """The names the glossary defines: the backquoted names at the start of each ``- `name` — ...`` line
    (``- `a` / `b` — ...`` defines both)."""
    terms: set[str] = set()
    for line in GLOSSARY.read_text().splitlines():
        if line.startswith("- `") and " — " in line:
            terms.update(re.findall(r"`([^`]+)`", line.split(" — ", 1)[0]))
    return terms


def field_names(line: str) -> set[str]:
    """The names in a printed line: its words, less the numbers (``1.2s`` is a number in seconds)."""
    return set(re.findall(r"[A-Za-z_$@/%-][\w$@/%-]*", re.sub(r"\b\d+(\.\d+)?s\b", " ", line)))


@pytest.mark.parametrize(("metrics", "expected"), [
    (STEP_METRICS, ["step    7", "reward 0.450 (sd 0.120)", "loss 0.0123", "mismatch_kl 0.0001", "masked 0.020",
                    "entropy 1.234", "tok/s 1840", "dropped 3", "off-policy 0 steps: 8, 1 step: 120, 2 steps: 1",
                    "wait 1.2s", "train 3.4s", "update 0.5s"]),
    ({"reward_mean": 1.0, "reward_std": 0.0}, ["reward 1.000 (sd 0.000)", "off-policy -", "dropped 0", "wait 0.0s"]),
    ({"staleness_mean": 0.5, "staleness_max": 1.0, "staleness_3": 4.0}, ["off-policy 3 steps: 4"]),
], ids=["every-field", "no-histogram", "summary-keys-left-out"])
def test_the_step_line_names_every_number(metrics: dict[str, float], expected: list[str]) -> None:
    line = step_line({"kind": "step", "step": 7, "metrics": metrics, "message": ""})
    for part in expected:
        assert part in line, (part, line)
    assert "±" not in line and "staleness" not in line


@pytest.mark.parametrize(("record", "expected"), [
    ({"kind": "eval", "step": 4, "metrics": {"reward_mean": 0.5, "reward_stderr": 0.05, "rollouts": 20.0},
      "message": "1205-abc"}, "eval at step 4: held-out reward 0.500 (se 0.050, 20 rollouts, run 1205-abc)"),
    ({"kind": "eval", "step": 4, "metrics": {"reward_mean": 0.5}, "message": "1205-abc"},
     "eval at step 4: held-out reward 0.500 (run 1205-abc)"),
    ({"kind": "skipped", "step": 2, "metrics": {}, "message": "non-finite loss"}, "skipped at step 2: non-finite loss"),
], ids=["held-out-eval", "held-out-eval-before-se", "skipped"])
def test_other_training_records(record: dict[str, Any], expected: str) -> None:
    assert step_line(record) == expected


def test_the_glossary_defines_every_name_the_step_line_and_the_cost_table_print() -> None:
    terms = glossary_terms()
    line = step_line({"kind": "step", "step": 7, "metrics": STEP_METRICS, "message": ""})
    names = field_names(line) - {"steps"}  # the histogram's "K steps: N" is the plural of step
    assert names >= {"step", "reward", "sd", "loss", "mismatch_kl", "masked", "entropy", "tok/s", "dropped",
                     "off-policy", "wait", "train", "update"}
    assert names <= terms, f"not in docs/glossary.md: {sorted(names - terms)}"
    held_out = step_line({"kind": "eval", "step": 4, "metrics": {"reward_mean": 0.5}, "message": "r"})
    assert "held-out reward" in held_out and {"held-out reward", "eval at step"} <= terms
    costs = {*KIND_COLUMNS.values(), "total $", "events"}
    assert costs <= terms, f"not in docs/glossary.md: {sorted(costs - terms)}"
    eval_names = {"mean reward", "se", "rollouts/s", "tokens in", "out", "pass@k", "errors", "cost", "in all",
                  "token check", "95% CI", "$/solved", "s", "$"}
    assert eval_names <= terms, f"not in docs/glossary.md: {sorted(eval_names - terms)}"


def test_eval_says_what_its_numbers_are(cli: Callable[..., CliResult], arith_server: MockServer) -> None:
    res = cli("eval", "arithmetic", "--base-url", arith_server.base_url, "-m", "mock-model", "-n", 4, "-r", 2)
    assert res.rc == 0, res.stderr[-2000:]
    for pattern in (r"mean reward \d\.\d{3} \(se \d\.\d{3}\)", r"rollouts 8", r"errors 0", r"pass@1 \d\.\d{3}",
                    r"tokens in \d+ out \d+", r"\d+\.\d rollouts/s while sampling \(\d+\.\ds\); "
                    r"\d+\.\ds in all, model start-up included"):
        assert re.search(pattern, res.stdout), (pattern, res.stdout)
    assert "±" not in res.stdout


@pytest.mark.slow
def test_an_eval_of_several_models_names_its_columns(cli: Callable[..., CliResult],
                                                     mock_server: Callable[..., MockServer]) -> None:
    for name in ("first", "second"):
        url = mock_server("arithmetic").base_url
        assert cli("models", "add", name, "--base-url", url, "--model-id", "mock-model").rc == 0
    res = cli("eval", "arithmetic", "-m", "first", "-m", "second", "-n", 2)
    assert res.rc == 0, res.stderr[-2000:]
    header = next(line for line in res.stdout.splitlines() if "mean reward" in line)
    assert re.search(r"mean reward\s+se\s+pass@1\s+errors\s+cost\s+rollouts/s", header), header
    assert "se: the standard error of the mean reward; rollouts/s: rollouts finished per second while sampling" \
        in res.stdout


def test_costs_name_their_columns_by_what_they_hold(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    db = tmp_path / "costs.db"
    store = Store(db)
    store.create_run("r1", kind="eval", env_name="arithmetic")
    for kind, quantity, unit, usd in (("api_tokens", 1000.0, "tokens", 0.25), ("gpu_seconds", 300.0, "seconds", 1.5),
                                      ("sandbox_seconds", 50.0, "seconds", 0.05)):
        store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                           "VALUES ('r1', ?, 'local', 'cpu', ?, ?, ?, ?)", (kind, quantity, unit, usd, time.time()))
    store.close()
    res = cli("costs", "--db", db)
    assert res.rc == 0, res.stderr[-2000:]
    header = next(line for line in res.stdout.splitlines() if line.lstrip().startswith("run "))
    assert re.search(r"run\s+events\s+api \$\s+gpu \$\s+sandbox \$\s+total \$", header), header
    for name in ("api_tokens", "gpu_seconds", "sandbox_seconds"):
        assert name not in res.stdout
    assert "r1" in res.stdout and "0.2500" in res.stdout and "1.5000" in res.stdout and "1.8000" in res.stdout
    assert "amounts in US dollars: api $ = model API tokens, gpu $ = GPU time, sandbox $ = sandbox time" in res.stdout



@pytest.mark.parametrize(("flags", "expected"), [
    (("--tokens",), r"token check \(run \S+\): 3 rollouts, 3 with token ids, 0 token mismatches"),
    ((), r"token check \(run \S+\): 3 rollouts, 0 with token ids; not checked \(the endpoint returned no token ids\)"),
], ids=["token-ids", "no-token-ids"])
def test_validate_prints_its_token_check(flags: tuple[str, ...], expected: str, mock_server: Callable[..., MockServer],
                                         cli: Callable[..., CliResult], write_env: Callable[..., Path]) -> None:
    mock = mock_server("echo", *flags)
    res = cli("validate", write_env(CHAT_ENV), "-m", "mock-model", "--base-url", mock.base_url, "--no-probe")
    assert res.rc == 0, res.stderr[-2000:]
    assert re.search(expected, res.stdout), res.stdout
    assert re.search(r"empty answer scores \(mean per reward\): replied \d\.\d{3}", res.stdout), res.stdout
    listed = last_json(cli("runs", "--kind", "validate", "--json").stdout)["runs"]
    assert [r["kind"] for r in listed] == ["validate"], listed  # the token check is validate's, not an eval
