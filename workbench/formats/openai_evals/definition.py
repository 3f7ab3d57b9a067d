"""An OpenAI Evals definition read and checked: the eval object (its graders), the run object (its prompt
template and sampling) and the JSONL items. Anything Workbench cannot take is refused in one line naming
the file and the field; a definition that passes here runs."""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.formats.openai_evals import formula, similarity, templates
from workbench.formats.openai_evals.errors import EvalDefinitionError

GRADER_TYPES = ("string_check", "text_similarity", "python", "score_model", "label_model", "multi")
OPERATIONS = ("eq", "ne", "like", "ilike")
ROLES = ("system", "developer", "user", "assistant")
_TEXT_PARTS = ("input_text", "output_text")


@dataclass(slots=True)
class Definition:
    """What one eval and one of its runs say, checked."""

    name: str
    graders: list[dict[str, Any]]  # the eval's testing_criteria, each checked
    items: list[dict[str, Any]]  # each data row's item
    template: list[dict[str, Any]] | None  # the run's input_messages template, or None for an item reference
    item_reference: tuple[str | int, ...] | None  # the path of the item's own messages (item_reference)
    sampling: dict[str, Any] = field(default_factory=dict)  # the run's sampling_params, as given
    model: str | None = None  # the model the run sampled
    reported: dict[str, float] = field(default_factory=dict)  # the run's pass rate by grader, as OpenAI reported it


def _read(path: Path, label: str) -> str:
    named = label if label == str(path) else f"{label} ({path})"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EvalDefinitionError(f"{named} does not exist") from None
    except IsADirectoryError:
        raise EvalDefinitionError(f"{named} is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise EvalDefinitionError(f"{named} cannot be read: {e}") from None


def read_json(path: Path, label: str) -> Any:
    text = _read(path, label)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise EvalDefinitionError(f"{label}: not JSON (line {e.lineno} column {e.colno}: {e.msg})") from None


def read_items(path: Path, label: str) -> list[dict[str, Any]]:
    """The ``item`` of every ``{"item": {...}}`` line; blank lines are skipped."""
    lines = _read(path, label).splitlines()
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalDefinitionError(f"{label} line {n}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(row, dict) or not isinstance(row.get("item"), dict):
            raise EvalDefinitionError(f"{label} line {n}: a row is {{\"item\": {{...}}}}, and this one has no item object")
        items.append(row["item"])
    if not items:
        raise EvalDefinitionError(f"{label} has no rows")
    return items


def load(eval_obj: Any, run_obj: Any, items: list[dict[str, Any]], *, eval_label: str = "EVAL.json",
         run_label: str = "RUN.json", data_label: str = "DATA.jsonl") -> Definition:
    """Check the three parts against each other; the first problem is raised."""
    if not isinstance(eval_obj, dict):
        raise EvalDefinitionError(f"{eval_label}: an eval object is a JSON object, not {type(eval_obj).__name__}")
    if not isinstance(run_obj, dict):
        raise EvalDefinitionError(f"{run_label}: a run object is a JSON object, not {type(run_obj).__name__}")
    fields = _item_fields(eval_obj, items, eval_label, data_label)
    defn = _run(run_obj, run_label, fields)
    defn.name = str(eval_obj.get("name") or "openai-eval")
    defn.items = items
    criteria = eval_obj.get("testing_criteria")
    if criteria is None:
        raise EvalDefinitionError(f"{eval_label}: testing_criteria is missing (the eval object lists its graders there)")
    if not isinstance(criteria, list) or not criteria:
        raise EvalDefinitionError(f"{eval_label}: testing_criteria must be a non-empty list of graders")
    ctx = {"fields": fields, "output_json": "response_format" in defn.sampling}
    seen: set[str] = set()
    for i, g in enumerate(criteria):
        where = f"{eval_label} testing_criteria[{i}]"
        check_grader(g, where, ctx)
        names = {g["name"], f"{g['name']}.score", *(f"{g['name']}.{k}" for k in g.get("graders") or {})}
        if names & seen:
            raise EvalDefinitionError(f"{where}.name: {g['name']!r} names two graders or another grader's score; "
                                      "each reward and metric needs its own name")
        seen |= names
    defn.graders = criteria
    defn.reported = _reported(run_obj, criteria)
    return defn


def _reported(run_obj: dict[str, Any], criteria: list[dict[str, Any]]) -> dict[str, float]:
    """The pass rates a retrieved run reports (``per_testing_criteria_results``, each named ``NAME-ID``)."""
    out: dict[str, float] = {}
    results = run_obj.get("per_testing_criteria_results")
    for r in results if isinstance(results, list) else []:
        if not isinstance(r, dict) or not isinstance(r.get("testing_criteria"), str):
            continue
        passed, failed = r.get("passed"), r.get("failed")
        if not isinstance(passed, int) or not isinstance(failed, int) or passed + failed <= 0:
            continue
        label = r["testing_criteria"]
        # by id first, then by name, then by the longest name the label starts with (an eval without ids)
        match = next((g for g in criteria if g.get("id") and label == f"{g['name']}-{g['id']}"), None) or next(
            (g for g in criteria if label == g["name"]), None) or max(
            (g for g in criteria if label.startswith(g["name"] + "-")), key=lambda g: len(g["name"]), default=None)
        if match is not None and match["name"] not in out:
            out[match["name"]] = passed / (passed + failed)
    return out


def _item_fields(eval_obj: dict[str, Any], items: list[dict[str, Any]], eval_label: str, data_label: str) -> set[str]:
    """The item fields templates may name: the item schema's properties and every row's keys. Rows are
    checked against the schema when the eval has one."""
    config = eval_obj.get("data_source_config") or {}
    if not isinstance(config, dict):
        raise EvalDefinitionError(f"{eval_label} data_source_config: must be an object")
    kind = config.get("type", "custom")
    if kind != "custom":
        raise EvalDefinitionError(f"{eval_label} data_source_config.type: {kind!r} reads data only OpenAI holds "
                                  "(stored completions or logs); export it as JSONL items and use type 'custom'")
    fields: set[str] = set()
    schema = config.get("item_schema")
    whole = config.get("schema")
    if schema is None and isinstance(whole, dict) and isinstance(whole.get("properties"), dict):
        schema = whole["properties"].get("item")  # a retrieved eval: the item's schema inside the whole one
    if isinstance(schema, dict):
        import jsonschema

        if isinstance(schema.get("properties"), dict):
            fields |= set(schema["properties"])
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            validator = cls(schema)
        except jsonschema.SchemaError as e:
            raise EvalDefinitionError(f"{eval_label} data_source_config.item_schema: not a JSON schema ({e.message})") from None
        for n, item in enumerate(items, 1):
            error = jsonschema.exceptions.best_match(validator.iter_errors(item))
            if error is not None:
                at = "/".join(map(str, error.absolute_path)) or "the item"
                raise EvalDefinitionError(f"{data_label} item {n}: {at} does not match data_source_config.item_schema "
                                          f"({error.message})")
    for item in items:
        fields |= set(item)
    return fields


def _run(run_obj: dict[str, Any], label: str, fields: set[str]) -> Definition:
    source = run_obj.get("data_source")
    if not isinstance(source, dict):
        raise EvalDefinitionError(f"{label}: data_source is missing (the run object holds the prompt and the model)")
    kind = source.get("type")
    if kind not in ("completions", "responses"):
        raise EvalDefinitionError(f"{label} data_source.type: {kind!r} is not one Workbench runs (completions, "
                                  "responses); a jsonl data source has no model to sample")
    sampling = source.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise EvalDefinitionError(f"{label} data_source.sampling_params: must be an object")
    sampling = dict(sampling)
    text = sampling.pop("text", None) if kind == "responses" else None
    text_format = text.get("format") if isinstance(text, dict) else None
    if text_format:
        sampling["response_format"] = text_format
    for key in ("temperature", "top_p", "max_completion_tokens", "max_completions_tokens", "seed"):
        value = sampling.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise EvalDefinitionError(f"{label} data_source.sampling_params.{key}: must be a number, not {value!r}")
    messages = source.get("input_messages")
    if not isinstance(messages, dict):
        raise EvalDefinitionError(f"{label} data_source.input_messages is missing (the eval object holds no prompt; "
                                  "the run's template is it)")
    where = f"{label} data_source.input_messages"
    model = source.get("model")
    defn = Definition("", [], [], None, None, sampling, model if isinstance(model, str) else None)
    if messages.get("type") == "item_reference":
        ref = templates.parse_ref(str(messages.get("item_reference") or ""), f"{where}.item_reference")
        if ref.namespace != "item" or ref.path[0] not in fields:
            raise EvalDefinitionError(f"{where}.item_reference: {ref.text!r} names no field of the items")
        defn.item_reference = ref.path
        return defn
    if messages.get("type") != "template":
        raise EvalDefinitionError(f"{where}.type: {messages.get('type')!r} is not template or item_reference")
    template = messages.get("template")
    if not isinstance(template, list) or not template:
        raise EvalDefinitionError(f"{where}.template: must be a non-empty list of messages")
    defn.template = [_message(m, f"{where}.template[{i}]", fields, sample=False, output_json=False)
                     for i, m in enumerate(template)]
    return defn


def _message(m: Any, where: str, fields: set[str], *, sample: bool, output_json: bool) -> dict[str, Any]:
    """A template message as ``{"role", "content"}`` with its text content, its tags checked."""
    if not isinstance(m, dict):
        raise EvalDefinitionError(f"{where}: a message is an object with role and content")
    role = m.get("role")
    if role not in ROLES:
        raise EvalDefinitionError(f"{where}.role: {role!r} is not one of {', '.join(ROLES)}")
    content = message_text(m.get("content"), f"{where}.content")
    templates.check(content, f"{where}.content", item_fields=fields, sample=sample, output_json=output_json)
    return {"role": role, "content": content}


def message_text(content: Any, where: str) -> str:
    """A message's content as text: a string, a text part or a list of them; images and audio are refused."""
    if content is None:
        raise EvalDefinitionError(f"{where} is missing (a message's text)")
    parts = content if isinstance(content, list) else [content]
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise EvalDefinitionError(f"{where}: {kind!r} content is not supported (text only: a string, "
                                      "input_text or output_text)")
    return "".join(texts)


def check_grader(g: Any, where: str, ctx: Mapping[str, Any], *, in_multi: bool = False) -> None:
    if not isinstance(g, dict):
        raise EvalDefinitionError(f"{where}: a grader is a JSON object")
    kind = g.get("type")
    if kind is None:
        raise EvalDefinitionError(f"{where}.type is missing (one of {', '.join(GRADER_TYPES)})")
    if kind not in GRADER_TYPES:
        raise EvalDefinitionError(f"{where}.type: {kind!r} is no grader type (they are {', '.join(GRADER_TYPES)})")
    if not isinstance(g.get("name"), str) or not g["name"].strip():
        raise EvalDefinitionError(f"{where}.name is missing (each grader's name names its reward)")

    def text(key: str, *, sample: bool = True) -> None:
        if key not in g:
            raise EvalDefinitionError(f"{where}.{key} is missing (a {kind} grader needs it, as a string)")
        if not isinstance(g[key], str):
            raise EvalDefinitionError(f"{where}.{key}: must be a string, not {type(g[key]).__name__}")
        templates.check(g[key], f"{where}.{key}", item_fields=ctx["fields"], sample=sample,
                        output_json=ctx["output_json"])

    def number(key: str, *, required: bool = False) -> None:
        value = g.get(key)
        if value is None and not required:
            return
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise EvalDefinitionError(f"{where}.{key}: must be a number" + ("" if value is None else f", not {value!r}"))

    if kind == "string_check":
        text("input")
        text("reference")
        if g.get("operation") not in OPERATIONS:
            raise EvalDefinitionError(f"{where}.operation: {g.get('operation')!r} is not one of {', '.join(OPERATIONS)}")
    elif kind == "text_similarity":
        text("input")
        text("reference")
        number("pass_threshold", required=True)
        similarity.require(str(g.get("evaluation_metric")), f"{where}.evaluation_metric")
    elif kind == "python":
        _check_python(g, where)
        number("pass_threshold")
    elif kind in ("score_model", "label_model"):
        _check_model_grader(g, where, ctx, kind, number)
    else:
        _check_multi(g, where, ctx, in_multi)


def _check_python(g: dict[str, Any], where: str) -> None:
    source = g.get("source")
    if not isinstance(source, str):
        raise EvalDefinitionError(f"{where}.source is missing (a python grader's code, defining grade(sample, item))")
    if len(source.encode()) > 256 * 1024:
        raise EvalDefinitionError(f"{where}.source: more than 256 kB of code (the graders' limit)")
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise EvalDefinitionError(f"{where}.source: not Python (line {e.lineno}: {e.msg})") from None
    grade = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "grade"]
    if not grade or len(grade[-1].args.args) != 2:
        raise EvalDefinitionError(f"{where}.source: defines no grade(sample, item) function of two arguments")


def _check_model_grader(g: dict[str, Any], where: str, ctx: Mapping[str, Any], kind: str, number: Any) -> None:
    if not isinstance(g.get("model"), str) or not g["model"]:
        raise EvalDefinitionError(f"{where}.model is missing (the judge model's name)")
    messages = g.get("input")
    if not isinstance(messages, list) or not messages:
        raise EvalDefinitionError(f"{where}.input: must be a non-empty list of messages")
    for i, m in enumerate(messages):
        _message(m, f"{where}.input[{i}]", ctx["fields"], sample=True, output_json=ctx["output_json"])
    params = g.get("sampling_params")
    if params is not None and not isinstance(params, dict):
        raise EvalDefinitionError(f"{where}.sampling_params: must be an object")
    if kind == "score_model":
        number("pass_threshold")
        span = g.get("range")
        if span is not None and not (isinstance(span, list) and len(span) == 2 and all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in span) and span[0] < span[1]):
            raise EvalDefinitionError(f"{where}.range: must be [low, high] with low < high, not {span!r}")
        return
    labels, passing = g.get("labels"), g.get("passing_labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(v, str) for v in labels):
        raise EvalDefinitionError(f"{where}.labels: must be a non-empty list of strings")
    if not isinstance(passing, list) or not passing or not all(isinstance(v, str) for v in passing):
        raise EvalDefinitionError(f"{where}.passing_labels: must be a non-empty list of strings")
    extra = [v for v in passing if v not in labels]
    if extra:
        raise EvalDefinitionError(f"{where}.passing_labels: {extra[0]!r} is not one of the labels")


def _check_multi(g: dict[str, Any], where: str, ctx: Mapping[str, Any], in_multi: bool) -> None:
    if in_multi:
        raise EvalDefinitionError(f"{where}.type: a multi grader cannot hold another multi grader")
    graders = g.get("graders")
    if not isinstance(graders, dict) or not graders:
        raise EvalDefinitionError(f"{where}.graders: must be an object of named graders")
    for key, sub in graders.items():
        if not key.isidentifier():
            raise EvalDefinitionError(f"{where}.graders: {key!r} cannot be named in calculate_output")
        if isinstance(sub, dict) and "name" not in sub:
            sub["name"] = key
        check_grader(sub, f"{where}.graders.{key}", ctx, in_multi=True)
    if not isinstance(g.get("calculate_output"), str):
        raise EvalDefinitionError(f"{where}.calculate_output is missing (the formula over {', '.join(graders)})")
    formula.parse(g["calculate_output"], set(graders), f"{where}.calculate_output")
    if g.get("pass_threshold") is not None and (isinstance(g["pass_threshold"], bool) or not isinstance(
            g["pass_threshold"], int | float)):
        raise EvalDefinitionError(f"{where}.pass_threshold: must be a number")
