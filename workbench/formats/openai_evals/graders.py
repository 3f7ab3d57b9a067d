"""OpenAI's graders, computed as the graders guide defines them: each grades one sample of one item to a
score and says whether it passes (the pass rate the Evals dashboard showed is the mean of that).

- ``string_check``: 1 or 0 by ``eq`` (equal), ``ne`` (not equal), ``like`` (the input contains the reference)
  or ``ilike`` (contains, ignoring case); it passes with 1.
- ``text_similarity``: the metric's score (``similarity.py``); it passes at ``pass_threshold`` or above.
- ``python``: ``grade(sample, item)`` in its own process (``python_grader.py``); an invalid grade is 0. It
  passes at ``pass_threshold`` or above, or, without one, with a score of 1.
- ``score_model``: the judge's ``result``, clipped to ``range`` (default [0, 1]); an answer with no number
  is 0. It passes at ``pass_threshold`` or above, or, without one, at the top of the range.
- ``label_model``: the judge picks one of ``labels``; 1 and a pass when it is one of ``passing_labels``.
- ``multi``: ``calculate_output`` over its graders' scores (``formula.py``); it passes at its
  ``pass_threshold``, or, without one, with a score of 1 or more.

A template that names a value the sample or item does not have makes the grade invalid: 0, not passed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from workbench.formats.openai_evals import formula, similarity, templates
from workbench.formats.openai_evals.definition import message_text
from workbench.formats.openai_evals.python_grader import run_grader


class Judge(Protocol):
    """A model that answers a grader's messages (``judge.py`` resolves one from the registered models)."""

    async def ask(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> str: ...


@dataclass(slots=True)
class Grade:
    score: float
    passed: bool
    details: dict[str, Any] = field(default_factory=dict)  # sub-scores, the judge's answer, why it is invalid


def make_sample(messages: Sequence[Mapping[str, Any]], *, json_output: bool) -> dict[str, Any]:
    """The ``sample`` namespace from a rollout's messages: its last assistant message."""
    last = next((dict(m) for m in reversed(messages) if m.get("role") == "assistant"),
                {"role": "assistant", "content": ""})
    content = last.get("content")
    text = content if isinstance(content, str) else "".join(
        p.get("text", "") for p in content or [] if isinstance(p, dict))
    tools = list(last.get("tool_calls") or [])
    sample: dict[str, Any] = {
        "output_text": text, "output_tools": tools, "output_audio": None,
        "choices": [{"index": 0, "message": last, "finish_reason": "tool_calls" if tools else "stop"}],
        "output_json": None,
    }
    if json_output:
        try:
            sample["output_json"] = json.loads(text)
        except ValueError:
            pass
    return sample


def _invalid(e: Exception) -> Grade:
    return Grade(0.0, False, {"invalid": str(e)})


async def grade(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any],
                judges: Mapping[str, Judge]) -> Grade:
    """Grade ``sample`` of ``item`` by the checked grader ``spec``; ``judges`` maps a grader's model to its judge."""
    kind = spec["type"]
    try:
        if kind == "string_check":
            return _string_check(spec, sample, item)
        if kind == "text_similarity":
            value = similarity.score(spec["evaluation_metric"], templates.render(spec["input"], item, sample),
                                     templates.render(spec["reference"], item, sample))
            return Grade(value, value >= float(spec["pass_threshold"]))
        if kind == "python":
            result = await run_grader(spec["source"], sample, item)
            details = {"invalid": result.error} if result.error else {}
            return Grade(result.score, result.score >= _threshold(spec, 1.0), details)
        if kind == "score_model":
            return await _score_model(spec, sample, item, judges[spec["model"]])
        if kind == "label_model":
            return await _label_model(spec, sample, item, judges[spec["model"]])
    except templates.MissingValue as e:
        return _invalid(e)
    return await _multi(spec, sample, item, judges)


def _threshold(spec: Mapping[str, Any], default: float) -> float:
    value = spec.get("pass_threshold")
    return default if value is None else float(value)


def _string_check(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any]) -> Grade:
    text = templates.render(spec["input"], item, sample)
    ref = templates.render(spec["reference"], item, sample)
    op = spec["operation"]
    ok = {"eq": text == ref, "ne": text != ref, "like": ref in text, "ilike": ref.lower() in text.lower()}[op]
    return Grade(float(ok), ok)


def _judge_messages(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any]) -> list[dict[str, Any]]:
    """The grader's messages rendered; ``developer`` is sent as ``system``, which every chat server knows."""
    out = []
    for m in spec["input"]:
        role = "system" if m["role"] == "developer" else m["role"]
        out.append({"role": role, "content": templates.render(message_text(m.get("content"), "input"), item, sample)})
    return out


def _judge_params(spec: Mapping[str, Any], result_schema: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    given = spec.get("sampling_params") or {}
    for key in ("temperature", "top_p", "seed", "reasoning_effort"):
        if given.get(key) is not None:
            params[key] = given[key]
    limit = given.get("max_completions_tokens") or given.get("max_completion_tokens")
    if limit:
        params["max_tokens"] = int(limit)
    step = {"type": "object", "properties": {"description": {"type": "string"}, "conclusion": {"type": "string"}},
            "required": ["description", "conclusion"], "additionalProperties": False}
    schema = {"type": "object", "properties": {"steps": {"type": "array", "items": step}, "result": result_schema},
              "required": ["steps", "result"], "additionalProperties": False}
    params["response_format"] = {"type": "json_schema",
                                 "json_schema": {"name": "grade", "strict": True, "schema": schema}}
    return params


def _answer(reply: str) -> Any:
    """The judge's ``result``: from its JSON answer, else the whole reply as it is."""
    text = reply.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    if fenced:
        text = fenced.group(1)
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return parsed.get("result") if isinstance(parsed, dict) else parsed


async def _score_model(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any], judge: Judge) -> Grade:
    low, high = (float(v) for v in spec.get("range") or (0.0, 1.0))
    reply = await judge.ask(_judge_messages(spec, sample, item), _judge_params(spec, {"type": "number"}))
    result = _answer(reply)
    try:
        value = float(result) if not isinstance(result, bool) else None
    except (TypeError, ValueError):
        value = None
    details: dict[str, Any] = {"judge": reply[:2000]}
    if value is None or value != value:  # no number (or NaN): the guide's default of 0
        details["invalid"] = "the judge's answer has no numeric result"
        value = 0.0
    value = min(max(value, low), high)
    return Grade(value, value >= _threshold(spec, high), details)


async def _label_model(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any], judge: Judge) -> Grade:
    labels = list(spec["labels"])
    reply = await judge.ask(_judge_messages(spec, sample, item), _judge_params(spec, {"type": "string", "enum": labels}))
    label = _answer(reply)
    details: dict[str, Any] = {"judge": reply[:2000], "label": label if isinstance(label, str) else None}
    if label not in labels:
        details["invalid"] = "the judge's answer is none of the labels"
        return Grade(0.0, False, details)
    ok = label in spec["passing_labels"]
    return Grade(float(ok), ok, details)


async def _multi(spec: Mapping[str, Any], sample: dict[str, Any], item: dict[str, Any],
                 judges: Mapping[str, Judge]) -> Grade:
    parts = {key: await grade(sub, sample, item, judges) for key, sub in spec["graders"].items()}
    scores = {key: g.score for key, g in parts.items()}
    details: dict[str, Any] = {"graders": scores}
    invalid = {key: g.details["invalid"] for key, g in parts.items() if "invalid" in g.details}
    if invalid:
        details["invalid_graders"] = invalid
    calc = formula.parse(spec["calculate_output"], set(spec["graders"]), "calculate_output")
    try:
        value = calc.evaluate(scores)
    except (ArithmeticError, ValueError) as e:  # a division by zero, the log of 0: an invalid grade
        details["invalid"] = f"calculate_output: {type(e).__name__}: {e}"
        return Grade(0.0, False, details)
    if value != value or value in (float("inf"), float("-inf")):
        details["invalid"] = "calculate_output is not a finite number"
        return Grade(0.0, False, details)
    return Grade(value, value >= _threshold(spec, 1.0), details)


def judge_models(specs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The models the graders (and the graders inside multi graders) ask, in order, each once."""
    found: list[str] = []
    for spec in specs:
        inner = list(spec["graders"].values()) if spec["type"] == "multi" else [spec]
        for g in inner:
            if g["type"] in ("score_model", "label_model") and g["model"] not in found:
                found.append(g["model"])
    return found
