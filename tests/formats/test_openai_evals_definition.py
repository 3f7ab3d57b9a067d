"""How a run's data source becomes the tasks' prompts and sampling: templates, item references, the Responses
API's text format; and refusals that stay one line whatever the definition holds."""

from __future__ import annotations

from typing import Any

import pytest

from workbench.formats.openai_evals import definition as defs
from workbench.formats.openai_evals.environment import render_prompt, sampling_of, tasks_of
from workbench.formats.openai_evals.errors import EvalDefinitionError

ITEMS = [{"question": "2+2?", "answer": "4", "chat": [{"role": "developer", "content": "Be brief."},
                                                       {"role": "user", "content": [{"type": "input_text", "text": "2+2?"}]}]}]
EVAL = {"name": "math", "testing_criteria": [{"type": "string_check", "name": "right", "operation": "eq",
                                              "input": "{{ sample.output_text }}", "reference": "{{ item.answer }}"}]}


def run_obj(**source: Any) -> dict[str, Any]:
    return {"data_source": {"type": "completions", "model": "gpt-4.1", **source}}


def test_a_template_is_rendered_per_item_and_developer_is_sent_as_system() -> None:
    template = {"type": "template", "template": [
        {"role": "developer", "content": "Answer in digits."},
        {"type": "message", "role": "user", "content": {"type": "input_text", "text": "Q: {{item.question}}"}}]}
    defn = defs.load(EVAL, run_obj(input_messages=template), ITEMS)
    assert tasks_of(defn) == [{"prompt": [{"role": "system", "content": "Answer in digits."},
                                          {"role": "user", "content": "Q: 2+2?"}], "info": {"item": ITEMS[0]}}]
    assert defn.model == "gpt-4.1" and defn.name == "math"


def test_an_item_reference_takes_the_items_own_messages() -> None:
    defn = defs.load(EVAL, run_obj(input_messages={"type": "item_reference", "item_reference": "item.chat"}), ITEMS)
    assert render_prompt(defn, ITEMS[0]) == [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "2+2?"}]


def test_the_responses_text_format_is_the_response_format_and_fills_output_json() -> None:
    fmt = {"type": "json_schema", "name": "a", "schema": {"type": "object"}}
    grader = {**EVAL["testing_criteria"][0], "input": "{{ sample.output_json.value }}"}
    source = {"type": "responses", "sampling_params": {"text": {"format": fmt}, "max_completions_tokens": 99,
                                                        "temperature": 0.2, "seed": 7},
              "input_messages": {"type": "template", "template": [{"role": "user", "content": "{{ item.question }}"}]}}
    defn = defs.load({**EVAL, "testing_criteria": [grader]}, {"data_source": source}, ITEMS)
    s = sampling_of(defn)
    assert (s.max_tokens, s.temperature, s.seed, s.extra) == (99, 0.2, 7, {"response_format": fmt})


@pytest.mark.parametrize(("eval_obj", "run", "says"), [
    (EVAL, run_obj(input_messages={"type": "template", "template": [{"role": "user", "content": "{{ item.\nquestion }}"}]}),
     "namespace.variable"),
    ({**EVAL, "testing_criteria": [{**EVAL["testing_criteria"][0], "name": "a\nb"},
                                   {**EVAL["testing_criteria"][0], "name": "a\nb"}]},
     run_obj(input_messages={"type": "template", "template": [{"role": "user", "content": "x"}]}), "two graders"),
    (EVAL, run_obj(input_messages={"type": "item_reference", "item_reference": "item.nothing"}), "item_reference"),
    (EVAL, {"data_source": {"type": "jsonl"}}, "data_source.type"),
    (EVAL, run_obj(input_messages={"type": "template", "template": []}, sampling_params={"text": "plain"}), "template"),
    (EVAL, run_obj(input_messages={"type": "template", "template": [{"role": "tool", "content": "x"}]}), "role"),
    (EVAL, run_obj(input_messages={"type": "template", "template": [{"role": "user", "content": "x"}]},
                   sampling_params={"temperature": "hot"}), "temperature"),
])
def test_refusals_are_one_line(eval_obj: dict[str, Any], run: dict[str, Any], says: str) -> None:
    with pytest.raises(EvalDefinitionError) as e:
        defs.load(eval_obj, run, ITEMS)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_retrieved_evals_schema_checks_the_items() -> None:
    retrieved = {**EVAL, "data_source_config": {"type": "custom", "schema": {"type": "object", "properties": {
        "item": {"type": "object", "properties": {"answer": {"type": "integer"}}}, "sample": {"type": "object"}}}}}
    template = {"type": "template", "template": [{"role": "user", "content": "{{ item.question }}"}]}
    with pytest.raises(EvalDefinitionError, match="item 1: answer does not match"):
        defs.load(retrieved, run_obj(input_messages=template), ITEMS)


def test_an_item_schema_that_is_no_schema_is_named() -> None:
    broken = {**EVAL, "data_source_config": {"type": "custom", "item_schema": {"type": "banana"}}}
    template = {"type": "template", "template": [{"role": "user", "content": "{{ item.question }}"}]}
    with pytest.raises(EvalDefinitionError, match="data_source_config.item_schema: not a JSON schema"):
        defs.load(broken, run_obj(input_messages=template), ITEMS)
