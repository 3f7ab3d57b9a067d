"""How an OpenEnv action schema decides the model's way of acting, how its turns become actions, and how an
observation becomes a message (schemas as openenv-core 0.3.0's ``GET /schema`` publishes them)."""

from __future__ import annotations

from typing import Any

import pytest

from workbench.formats.openenv.actions import ActionMap, Move, render

METADATA = {"metadata": {"type": "object", "additionalProperties": True, "title": "Metadata"}}


def schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"title": "SomeAction", "type": "object", "additionalProperties": False,
            "properties": {**METADATA, **props}, "required": required}


TEXT = {"type": "string"}
OPTIONAL_TEXT = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
NUMBER = {"type": "integer"}


@pytest.mark.parametrize(("props", "required", "text_field"), [
    ({"message": TEXT}, ["message"], "message"),                       # echo: one required text
    ({"message": OPTIONAL_TEXT}, [], "message"),                       # the only field, an optional text
    ({"code": TEXT, "timeout": NUMBER}, ["code"], "code"),             # one required text, the rest optional
    ({"guess": NUMBER, "reason": OPTIONAL_TEXT}, ["guess"], None),     # a number: a tool
    ({"a": TEXT, "b": TEXT}, ["a", "b"], None),                        # two texts: a tool
    ({"a": TEXT, "b": TEXT}, [], None),                                # two optional texts: a tool
    ({}, [], None),                                                    # nothing but metadata: a tool
])
def test_the_schema_decides_text_or_tool(props: dict[str, Any], required: list[str], text_field: str | None) -> None:
    actions = ActionMap(schema(props, required), "env")
    assert actions.text_field == text_field
    if text_field is None:
        (tool,) = actions.tools() or []
        params = tool["function"]["parameters"]
        assert tool["function"]["name"] == "step"
        assert "metadata" not in params["properties"] and set(params["properties"]) == set(props)
        assert params["required"] == required
    else:
        assert actions.tools() is None


def call(args: Any, name: str = "step", cid: str = "c1") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


GUESS = ActionMap(schema({"guess": NUMBER, "reason": OPTIONAL_TEXT}, ["guess"]), "guess")


@pytest.mark.parametrize(("msg", "moves"), [
    ({"role": "assistant", "content": None, "tool_calls": [call('{"guess": 4}')]}, [Move({"guess": 4}, "", "c1")]),
    ({"role": "assistant", "content": None, "tool_calls": [call('{"guess": 4}'), call('{"guess": 5}', cid="c2")]},
     [Move({"guess": 4}, "", "c1"), Move({"guess": 5}, "", "c2")]),
    ({"role": "assistant", "content": None, "tool_calls": [call("{guess")]},
     [Move(None, "the arguments are not valid JSON (Expecting property name enclosed in double quotes: "
                 "line 1 column 2 (char 1))", "c1")]),
    ({"role": "assistant", "content": None, "tool_calls": [call("[1]")]},
     [Move(None, "the arguments must be a JSON object", "c1")]),
    ({"role": "assistant", "content": None, "tool_calls": [call("{}", name="guess")]},
     [Move(None, "unknown tool 'guess'; act with the step tool", "c1")]),
    ({"role": "assistant", "content": '{"guess": 7}'}, [Move({"guess": 7})]),
    ({"role": "assistant", "content": 'My move:\n```json\n{"guess": 2}\n```'}, [Move({"guess": 2})]),
    ({"role": "assistant", "content": "I give up."}, []),
])
def test_a_tool_environment_takes_each_call_as_a_step(msg: dict[str, Any], moves: list[Move]) -> None:
    assert GUESS.moves(msg) == moves


def test_a_text_environment_takes_the_assistants_text() -> None:
    echo = ActionMap(schema({"message": TEXT}, ["message"]), "echo")
    assert echo.moves({"role": "assistant", "content": "hello"}) == [Move({"message": "hello"})]
    assert echo.moves({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) \
        == [Move({"message": "ab"})]


@pytest.mark.parametrize(("observation", "text"), [
    ({"echoed": "hi"}, "hi"),
    ({"hint": "higher", "attempts": 2}, '{"hint": "higher", "attempts": 2}'),
    ({"board": [[0, 1], [1, 0]]}, '{"board": [[0, 1], [1, 0]]}'),
    ({}, "(the environment observed nothing)"),
])
def test_an_observation_becomes_a_message(observation: dict[str, Any], text: str) -> None:
    assert render(observation) == text


#: openenv-core's ``CallToolAction``: the action of an MCP environment.
CALL_TOOL = schema({"type": {"const": "call_tool", "default": "call_tool", "type": "string"}, "tool_name": TEXT,
                    "arguments": {"type": "object", "additionalProperties": True}}, ["tool_name"])


def test_an_mcp_environment_is_played_with_its_own_tools() -> None:
    actions = ActionMap(CALL_TOOL, "sum")
    assert actions.mode == "mcp"
    listed = [{"name": "add", "description": "Add.", "inputSchema": {"type": "object", "properties": {"a": NUMBER}}}]
    assert actions.tools(listed) == [{"type": "function", "function": {
        "name": "add", "description": "Add.", "parameters": {"type": "object", "properties": {"a": NUMBER}}}}]
    names = frozenset({"add"})
    msg = {"role": "assistant", "content": None, "tool_calls": [call('{"a": 1}', name="add"), call("", "nope", "c2")]}
    assert actions.moves(msg, names) == [
        Move({"type": "call_tool", "tool_name": "add", "arguments": {"a": 1}}, "", "c1"),
        Move(None, "unknown tool 'nope'; the tools are add", "c2")]
    assert actions.moves({"role": "assistant", "content": '{"tool_name": "add"}'}, names) == []


@pytest.mark.parametrize(("observation", "text"), [
    ({"tool_name": "add", "result": {"content": [{"type": "text", "text": "5"}], "is_error": False}, "error": None},
     "5"),
    ({"tool_name": "add", "result": {"content": [], "structured_content": {"result": 5}}, "error": None},
     '{"result": 5}'),
    ({"tool_name": "add", "result": {"content": [{"type": "text", "text": "bad a"}], "is_error": True},
      "error": None}, "Error: bad a"),
    ({"tool_name": "add", "result": None, "error": {"error_type": "timeout", "message": "too slow"}},
     "Error (timeout): too slow"),
    ({"tool_name": "", "result": "What is 2 + 3?", "error": None}, "What is 2 + 3?"),
])
def test_a_tool_calls_observation_is_its_result(observation: dict[str, Any], text: str) -> None:
    assert render(observation) == text
