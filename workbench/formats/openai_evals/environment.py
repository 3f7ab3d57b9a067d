"""The Workbench environment of an imported OpenAI eval: built from the folder ``import-eval`` wrote.

Tasks are the data rows, each prompted with the run's ``input_messages`` (its template rendered with the
row's item, or the item's own messages); the item is kept as ``info["item"]`` for the graders. The model is
sampled once per task with the run's sampling parameters. The rubric has one reward per grader, named as the
grader, worth 1 when it passes and 0 when it fails (so a reward's mean is the pass rate the Evals dashboard
showed), and the grader's raw score as the metric ``<name>.score`` (a multi grader's sub-scores as
``<name>.<key>``). Each rollout's state keeps every grade under ``openai_eval``: score, pass, and the
judge's answer or why a grade is invalid.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workbench.formats.openai_evals import definition as defs
from workbench.formats.openai_evals import templates
from workbench.formats.openai_evals.errors import EvalDefinitionError
from workbench.formats.openai_evals.graders import Judge, grade, judge_models, make_sample

EVAL_FILE, RUN_FILE, DATA_FILE = "eval.json", "run.json", "data.jsonl"
DIALECT = "openai-eval"
DEFAULT_MAX_TOKENS = 1024


def read_definition(eval_path: Path, run_path: Path, data_path: Path, *,
                    labels: tuple[str, str, str] = ("EVAL.json", "RUN.json", "DATA.jsonl")) -> defs.Definition:
    """Read and check the three files; ``labels`` are the names an error calls them."""
    eval_obj = defs.read_json(eval_path, labels[0])
    run_obj = defs.read_json(run_path, labels[1])
    items = defs.read_items(data_path, labels[2])
    return defs.load(eval_obj, run_obj, items, eval_label=labels[0], run_label=labels[1], data_label=labels[2])


def render_prompt(defn: defs.Definition, item: Mapping[str, Any], where: str = "item") -> list[dict[str, Any]]:
    """The chat messages the model gets for ``item``; ``developer`` is sent as ``system``."""
    if defn.item_reference is not None:
        found = templates.lookup(item, defn.item_reference, "item_reference")
        raw = [{"role": "user", "content": found}] if isinstance(found, str) else found
        if not isinstance(raw, list) or not raw or not all(isinstance(m, dict) and m.get("role") in defs.ROLES
                                                             for m in raw):
            raise EvalDefinitionError(f"{where}: its input_messages item_reference is not a list of messages")
        messages = [{"role": m["role"], "content": defs.message_text(m.get("content"), where)} for m in raw]
    else:
        messages = [{"role": m["role"], "content": templates.render(m["content"], item)} for m in defn.template or []]
    return [{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in messages]


def tasks_of(defn: defs.Definition) -> list[dict[str, Any]]:
    rows = []
    for n, item in enumerate(defn.items, 1):
        try:
            prompt = render_prompt(defn, item, f"item {n}")
        except templates.MissingValue as e:
            raise EvalDefinitionError(f"item {n}: the run's input_messages template: {e}") from None
        rows.append({"prompt": prompt, "info": {"item": item}})
    return rows


def sampling_of(defn: defs.Definition) -> Any:
    import workbench as wb

    s = defn.sampling
    extra = {k: s[k] for k in ("response_format", "tools", "tool_choice", "reasoning_effort") if s.get(k) is not None}
    limit = s.get("max_completion_tokens") or s.get("max_completions_tokens") or DEFAULT_MAX_TOKENS
    return wb.Sampling(max_tokens=int(limit), temperature=float(s.get("temperature", 1.0)),
                       top_p=float(s.get("top_p", 1.0)), seed=s.get("seed"), extra=extra)


def build_environment(folder: str | Path, judge: str | None = None) -> Any:
    """The environment of the folder ``import-eval`` wrote; ``judge`` names the model graders' judge."""
    import workbench as wb
    from workbench.formats.openai_evals.judge import resolve_judges

    root = Path(folder)
    try:
        defn = read_definition(root / EVAL_FILE, root / RUN_FILE, root / DATA_FILE,
                               labels=(EVAL_FILE, RUN_FILE, DATA_FILE))
    except EvalDefinitionError as e:
        raise wb.EnvLoadError(f"{root.name}: {e}") from None
    judges = resolve_judges(judge_models(defn.graders), judge)
    rubric = wb.Rubric()
    json_output = "response_format" in defn.sampling
    for spec in defn.graders:
        _add_grader(rubric, spec, judges, json_output)
    return wb.Environment(name=root.name, tasks=wb.TaskSet.from_records(tasks_of(defn), name=root.name),
                          harness=wb.SingleTurn(), rubric=rubric, sampling=sampling_of(defn))


def _add_grader(rubric: Any, spec: dict[str, Any], judges: Mapping[str, Judge], json_output: bool) -> None:
    name = spec["name"]

    async def passed(messages: list[dict[str, Any]], info: dict[str, Any], state: dict[str, Any]) -> float:
        grades = state.setdefault("openai_eval", {})
        grades.pop(name, None)
        g = await grade(spec, make_sample(messages, json_output=json_output), info["item"], judges)
        grades[name] = {"score": g.score, "passed": g.passed, **g.details}
        return 1.0 if g.passed else 0.0

    def graded(state: dict[str, Any]) -> dict[str, Any]:
        found = (state.get("openai_eval") or {}).get(name)
        if not isinstance(found, dict):
            raise ValueError(f"grader {name!r} gave no grade (its reward failed)")
        return found

    def score(state: dict[str, Any]) -> float:
        return float(graded(state)["score"])

    rubric.reward(passed, name=name)
    rubric.metric(score, name=f"{name}.score")
    if spec["type"] == "multi":
        for key in spec["graders"]:
            def sub(state: dict[str, Any], key: str = key) -> float:
                return float(graded(state)["graders"][key])

            rubric.metric(sub, name=f"{name}.{key}")
