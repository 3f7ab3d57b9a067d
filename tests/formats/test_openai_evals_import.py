"""``workbench import-eval openai`` end to end: the command writes an environment folder, ``workbench eval``
runs it against the mock OpenAI server (the policy and, for the model graders, the judge), and each grader's
reward is its pass rate. Bad definitions are refused in one line, with nothing written."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, assert_user_error, last_json
from workbench.formats.openai_evals import EvalDefinitionError, import_eval

COUNTRIES = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima", "Chile": "Santiago"}
# The policy's answers, and what the judge says about them (judge rules first: its prompts say "grade").
RULES = [
    {"contains": "grade. expected: paris. answer: paris", "reply": json.dumps({"steps": [], "result": 0.9})},
    {"contains": "grade. expected: tokyo", "reply": json.dumps({"steps": [], "result": 0.6})},
    {"contains": "grade.", "reply": json.dumps({"steps": [], "result": 0.1})},
    {"contains": "label. country chile", "reply": json.dumps({"steps": [], "result": "incorrect"})},
    {"contains": "label.", "reply": json.dumps({"steps": [], "result": "correct"})},
    {"contains": "france", "reply": "Paris"},
    {"contains": "japan", "reply": "tokyo"},
    {"contains": "peru", "reply": "The capital is Lima"},
    {"reply": "Madrid"},
]
OUT = "{{ sample.output_text }}"
CAPITAL = "{{ item.capital }}"
JUDGE_MODEL = "gpt-4o-2024-08-06"

EVAL: dict[str, Any] = {
    "object": "eval", "name": "capitals",
    "data_source_config": {"type": "custom", "include_sample_schema": True, "item_schema": {
        "type": "object", "properties": {"country": {"type": "string"}, "capital": {"type": "string"}},
        "required": ["country", "capital"]}},
    "testing_criteria": [
        {"type": "string_check", "name": "exact", "id": "exact-7f3a", "input": OUT, "reference": CAPITAL,
         "operation": "eq"},
        {"type": "string_check", "name": "mentions", "input": OUT, "reference": CAPITAL, "operation": "ilike"},
        {"type": "text_similarity", "name": "close", "input": OUT, "reference": CAPITAL,
         "evaluation_metric": "fuzzy_match", "pass_threshold": 0.8},
        {"type": "python", "name": "short", "pass_threshold": 1.0,
         "source": "def grade(sample, item):\n    return 1.0 if len(sample['output_text']) < 10 else 0.0\n"},
        {"type": "score_model", "name": "quality", "model": JUDGE_MODEL, "pass_threshold": 0.5, "range": [0, 1],
         "input": [{"role": "system", "content": "You grade capitals."},
                   {"role": "user", "content": [{"type": "input_text", "text": f"Grade. Expected: {CAPITAL}. Answer: {OUT}"}]}]},
        {"type": "label_model", "name": "verdict", "model": JUDGE_MODEL, "labels": ["correct", "incorrect"],
         "passing_labels": ["correct"],
         "input": [{"role": "developer", "content": "Pick a label."},
                   {"role": "user", "content": "Label. Country {{ item.country }} answer " + OUT}]},
        {"type": "multi", "name": "combined", "calculate_output": "max(exact, near)", "pass_threshold": 0.5,
         "graders": {"exact": {"type": "string_check", "input": OUT, "reference": CAPITAL, "operation": "eq"},
                     "near": {"type": "text_similarity", "input": OUT, "reference": CAPITAL,
                              "evaluation_metric": "rouge_1", "pass_threshold": 0.5}}},
    ],
}
RUN: dict[str, Any] = {"object": "eval.run", "name": "capitals-run", "data_source": {
    "type": "completions", "model": "gpt-4o-mini",
    "input_messages": {"type": "template", "template": [
        {"role": "developer", "content": "Answer with the city only."},
        {"role": "user", "content": "What is the capital of {{ item.country }}?"}]},
    "sampling_params": {"temperature": 0, "max_completion_tokens": 64}},
    # What OpenAI's run reported, named NAME-ID as a retrieved run names them.
    "per_testing_criteria_results": [{"testing_criteria": "exact-exact-7f3a", "passed": 1, "failed": 3},
                                     {"testing_criteria": "mentions-9c1e", "passed": 3, "failed": 1}]}
# Answers Paris, tokyo, "The capital is Lima", Madrid. By hand:
#   exact: Paris only. mentions (contains, any case): 3. close (WRatio, default processing, >= 0.8): Paris,
#   tokyo, and Lima inside the sentence (0.9) = 3. short (< 10 characters): 3. quality (judge 0.9, 0.6,
#   0.1, 0.1; >= 0.5): 2. verdict (Chile is "incorrect"): 3. combined (max of eq and rouge_1 F; Lima's
#   rouge_1 against a 4-word answer is 2/5): Paris 1, tokyo 1, Lima 0.4, Madrid 0 -> 2.
EXPECTED = {"exact": 0.25, "mentions": 0.75, "close": 0.75, "short": 0.75, "quality": 0.5, "verdict": 0.75,
            "combined": 0.5}


def write_definition(folder: Path, eval_obj: Any = None, run_obj: Any = None, rows: list[str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, obj in (("eval.json", EVAL if eval_obj is None else eval_obj), ("run.json", RUN if run_obj is None else run_obj)):
        (folder / name).write_text(obj if isinstance(obj, str) else json.dumps(obj))
    lines = rows if rows is not None else [json.dumps({"item": {"country": c, "capital": k}}) for c, k in COUNTRIES.items()]
    (folder / "data.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def import_args(src: Path, out: Path) -> list[Any]:
    return ["import-eval", "openai", src / "eval.json", "--run", src / "run.json", "--data", src / "data.jsonl",
            "-o", out]


def test_imported_eval_scores_each_grader_as_its_pass_rate(cli: Callable[..., CliResult], tmp_path: Path,
                                                            mock_server: Callable[..., MockServer]) -> None:
    server = mock_server("rules", rules=json.dumps(RULES))
    src = write_definition(tmp_path / "src")
    env_dir = tmp_path / "capitals_env"
    res = cli(*import_args(src, env_dir), "--json")
    assert res.rc == 0, res.stderr
    wrote = last_json(res.stdout)
    assert wrote["tasks"] == 4 and wrote["dialect"] == "openai-eval" and wrote["judge_models"] == [JUDGE_MODEL]
    assert wrote["reported"] == {"exact": 0.25, "mentions": 0.75}
    assert sorted(p.name for p in env_dir.iterdir()) == ["__init__.py", "data.jsonl", "eval.json", "run.json"]
    assert 'DIALECT = "openai-eval"' in (env_dir / "__init__.py").read_text().replace("'", '"')
    assert cli("models", "add", "mock", "--base-url", server.base_url, "--model-id", "mock-model").rc == 0

    # The graders' own model is no registered model: the environment says so and runs nothing.
    assert_user_error(cli("eval", env_dir, "-m", "mock"), JUDGE_MODEL, "judge")
    assert server.requests() == 0

    res = cli("eval", env_dir, "-m", "mock", "-a", json.dumps({"judge": "mock"}), "--json")
    assert res.rc == 0, res.stderr
    report = last_json(res.stdout)
    assert report["errors"] == 0 and report["rollouts"] == 4
    assert report["rewards"] == pytest.approx(EXPECTED), json.dumps(report)
    assert report["metrics"]["quality.score"] == pytest.approx((0.9 + 0.6 + 0.1 + 0.1) / 4)
    assert report["metrics"]["combined.score"] == pytest.approx((1 + 1 + 0.4 + 0) / 4)
    assert report["metrics"]["combined.near"] == pytest.approx((1 + 1 + 0.4 + 0) / 4)
    bodies = server.bodies()
    policy = [b for b in bodies if "response_format" not in b]
    judged = [b for b in bodies if "response_format" in b]
    assert len(policy) == 4 and len(judged) == 8  # two model graders a rollout
    assert [m["role"] for m in policy[0]["messages"]] == ["system", "user"]  # developer is sent as system
    asked = [m["content"] for b in judged for m in b["messages"] if m["role"] == "user"]
    assert "Grade. Expected: Paris. Answer: Paris" in asked and "Label. Country Chile answer Madrid" in asked
    assert policy[0]["temperature"] == 0 and policy[0]["max_tokens"] == 64


def bad_eval(**change: Any) -> dict[str, Any]:
    obj = copy.deepcopy(EVAL)
    obj.update(change)
    return obj


def grader(i: int, **change: Any) -> dict[str, Any]:
    obj = copy.deepcopy(EVAL)
    obj["testing_criteria"][i].update(change)
    return obj


def run_with(**change: Any) -> dict[str, Any]:
    obj = copy.deepcopy(RUN)
    obj["data_source"].update(change)
    return obj


ROW = json.dumps({"item": {"country": "France", "capital": "Paris"}})
BAD = [
    pytest.param({"eval_obj": "{not json"}, ["eval.json", "not JSON", "line 1"], id="eval-not-json"),
    pytest.param({"eval_obj": {"name": "x"}}, ["testing_criteria is missing"], id="no-testing-criteria"),
    pytest.param({"eval_obj": grader(0, type="regex")}, ["testing_criteria[0].type", "'regex'"], id="unknown-grader"),
    pytest.param({"eval_obj": grader(0, reference="{{ item.answr }}")}, ["testing_criteria[0].reference",
                                                                         "item.answr"], id="unknown-item-field"),
    pytest.param({"eval_obj": grader(1, input="{{ sample.text }}")}, ["testing_criteria[1].input", "sample variable"],
                 id="unknown-sample-variable"),
    pytest.param({"eval_obj": grader(0, input="{{ answer }}")}, ["testing_criteria[0].input", "namespace"],
                 id="no-namespace"),
    pytest.param({"eval_obj": grader(0, input="{{ sample.output_json.city }}")}, ["response_format"],
                 id="output-json-without-response-format"),
    pytest.param({"eval_obj": grader(2, evaluation_metric="cosine")}, ["testing_criteria[2].evaluation_metric",
                                                                      "cosine", "text-embedding-3-large"], id="cosine"),
    pytest.param({"eval_obj": grader(2, pass_threshold=None)}, ["testing_criteria[2].pass_threshold"],
                 id="similarity-without-threshold"),
    pytest.param({"eval_obj": grader(3, source="def grade(sample, item)\n  return 1")},
                 ["testing_criteria[3].source", "not Python"], id="python-syntax"),
    pytest.param({"eval_obj": grader(3, source="def score(sample, item):\n    return 1")},
                 ["testing_criteria[3].source", "grade(sample, item)"], id="python-without-grade"),
    pytest.param({"eval_obj": grader(5, passing_labels=["right"])}, ["testing_criteria[5].passing_labels", "'right'"],
                 id="passing-label-not-a-label"),
    pytest.param({"eval_obj": grader(6, calculate_output="exact + nearly")},
                 ["testing_criteria[6].calculate_output", "'nearly'"], id="formula-unknown-name"),
    pytest.param({"eval_obj": grader(1, name="exact")}, ["testing_criteria[1].name", "'exact'"], id="duplicate-name"),
    pytest.param({"eval_obj": bad_eval(data_source_config={"type": "logs"})}, ["data_source_config.type", "logs"],
                 id="logs-data-source"),
    pytest.param({"rows": [ROW, json.dumps({"item": {"country": "Peru", "capital": 3}})]},
                 ["item 2", "capital", "item_schema"], id="item-schema"),
    pytest.param({"rows": [ROW, "{oops"]}, ["data.jsonl line 2", "not JSON"], id="data-not-json"),
    pytest.param({"rows": [json.dumps({"country": "Peru"})]}, ["data.jsonl line 1", "item"], id="row-without-item"),
    pytest.param({"rows": []}, ["data.jsonl", "no rows"], id="no-rows"),
    pytest.param({"run_obj": run_with(input_messages=None)}, ["input_messages is missing"], id="no-input-messages"),
    pytest.param({"run_obj": run_with(input_messages={"type": "template", "template": [
        {"role": "user", "content": "{{ sample.output_text }}"}]})}, ["template[0].content", "sample"],
        id="prompt-uses-sample"),
    pytest.param({"run_obj": run_with(input_messages={"type": "template", "template": [
        {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})}, ["'input_image'"],
        id="image-content"),
]


@pytest.mark.parametrize(("files", "says"), BAD)
def test_bad_definitions_are_refused_and_nothing_is_written(tmp_path: Path, files: dict[str, Any],
                                                            says: list[str]) -> None:
    src = write_definition(tmp_path / "src", **files)
    with pytest.raises(EvalDefinitionError) as e:
        import_eval(src / "eval.json", src / "run.json", src / "data.jsonl", tmp_path / "out" / "env")
    assert "\n" not in str(e.value) and all(s.lower() in str(e.value).lower() for s in says), str(e.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a CLI process a case; the same table runs in-process above, in the fast lane
@pytest.mark.parametrize(("files", "says"), BAD)
def test_bad_definitions_are_one_line_from_the_cli(cli: Callable[..., CliResult], tmp_path: Path,
                                                   files: dict[str, Any], says: list[str]) -> None:
    src = write_definition(tmp_path / "src", **files)
    out = tmp_path / "out" / "env"
    assert_user_error(cli(*import_args(src, out)), *says)
    assert not (tmp_path / "out").exists()


def test_an_existing_folder_is_not_overwritten(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    src = write_definition(tmp_path / "src")
    out = tmp_path / "env"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert_user_error(cli(*import_args(src, out)), "exists and is not an empty folder")
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli(*import_args(src, empty)).rc == 0 and (empty / "__init__.py").is_file()


def test_a_missing_file_is_named(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    src = write_definition(tmp_path / "src")
    (src / "run.json").unlink()
    assert_user_error(cli(*import_args(src, tmp_path / "env")), "run.json", "does not exist")
    assert not (tmp_path / "env").exists()
