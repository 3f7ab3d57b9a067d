"""Chat rendering for the embedded server: the tiny model's template, message normalisation and
the tool-call syntax (``<tool_call>{"name": ..., "arguments": ...}</tool_call>``) parsed back
into OpenAI ``tool_calls``.

The tool-call syntax is the Hermes/Qwen one, so the parser also reads the output of most open
chat models whose templates render tool calls that way.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"

#: ChatML with a tools block. Rendering is prefix-stable: the prompt of turn N (with the generation
#: prompt) is a prefix of the full rendering of turn N plus the assistant's reply. What the assistant
#: writes (its content, its tool calls and its ``<|im_end|>``) is inside ``{% generation %}`` markers, so
#: ``apply_chat_template(..., return_assistant_tokens_mask=True)`` (TRL's ``assistant_only_loss``) finds
#: it; the markers render nothing themselves.
TINY_CHAT_TEMPLATE = (
    "{%- macro body(m) -%}"
    "{%- if m.content is string -%}{{- m.content -}}{%- endif -%}"
    "{%- if m.tool_calls -%}"
    "{%- for tc in m.tool_calls -%}"
    "{%- set f = tc.function if tc.function is defined else tc -%}"
    "{{- '<tool_call>{\"name\": ' + (f.name | tojson) + ', \"arguments\": ' -}}"
    "{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}{%- endif -%}"
    "{{- '}</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endmacro -%}"
    "{%- set ns = namespace(sys=none) -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{%- set ns.sys = messages[0].content if messages[0].content is string else '' -%}"
    "{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if ns.sys -%}{{- ns.sys + '\\n' -}}{%- endif -%}"
    "{{- 'Tools:\\n' -}}"
    "{%- for t in tools -%}{{- (t.function if t.function is defined else t) | tojson -}}{{- '\\n' -}}{%- endfor -%}"
    "{{- 'To call a tool reply <tool_call>{\"name\": NAME, \"arguments\": ARGS}</tool_call><|im_end|>\\n' -}}"
    "{%- elif ns.sys is not none -%}"
    "{{- '<|im_start|>system\\n' + ns.sys + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for m in messages -%}"
    "{%- if not (loop.first and m.role == 'system') -%}"
    "{{- '<|im_start|>' + m.role + '\\n' -}}"
    "{%- if m.role == 'assistant' -%}"
    "{%- generation -%}{{- body(m) -}}{%- endgeneration -%}"
    "{%- else -%}"
    "{{- body(m) -}}"
    "{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

NO_TEMPLATE_HINT = (
    "pass --chat-template FILE (a Jinja chat template, e.g. copied from the model's instruct variant), "
    "use a chat/instruct model, or call /v1/completions with a raw prompt instead"
)


class ChatFormatError(ValueError):
    """The request's messages or tools cannot be rendered."""


def _text_of(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
                parts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ChatFormatError(f"content part of type {kind!r} is not supported (text only)")
        return "".join(parts)
    raise ChatFormatError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def normalize_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI messages as a chat template expects them: text content, tool-call arguments as dicts."""
    if not isinstance(messages, list) or not messages:
        raise ChatFormatError("'messages' must be a non-empty list")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ChatFormatError(f"messages[{i}] must be an object with a 'role'")
        msg = dict(m)
        msg["content"] = _text_of(m.get("content"))
        calls = m.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise ChatFormatError(f"messages[{i}].tool_calls must be a list")
            fixed = []
            for tc in calls:
                fn = dict((tc or {}).get("function") or {})
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        fn["arguments"] = json.loads(args) if args.strip() else {}
                    except json.JSONDecodeError:
                        pass  # kept as the raw string; the template writes it verbatim
                fixed.append({**tc, "function": fn})
            msg["tool_calls"] = fixed
        out.append(msg)
    return out


def forced_tool_prefix(tool_choice: Any, tools: list[dict[str, Any]] | None) -> str:
    """Text to prefill after the generation prompt so the model must call a tool, or '' (for a server
    reached without a grammar, as cloud_runtime/vllm_tokens.py reaches vLLM's completions; the embedded
    server enforces tool_choice with a grammar instead: local_runtime/server/constraints.py)."""
    if not tools or tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice == "required":
        return TOOL_OPEN
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise ChatFormatError("tool_choice must name a function: {'type': 'function', 'function': {'name': ...}}")
        known = {(t.get("function") or t).get("name") for t in tools if isinstance(t, dict)}
        if name not in known:
            raise ChatFormatError(f"tool_choice names {name!r}, which is not in 'tools'")
        return TOOL_OPEN + '{"name": ' + json.dumps(name) + ', "arguments":'
    raise ChatFormatError("tool_choice must be 'none', 'auto', 'required' or a named function")


_CALL_RE = re.compile(re.escape(TOOL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CLOSE) + r"|$)", re.DOTALL)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated text into (content, OpenAI tool_calls). Text with no well-formed call is
    returned unchanged as content and no calls."""
    if TOOL_OPEN not in text:
        return text, []
    calls: list[dict[str, Any]] = []
    for match in _CALL_RE.finditer(text):
        body = match.group(1).strip()
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return text, []
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return text, []
        args = obj.get("arguments", obj.get("parameters", {}))
        calls.append({
            "id": "call_" + secrets.token_hex(12),
            "type": "function",
            "function": {"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
        })
    content = _CALL_RE.sub("", text).strip()
    return (content or None), calls


def held_back(text: str, markers: list[str]) -> int:
    """How many characters at the end of ``text`` a stream must hold back: those from the first
    complete marker on, or a trailing partial marker that the next token may complete."""
    keep = len(text)
    for mk in markers:
        if not mk:
            continue
        pos = text.find(mk)
        if pos >= 0:
            keep = min(keep, pos)
            continue
        for k in range(min(len(mk) - 1, len(text)), 0, -1):
            if text.endswith(mk[:k]):
                keep = min(keep, len(text) - k)
                break
    return len(text) - keep
