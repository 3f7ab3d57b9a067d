"""From the model's turn to an OpenEnv action, and from an observation to a message.

The action schema the server publishes decides how the model acts:

- **text**: the action has one text field that is all it needs (the only required field, or the only
  field, a string): the assistant's text is that field.
- **mcp**: the action is MCP's ``call_tool`` (an ``MCPEnvironment``): the environment's own MCP tools (its
  ``tools/list``) are the model's tools, and each call is one ``call_tool`` step.
- **tool**: any other action: the model calls the ``step`` tool, whose parameters are the action's schema
  (its base ``metadata`` field left out); each call is one step. A reply without a call whose text is a
  JSON object is taken as the action too.

An observation becomes the text of the next message: its one text field alone when it has only that,
else its fields as JSON (reward, done and metadata travel beside it in the protocol, never in the text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workbench.records.task import Message

#: The tool the model acts with when the action is not one text.
TOOL_NAME = "step"
#: Fields of openenv-core's base Action: the environment's own, never the model's.
BASE_FIELDS = ("metadata",)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*\})\s*```", re.DOTALL)


def _is_text(prop: Any) -> bool:
    if not isinstance(prop, dict):
        return False
    if prop.get("type") == "string":
        return True
    options = prop.get("anyOf") or ()
    kinds = {o.get("type") for o in options if isinstance(o, dict)}
    return bool(kinds) and kinds <= {"string", "null"} and "string" in kinds


@dataclass(frozen=True, slots=True)
class Move:
    """One action taken from the model's turn: ``action`` to send, or ``error`` to tell the model instead.
    ``call_id`` is the tool call's id (tool mode)."""

    action: dict[str, Any] | None
    error: str = ""
    call_id: str | None = None


class ActionMap:
    """How the model's turns become actions of one environment's action schema."""

    def __init__(self, schema: dict[str, Any], env_name: str = "", description: str = "") -> None:
        self.schema = schema
        props = schema.get("properties")
        self.fields = {k: v for k, v in (props if isinstance(props, dict) else {}).items() if k not in BASE_FIELDS}
        required = [r for r in schema.get("required") or () if r in self.fields]
        texts = [k for k, v in self.fields.items() if _is_text(v)]
        self.text_field: str | None = None
        self.mcp = {"tool_name", "arguments"} <= set(self.fields)
        if not self.mcp and len(required) == 1 and required[0] in texts:
            self.text_field = required[0]
        elif not self.mcp and not required and len(self.fields) == 1 and texts:
            self.text_field = texts[0]
        self.env_name, self.description = env_name, description

    @property
    def mode(self) -> str:
        return "mcp" if self.mcp else "text" if self.text_field else "tool"

    def tool(self) -> dict[str, Any]:
        """The ``step`` tool (OpenAI chat format) whose parameters are the action's schema."""
        params: dict[str, Any] = {"type": "object", "properties": self.fields,
                                  "required": [r for r in self.schema.get("required") or () if r in self.fields]}
        if self.schema.get("additionalProperties") is False:
            params["additionalProperties"] = False
        for key in ("$defs", "definitions"):
            if key in self.schema:
                params[key] = self.schema[key]
        what = self.schema.get("description") or self.schema.get("title") or "an action"
        desc = (f"Take one action in the environment{f' {self.env_name}' if self.env_name else ''}: {what}. "
                "The environment answers with what it observes.")
        return {"type": "function", "function": {"name": TOOL_NAME, "description": desc, "parameters": params}}

    def tools(self, mcp_tools: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]] | None:
        """The model's tools: none (text), ``step``, or an MCP environment's tools (``mcp_tools``, as its
        ``tools/list`` gives them) in the chat format."""
        if self.mcp:
            return [{"type": "function", "function": {
                "name": t["name"], "description": str(t.get("description") or ""),
                "parameters": t.get("inputSchema") or t.get("input_schema") or {"type": "object", "properties": {}}}}
                for t in mcp_tools] or None
        return None if self.text_field else [self.tool()]

    def instructions(self) -> str:
        """The system prompt's default: how this environment is played."""
        about = f"You are acting in the environment {self.env_name}." if self.env_name else "You are acting in an environment."
        if self.description and self.description != f"{self.env_name} environment":
            about += f" {self.description}"
        if self.mcp:
            return (f"{about} Act by calling its tools; each call is one action, and the environment answers "
                    "with what it observes, until the episode ends.")
        if self.text_field:
            return (f"{about} Each of your replies is your next action (its {self.text_field}); the environment "
                    "answers with what it observes, until the episode ends.")
        return (f"{about} Act by calling the {TOOL_NAME} tool; each call is one action, and the environment "
                "answers with what it observes, until the episode ends.")

    def moves(self, msg: Message, mcp_names: frozenset[str] = frozenset()) -> list[Move]:
        """The actions the assistant's message takes (none: it took no action); ``mcp_names``: the tools an
        MCP environment listed."""
        text = msg.get("content") if isinstance(msg.get("content"), str) else _content_text(msg.get("content"))
        if self.text_field:
            return [Move({self.text_field: text or ""})]
        calls = msg.get("tool_calls") or []
        if calls:
            return [self._from_call(c, mcp_names) for c in calls]
        found = None if self.mcp else _json_object(text or "")
        return [Move(found)] if found is not None else []

    def _from_call(self, call: dict[str, Any], mcp_names: frozenset[str]) -> Move:
        fn = call.get("function") or {}
        cid, name = call.get("id"), fn.get("name")
        if self.mcp and name not in mcp_names:
            return Move(None, f"unknown tool {name!r}; the tools are {', '.join(sorted(mcp_names)) or 'none'}", cid)
        if not self.mcp and name != TOOL_NAME:
            return Move(None, f"unknown tool {name!r}; act with the {TOOL_NAME} tool", cid)
        raw = fn.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) and raw.strip() else raw or {}
        except ValueError as e:
            return Move(None, f"the arguments are not valid JSON ({e})", cid)
        if not isinstance(args, dict):
            return Move(None, "the arguments must be a JSON object", cid)
        if self.mcp:
            return Move({"type": "call_tool", "tool_name": name, "arguments": args}, "", cid)
        return Move(args, "", cid)


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _json_object(text: str) -> dict[str, Any] | None:
    for candidate in (text.strip(), *(m.group(1) for m in _FENCED.finditer(text))):
        if candidate.startswith("{"):
            try:
                value = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def _mcp_text(observation: dict[str, Any]) -> str | None:
    """A ``call_tool`` observation's text (its result's text parts, or its error), or None for another one."""
    if set(observation) != {"tool_name", "result", "error"}:
        return None
    err = observation.get("error")
    if isinstance(err, dict) and err:
        return f"Error ({err.get('error_type') or 'error'}): {err.get('message') or ''}".strip()
    result = observation.get("result")
    if isinstance(result, dict):
        parts = [p.get("text") for p in result.get("content") or () if isinstance(p, dict) and p.get("type") == "text"]
        text = "\n".join(str(p) for p in parts if p is not None)
        if not text:
            data = result.get("structured_content") or result.get("data")
            text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
        return f"Error: {text}" if result.get("is_error") or result.get("isError") else text
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)


def render(observation: dict[str, Any]) -> str:
    """An observation's text: its one text field alone, a tool call's result, else its fields as JSON."""
    mcp = _mcp_text(observation)
    if mcp is not None:
        return mcp
    if len(observation) == 1:
        (only,) = observation.values()
        if isinstance(only, str):
            return only
    if not observation:
        return "(the environment observed nothing)"
    return json.dumps(observation, ensure_ascii=False, default=str)
