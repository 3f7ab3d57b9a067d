"""Constrained decoding on the embedded server, through the official ``openai`` client: ``response_format``
(``parse()`` with a pydantic model) and ``tool_choice`` (required, named, none) are enforced token by token,
at temperature 1.0, by the tiny model that cannot write valid JSON on its own. Streamed, n > 1, batched
with free requests, on the token route; a grammar that cannot compile is one 400 naming its field."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from .helpers import ARITH, SERVED, get_json, post_json

SEEDS = range(6)
WEATHER_Q = [{"role": "user", "content": "What is the weather in Paris?"}]


class Answer(BaseModel):
    """Every value bounded, so a valid reply always fits max_tokens."""

    model_config = ConfigDict(extra="forbid")
    answer: int = Field(ge=0, le=99)
    unit: Literal["apples", "pears"]
    note: str = Field(max_length=12)


class WeatherArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(max_length=12)


class AddArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int = Field(ge=0, le=999)
    b: int = Field(ge=0, le=999)


ARGS = {"get_weather": WeatherArgs, "add": AddArgs}


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def tools() -> list[Any]:
    import openai

    return [openai.pydantic_function_tool(WeatherArgs, name="get_weather"),
            openai.pydantic_function_tool(AddArgs, name="add")]


def _check_calls(message: Any, names: set[str]) -> list[tuple[str, Any]]:
    calls = message.tool_calls or []
    assert calls, message
    out = []
    for c in calls:
        assert c.function.name in names
        out.append((c.function.name, ARGS[c.function.name].model_validate_json(c.function.arguments)))
    return out


def test_parse_returns_a_parsed_object_every_time(client: Any, tok: Any) -> None:
    seen = set()
    for seed in SEEDS:
        r = client.chat.completions.parse(model=SERVED, messages=ARITH, response_format=Answer, temperature=1.0,
                                          seed=seed, max_tokens=80, logprobs=True,
                                          extra_body={"return_token_ids": True})
        c = r.choices[0]
        assert c.finish_reason == "stop" and isinstance(c.message.parsed, Answer), c
        seen.add(c.message.content)
        # The trace is what was sampled: the token ids are the reply, each with its logprob.
        ids = c.model_extra["token_ids"]
        assert tok.decode(ids, skip_special_tokens=True) == c.message.content
        assert len(c.logprobs.content) == len(ids) and ids[-1] == tok.eos_token_id
    assert len(seen) > 1  # sampled, not a fixed reply


def test_without_a_format_the_model_does_not_write_that_json(client: Any) -> None:
    """The baseline the constraint is measured against: the same calls, unconstrained."""
    valid = 0
    for seed in SEEDS:
        text = client.chat.completions.create(model=SERVED, messages=ARITH, temperature=1.0, seed=seed,
                                              max_tokens=80).choices[0].message.content
        try:
            Answer.model_validate_json(text)
            valid += 1
        except ValueError:
            pass
    assert valid < len(SEEDS)


def test_json_object_and_n_choices(client: Any) -> None:
    """Any JSON object: nothing bounds it, so this model's reply may run to max_tokens (finish "length",
    honestly); every reply that ends is an object."""
    r = client.chat.completions.create(model=SERVED, messages=ARITH, temperature=1.0, seed=4, n=12, max_tokens=300,
                                       response_format={"type": "json_object"})
    assert [c.index for c in r.choices] == list(range(12))
    for c in r.choices:
        assert c.message.content.startswith("{") and c.finish_reason in ("stop", "length")
        if c.finish_reason == "stop":
            assert isinstance(json.loads(c.message.content), dict)
    assert any(c.finish_reason == "stop" for c in r.choices)


def test_tool_choice_required_is_a_valid_call_every_time(client: Any, tools: list[Any], tok: Any) -> None:
    for seed in SEEDS:
        r = client.chat.completions.parse(model=SERVED, messages=WEATHER_Q, tools=tools, tool_choice="required",
                                          temperature=1.0, seed=seed, max_tokens=120,
                                          extra_body={"return_token_ids": True})
        c = r.choices[0]
        assert c.finish_reason == "tool_calls" and not c.message.content, c
        calls = _check_calls(c.message, set(ARGS))
        assert [type(t.function.parsed_arguments) for t in c.message.tool_calls] == [type(a) for _, a in calls]
        assert tok.convert_tokens_to_ids("<tool_call>") == c.model_extra["token_ids"][0]
    one = client.chat.completions.create(model=SERVED, messages=WEATHER_Q, tools=tools, tool_choice="required",
                                         parallel_tool_calls=False, temperature=1.0, seed=1, max_tokens=120)
    assert len(_check_calls(one.choices[0].message, set(ARGS))) == 1


def test_a_named_function_is_called_with_valid_arguments(client: Any, tools: list[Any]) -> None:
    for seed in SEEDS:
        r = client.chat.completions.create(model=SERVED, messages=WEATHER_Q, tools=tools, temperature=1.0,
                                           seed=seed, max_tokens=120,
                                           tool_choice={"type": "function", "function": {"name": "add"}})
        c = r.choices[0]
        assert c.finish_reason == "tool_calls"
        assert [name for name, _ in _check_calls(c.message, {"add"})] == ["add"]


def test_tool_choice_none_cannot_call(client: Any, tools: list[Any], tok: Any) -> None:
    opener = tok.convert_tokens_to_ids("<tool_call>")
    free_calls = 0
    for seed in SEEDS:
        kw = {"model": SERVED, "messages": WEATHER_Q, "tools": tools, "temperature": 1.0, "seed": seed,
              "max_tokens": 60, "extra_body": {"return_token_ids": True}}
        c = client.chat.completions.create(**kw, tool_choice="none").choices[0]
        assert not c.message.tool_calls and "<tool_call>" not in (c.message.content or "")
        assert opener not in c.model_extra["token_ids"] and c.finish_reason in ("stop", "length")
        free = client.chat.completions.create(**kw, tool_choice="auto").choices[0]
        free_calls += opener in free.model_extra["token_ids"]
    assert free_calls > 0  # left free, this model does open tool calls on this prompt


def test_streamed_constrained_replies_match_the_whole_ones(client: Any, tools: list[Any]) -> None:
    for kw in ({"response_format": {"type": "json_schema", "json_schema": {
                   "name": "answer", "schema": Answer.model_json_schema(), "strict": True}}},
               {"tools": tools, "tool_choice": "required"}):
        base = {"model": SERVED, "messages": ARITH if "response_format" in kw else WEATHER_Q, "temperature": 1.0,
                "seed": 3, "max_tokens": 120, **kw}
        whole = client.chat.completions.create(**base).choices[0]
        text, calls, finish = "", [], None
        for chunk in client.chat.completions.create(**base, stream=True):
            if chunk.choices:
                d = chunk.choices[0].delta
                text += d.content or ""
                calls += d.tool_calls or []
                finish = chunk.choices[0].finish_reason or finish
        assert finish == whole.finish_reason
        assert text == (whole.message.content or "")
        assert [(c.function.name, c.function.arguments) for c in calls] == \
            [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
        if "response_format" in kw:
            Answer.model_validate_json(text)
        else:
            assert "<tool_call>" not in text and calls


async def test_constrained_and_free_requests_share_batches(aclient: Any, server: str, tools: list[Any]) -> None:
    before = get_json(server + "/health")

    async def constrained(i: int) -> None:
        r = await aclient.chat.completions.parse(model=SERVED, messages=ARITH, response_format=Answer,
                                                 temperature=1.0, seed=100 + i, max_tokens=80)
        assert isinstance(r.choices[0].message.parsed, Answer)

    async def called(i: int) -> None:
        r = await aclient.chat.completions.create(model=SERVED, messages=WEATHER_Q, tools=tools, temperature=1.0,
                                                  tool_choice="required", seed=200 + i, max_tokens=120)
        _check_calls(r.choices[0].message, set(ARGS))

    async def free(i: int) -> None:
        r = await aclient.chat.completions.create(model=SERVED, messages=ARITH, temperature=1.0, seed=i,
                                                  max_tokens=40)
        assert r.choices[0].message.content is not None

    await asyncio.gather(*(f(i) for i in range(4) for f in (constrained, called, free)))
    after = get_json(server + "/health")
    assert after["sequences"] - before["sequences"] == 12
    assert after["batches"] - before["batches"] < 12


def test_the_token_route_and_completions_are_constrained_too(server: str, tok: Any) -> None:
    rendered = list(tok.apply_chat_template(ARITH, add_generation_prompt=True, tokenize=True, return_dict=False))
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": Answer.model_json_schema()}}
    status, r = post_json(server + "/v1/chat/completions/tokens", {
        "model": SERVED, "messages": ARITH, "tokens": rendered, "temperature": 1.0, "seed": 2, "max_tokens": 80,
        "response_format": fmt, "return_token_ids": True})
    assert status == 200 and r["prompt_token_ids"] == rendered
    Answer.model_validate_json(r["choices"][0]["message"]["content"])
    status, r = post_json(server + "/v1/completions", {"model": SERVED, "prompt": tok.decode(rendered),
                                                       "temperature": 1.0, "seed": 2, "max_tokens": 80,
                                                       "response_format": fmt})
    assert status == 200 and r["choices"][0]["finish_reason"] == "stop"
    Answer.model_validate_json(r["choices"][0]["text"])


def test_max_tokens_inside_the_grammar_ends_with_length(client: Any, tools: list[Any]) -> None:
    import openai

    r = client.chat.completions.create(model=SERVED, messages=WEATHER_Q, tools=tools, tool_choice="required",
                                       temperature=1.0, seed=0, max_tokens=5)
    c = r.choices[0]
    assert c.finish_reason == "length" and not c.message.tool_calls and c.message.content.startswith("<tool_call>")
    with pytest.raises(openai.LengthFinishReasonError):  # the SDK's own answer to a cut-off reply
        client.chat.completions.parse(model=SERVED, messages=ARITH, response_format=Answer, max_tokens=3)


BAD_CONSTRAINTS = [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
     "response_format.json_schema.schema", "nonsense"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "(unclosed"}}}}, "response_format.json_schema.schema", "regex"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema",
     "schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type", "json_schema"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/missing"}}}}}], "tool_choice": "required"}, "tools[0].function.parameters", "missing"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}], "tool_choice": "required"},
     "tools[0].function.name", "name"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice", "not in 'tools'"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "always"}, "tool_choice",
     "'required'"),
]


@pytest.mark.parametrize(("extra", "param", "phrase"), BAD_CONSTRAINTS, ids=[p for _, p, _ in BAD_CONSTRAINTS])
def test_a_constraint_that_cannot_compile_is_400_naming_it(client: Any, extra: dict[str, Any], param: str,
                                                           phrase: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=SERVED, messages=ARITH, max_tokens=4, extra_body=extra)
    assert (e.value.param, e.value.code, e.value.type) == (param, "invalid_value", "invalid_request_error")
    assert phrase in e.value.message and len(e.value.message.splitlines()) == 1


def test_logit_bias_forces_and_bans_a_token_on_the_server(client: Any, tok: Any) -> None:
    seven = tok("7", add_special_tokens=False)["input_ids"]
    assert len(seven) == 1
    forced = client.chat.completions.create(model=SERVED, messages=ARITH, temperature=1.0, seed=5, max_tokens=6,
                                            logit_bias={str(seven[0]): 100}, extra_body={"return_token_ids": True})
    assert forced.choices[0].model_extra["token_ids"] == seven * 6
    free = client.chat.completions.create(model=SERVED, messages=ARITH, temperature=0, max_tokens=6,
                                          extra_body={"return_token_ids": True})
    first = free.choices[0].model_extra["token_ids"][0]
    banned = client.chat.completions.create(model=SERVED, messages=ARITH, temperature=0, max_tokens=6,
                                            logit_bias={str(first): -100}, extra_body={"return_token_ids": True})
    assert first not in banned.choices[0].model_extra["token_ids"]


def test_penalties_change_what_is_sampled(client: Any) -> None:
    """Sampled with the same seeds, a positive presence or frequency penalty repeats tokens less and a
    negative one more; greedy, the frequency penalty breaks the run of end-of-turn tokens ignore_eos leaves."""
    msgs = [{"role": "user", "content": "Count to 9."}]

    def repeats(temperature: float, **penalty: float) -> int:
        total = 0
        for seed in range(5):
            ids = client.chat.completions.create(
                model=SERVED, messages=msgs, temperature=temperature, seed=seed, max_tokens=40,
                extra_body={"return_token_ids": True, "ignore_eos": True, **penalty}).choices[0].model_extra["token_ids"]
            total += len(ids) - len(set(ids))
        return total

    plain = repeats(1.0)
    assert repeats(1.0, presence_penalty=2.0) < plain and repeats(1.0, frequency_penalty=2.0) < plain
    assert repeats(1.0, presence_penalty=-2.0, frequency_penalty=-2.0) > plain
    assert repeats(0.0, frequency_penalty=2.0) < repeats(0.0)
