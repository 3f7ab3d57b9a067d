"""Every OpenAI grader type against scores worked out by hand from the graders guide's definitions.

The model graders ask a real judge: the mock OpenAI server on 127.0.0.1, answering by rules keyed on the
grader's prompt. Python graders run in their own process, as they do in an environment.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import MockServer, mock_args
from workbench.formats.openai_evals import formula, similarity
from workbench.formats.openai_evals.errors import EvalDefinitionError
from workbench.formats.openai_evals.graders import grade, make_sample
from workbench.formats.openai_evals.judge import EndpointJudge
from workbench.runs.endpoint import Endpoint

ITEM = {"capital": "Paris", "sentence": "the cat sat on a mat", "tags": ["a", "b"]}

# What the judge answers, by a word in the grader's prompt.
JUDGE_RULES = [
    {"contains": "case-json", "reply": json.dumps({"steps": [], "result": 0.7})},
    {"contains": "case-above", "reply": json.dumps({"steps": [], "result": 7})},
    {"contains": "case-bare", "reply": "0.25"},
    {"contains": "case-words", "reply": "I would say it is good"},
    {"contains": "case-fenced", "reply": "```json\n{\"result\": 0.5, \"steps\": []}\n```"},
    {"contains": "label-pass", "reply": json.dumps({"steps": [], "result": "positive"})},
    {"contains": "label-fail", "reply": json.dumps({"steps": [], "result": "negative"})},
    {"contains": "label-bare", "reply": "positive"},
    {"contains": "label-other", "reply": json.dumps({"result": "banana"})},
    {"reply": "no rule"},
]


@pytest.fixture(scope="module")
def judge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EndpointJudge]:
    server = MockServer(mock_args("rules", rules=json.dumps(JUDGE_RULES)),
                        tmp_path_factory.mktemp("judge") / "judge.log")
    yield EndpointJudge("judge", endpoint=Endpoint(server.base_url, "mock-model"))
    server.stop()


def run(spec: dict[str, Any], output: str, judge: EndpointJudge | None = None, item: dict[str, Any] = ITEM,
        *, json_output: bool = False) -> tuple[float, bool]:
    sample = make_sample([{"role": "assistant", "content": output}], json_output=json_output)
    judges = {"gpt-4o": judge} if judge is not None else {}
    g = asyncio.run(grade(spec, sample, item, judges))
    return g.score, g.passed


def check(op: str, ref: str = "{{ item.capital }}") -> dict[str, Any]:
    return {"type": "string_check", "name": "c", "input": "{{ sample.output_text }}", "reference": ref, "operation": op}


@pytest.mark.parametrize(("spec", "output", "score"), [
    (check("eq"), "Paris", 1.0),
    (check("eq"), "paris", 0.0),
    (check("eq"), "Paris ", 0.0),
    (check("ne"), "Lyon", 1.0),
    (check("ne"), "Paris", 0.0),
    (check("like"), "It is Paris.", 1.0),
    (check("like"), "It is paris.", 0.0),
    (check("ilike"), "IT IS PARIS.", 1.0),
    (check("ilike"), "Lyon", 0.0),
    (check("eq", '{{ item.tags }}'), '["a", "b"]', 1.0),  # a value that is not text renders as JSON
    (check("eq", "{{ sample.output_tools[0].function.name }}"), "Paris", 0.0),  # no tool call: invalid
], ids=lambda v: v if isinstance(v, str) else None)
def test_string_check(spec: dict[str, Any], output: str, score: float) -> None:
    assert run(spec, output) == (score, score == 1.0)


def similar(metric: str, threshold: float = 0.5) -> dict[str, Any]:
    return {"type": "text_similarity", "name": "s", "input": "{{ sample.output_text }}",
            "reference": "{{ item.sentence }}", "evaluation_metric": metric, "pass_threshold": threshold}


# Hypothesis "the cat sat on the mat" against the reference "the cat sat on a mat" (6 tokens each):
# clipped n-gram matches 5/6, 3/5, 2/4, 1/3 for n = 1..4, no brevity penalty.
HYP = "the cat sat on the mat"


@pytest.mark.parametrize(("metric", "output", "score"), [
    ("fuzzy_match", "THE CAT SAT ON A MAT!", 1.0),  # rapidfuzz's default processing: case and punctuation
    ("fuzzy_match", "xyz", 0.0),  # no character in common
    ("bleu", HYP, (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25),
    ("bleu", "the cat sat on a mat", 1.0),
    ("gleu", HYP, 11 / 18),  # min(precision, recall) over all 1..4-grams: 11 of 18
    ("rouge_1", HYP, 5 / 6),
    ("rouge_2", HYP, 3 / 5),
    ("rouge_3", HYP, 2 / 4),
    ("rouge_4", HYP, 1 / 3),
    ("rouge_5", HYP, 0.0),
    ("rouge_l", HYP, 5 / 6),  # longest common subsequence "the cat sat on mat"
])
def test_text_similarity(metric: str, output: str, score: float) -> None:
    got, passed = run(similar(metric), output)
    assert got == pytest.approx(score, abs=1e-9)
    assert passed == (got >= 0.5)


def test_fuzzy_match_is_rapidfuzz_wratio() -> None:
    # kitten/sitting: longest common subsequence 4, so the Indel ratio is 1 - (6 + 7 - 8) / 13
    got, _ = run({**similar("fuzzy_match"), "reference": "sitting"}, "kitten")
    assert got == pytest.approx(1 - 5 / 13)


def test_threshold_is_inclusive() -> None:
    assert run(similar("rouge_1", 5 / 6), HYP) == (pytest.approx(5 / 6), True)
    assert run(similar("rouge_1", 0.84), HYP)[1] is False


@pytest.mark.parametrize("metric", ["cosine", "meteor", "rouge_9"])
def test_metrics_that_cannot_run_are_refused_by_name(metric: str) -> None:
    if metric == "meteor" and similarity.unavailable("meteor") is None:
        pytest.skip("NLTK's WordNet corpus is on this machine, so meteor runs")
    with pytest.raises(EvalDefinitionError, match=metric):
        similarity.require(metric, "testing_criteria[0].evaluation_metric")


def py(source: str, threshold: float | None = None) -> dict[str, Any]:
    spec = {"type": "python", "name": "p", "source": source}
    if threshold is not None:
        spec["pass_threshold"] = threshold
    return spec


@pytest.mark.parametrize(("spec", "output", "score", "passed"), [
    (py("def grade(sample, item):\n    return 1.0 if sample['output_text'] == item['capital'] else 0.0"), "Paris", 1.0, True),
    (py("def grade(sample, item):\n    return len(sample['output_text']) / 10", 0.5), "Paris", 0.5, True),
    (py("def grade(sample, item):\n    return len(sample['output_text']) / 10", 0.6), "Paris", 0.5, False),
    (py("def grade(sample, item):\n    return len(sample['output_text']) / 10"), "Paris", 0.5, False),  # no threshold: 1
    (py("def grade(sample, item):\n    print('noise')\n    return 0.75", 0.7), "x", 0.75, True),  # prints are not the grade
    (py("def grade(sample, item):\n    raise ValueError('bad')"), "x", 0.0, False),
    (py("def grade(sample, item):\n    return 'yes'"), "x", 0.0, False),
    (py("def grade(sample, item):\n    return float('nan')"), "x", 0.0, False),
    (py("import os\ndef grade(sample, item):\n    return 1.0 if 'OPENAI_API_KEY' not in os.environ else 0.0"), "x", 1.0, True),
    (py("from rapidfuzz import fuzz\ndef grade(sample, item):\n    return fuzz.ratio(sample['output_text'], item['capital']) / 100"),
     "Paris", 1.0, True),
    (py("import sys\ndef grade(sample, item):\n    sys.exit(3)"), "x", 0.0, False),
])
def test_python_grader(spec: dict[str, Any], output: str, score: float, passed: bool) -> None:
    assert run(spec, output) == (pytest.approx(score), passed)


def test_python_grader_sees_output_json_and_choices() -> None:
    src = ("def grade(sample, item):\n"
           "    return float(sample['output_json']['city'] == item['capital'] and"
           " sample['choices'][0]['message']['role'] == 'assistant')")
    assert run(py(src), '{"city": "Paris"}', json_output=True) == (1.0, True)


def scorer(case: str, **extra: Any) -> dict[str, Any]:
    return {"type": "score_model", "name": "judge", "model": "gpt-4o", "pass_threshold": 0.5,
            "input": [{"role": "system", "content": "Grade."},
                      {"role": "user", "content": case + ": {{ item.capital }} / {{ sample.output_text }}"}], **extra}


@pytest.mark.parametrize(("spec", "score", "passed"), [
    (scorer("case-json"), 0.7, True),
    (scorer("case-above"), 1.0, True),  # clipped to the range
    (scorer("case-above", range=[0, 10]), 7.0, True),
    (scorer("case-bare"), 0.25, False),
    (scorer("case-words"), 0.0, False),  # no number: 0
    (scorer("case-fenced"), 0.5, True),
    ({**scorer("case-json"), "pass_threshold": None}, 0.7, False),  # no threshold: the top of the range
])
def test_score_model(judge: EndpointJudge, spec: dict[str, Any], score: float, passed: bool) -> None:
    assert run(spec, "Paris", judge) == (pytest.approx(score), passed)


def labeller(case: str) -> dict[str, Any]:
    return {"type": "label_model", "name": "mood", "model": "gpt-4o", "labels": ["positive", "negative"],
            "passing_labels": ["positive"], "input": [{"role": "developer", "content": "Label it."},
                                                      {"role": "user", "content": case + " {{ sample.output_text }}"}]}


@pytest.mark.parametrize(("case", "score"), [("label-pass", 1.0), ("label-fail", 0.0), ("label-bare", 1.0),
                                             ("label-other", 0.0)])
def test_label_model(judge: EndpointJudge, case: str, score: float) -> None:
    assert run(labeller(case), "great", judge) == (score, score == 1.0)


def multi(calc: str, **extra: Any) -> dict[str, Any]:
    return {"type": "multi", "name": "m", "calculate_output": calc, **extra, "graders": {
        "exact": {**check("eq"), "name": "exact"},
        "words": {**similar("rouge_1"), "name": "words", "reference": "{{ item.capital }} is the capital"},
    }}


# "Paris" against "Paris is the capital": exact 1, rouge_1 P=1, R=1/4, F=2/5.
@pytest.mark.parametrize(("spec", "score", "passed"), [
    (multi("(exact + words) / 2"), 0.7, False),
    (multi("(exact + words) / 2", pass_threshold=0.7), 0.7, True),
    (multi("max(exact, words)"), 1.0, True),
    (multi("min(exact, words) * 2 ^ 2"), 1.6, True),
    (multi("exact / (words - 0.4)"), 0.0, False),  # a division by zero is an invalid grade
])
def test_multi(spec: dict[str, Any], score: float, passed: bool) -> None:
    assert run(spec, "Paris") == (pytest.approx(score), passed)


@pytest.mark.parametrize(("text", "value"), [
    ("1 + 2 * 3", 7.0), ("(1 + 2) * 3", 9.0), ("2 ^ 3 ^ 2", 512.0), ("-2 ^ 2", -4.0), ("2 ^ -1", 0.5),
    ("10 - 4 - 3", 3.0), ("8 / 4 / 2", 1.0), ("abs(-a)", 0.5), ("floor(2.7) + ceil(2.1)", 5.0),
    ("sqrt(16) + exp(0) + log(1)", 5.0), ("min(a, b, 0.1)", 0.1), ("max(a, b)", 0.75), ("1e-1 + .5", 0.6),
])
def test_formula(text: str, value: float) -> None:
    assert formula.parse(text, {"a", "b"}, "f").evaluate({"a": 0.5, "b": 0.75}) == pytest.approx(value)


@pytest.mark.parametrize(("text", "says"), [
    ("a +", "ends too early"), ("c * 2", "'c' is none of its graders"), ("pow(a, 2)", "pow() is not one"),
    ("abs(a, b)", "takes 1 argument"), ("a % b", "'%'"), ("__import__(a)", "is not one"), ("'os'", "no operator"),
    ("(a", "ends too early"), ("(a, b)", "expected ')'"),
    ("a b", "unexpected 'b'"),
])
def test_formula_refusals(text: str, says: str) -> None:
    with pytest.raises(EvalDefinitionError, match=r"calculate_output") as e:
        formula.parse(text, {"a", "b"}, "testing_criteria[0].calculate_output")
    assert says in str(e.value)


def test_nothing_runs_in_process(tmp_path: Path) -> None:
    # The grader's side effects stay in its own process and its own working folder.
    src = "import os\ndef grade(sample, item):\n    os.environ['LEAK'] = '1'\n    open('made.txt', 'w').close()\n    return 1.0"
    assert run(py(src), "x") == (1.0, True)
    import os

    assert "LEAK" not in os.environ and not (Path.cwd() / "made.txt").exists()


def test_a_python_grader_past_its_time_is_an_invalid_grade() -> None:
    from workbench.formats.openai_evals.python_grader import run_grader

    result = asyncio.run(run_grader("def grade(sample, item):\n    while True:\n        pass", {}, {}, timeout_s=1))
    assert (result.score, result.error) == (0.0, "grade ran past 1 s")


def test_what_a_python_grader_leaves_running_ends_with_it() -> None:
    from tests.helpers import wait_for
    from workbench.formats.openai_evals.python_grader import run_grader

    src = "import subprocess\ndef grade(sample, item):\n    return float(subprocess.Popen(['sleep', '300']).pid)"
    result = asyncio.run(run_grader(src, {}, {}))  # answered without waiting for the sleep
    pid = int(result.score)
    stat = Path(f"/proc/{pid}/stat")

    def gone() -> bool:
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    wait_for(gone, 30, "the grader's sleep to be killed")
