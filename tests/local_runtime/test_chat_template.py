"""The chat template and the tool-call syntax, without a server: rendering, prefix stability, and
parsing rendered tool calls back into OpenAI ``tool_calls``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from workbench_local.models.chat_template import (
    TOOL_OPEN,
    ChatFormatError,
    forced_tool_prefix,
    held_back,
    normalize_messages,
    parse_tool_calls,
)

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_parse_single_and_multiple_calls() -> None:
    content, calls = parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>')
    assert content is None
    assert calls[0]["type"] == "function" and calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    text = 'Let me check. <tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"x": "y"}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me check."
    assert [c["function"]["name"] for c in calls] == ["a", "b"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"x": "y"}


def test_parse_unterminated_call_at_end_and_malformed_ones() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "a", "arguments": {"k": 1}}')
    assert calls and calls[0]["function"]["name"] == "a"
    for bad in ('<tool_call>{"name": "a", "arguments": {</tool_call>', "<tool_call>[1, 2]</tool_call>",
                '<tool_call>{"arguments": {}}</tool_call>', "no call here"):
        content, calls = parse_tool_calls(bad)
        assert calls == [] and content == bad


def test_template_renders_every_role_and_tools(tok: Any) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "snowy"},
        {"role": "assistant", "content": "It is snowy."},
    ]
    text = tok.apply_chat_template(normalize_messages(messages), tools=[WEATHER], tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.\nTools:\n")
    assert '"name": "get_weather"' in text and "<|im_start|>tool\nsnowy<|im_end|>" in text
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call><|im_end|>' in text
    plain = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_rendered_tool_call_parses_back(tok: Any) -> None:
    """A tool call rendered by the template is exactly what the server parses back."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Lima"}}}
    convo = [{"role": "user", "content": "Weather in Lima?"}]
    prompt = tok.apply_chat_template(convo, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    full = tok.apply_chat_template([*convo, {"role": "assistant", "content": None, "tool_calls": [call]}],
                                   tools=[WEATHER], tokenize=False)
    assert full.startswith(prompt)  # prefix-stable: multi-turn token traces extend each other
    reply = full[len(prompt):].removesuffix("<|im_end|>\n")
    content, calls = parse_tool_calls(reply)
    assert content is None
    assert calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Lima"}
    # and the tool-call markers are single tokens, kept when decoding
    ids = tok(reply, add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids(TOOL_OPEN) in ids
    assert tok.decode(ids, skip_special_tokens=True) == reply


def test_forced_prefix() -> None:
    assert forced_tool_prefix("auto", [WEATHER]) == ""
    assert forced_tool_prefix("required", [WEATHER]) == TOOL_OPEN
    named = forced_tool_prefix({"type": "function", "function": {"name": "get_weather"}}, [WEATHER])
    assert named == '<tool_call>{"name": "get_weather", "arguments":'
    with pytest.raises(ChatFormatError):
        forced_tool_prefix({"type": "function", "function": {"name": "nope"}}, [WEATHER])


def test_normalize_messages() -> None:
    out = normalize_messages([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    assert out[0]["content"] == "ab"
    with pytest.raises(ChatFormatError):
        normalize_messages([])
    with pytest.raises(ChatFormatError):
        normalize_messages([{"content": "x"}])
    with pytest.raises(ChatFormatError):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_held_back() -> None:
    assert held_back("hello wor", ["world"]) == 3
    assert held_back("hello world and more", ["world"]) == len(" and more") + len("world")
    assert held_back("abc", ["xyz"]) == 0
    assert held_back("ok <tool", [TOOL_OPEN]) == len("<tool")


CONVERSATIONS = [
    ([{"role": "user", "content": "hi"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3? ünïcode ✓"}], None),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": None, "tool_calls": [
          {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "snowy"}], [WEATHER]),
]


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("case", range(len(CONVERSATIONS)))
def test_the_fast_tokenizer_renders_and_decodes_exactly_as_transformers(tok: Any, tiny_dir: Path, case: int,
                                                                        gen: bool) -> None:
    """The token views load the tokenizer without transformers (milliseconds instead of seconds): the same
    template, the same tokens, the same text, or the re-render check would invent mismatches."""
    from workbench_local.models.fast_tokenizer import FastTokenizer

    fast = FastTokenizer(tiny_dir)
    messages, tools = CONVERSATIONS[case]
    msgs = normalize_messages(messages)
    want = list(tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=True,
                                        return_dict=False))
    got = fast.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=True, return_dict=False)
    assert got == want
    assert fast.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False) == \
        tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
    assert [fast.decode([t]) for t in want] == [tok.decode([t]) for t in want]
    assert fast.decode(want) == tok.decode(want)


def test_the_plugin_loads_the_fast_tokenizer_for_a_local_model_and_refuses_none(tiny_dir: Path,
                                                                                 tmp_path: Path) -> None:
    from workbench_local.models.fast_tokenizer import FastTokenizer, Unsupported
    from workbench_local.models.tokenizers import TOKENIZERS

    assert isinstance(TOKENIZERS.load(str(tiny_dir)), FastTokenizer)
    bare = tmp_path / "no-template"
    bare.mkdir()
    (bare / "tokenizer.json").write_text((tiny_dir / "tokenizer.json").read_text())
    with pytest.raises(Unsupported, match="no chat template"):
        FastTokenizer(bare)
