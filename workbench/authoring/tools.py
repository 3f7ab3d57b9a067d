"""Turn plain Python functions into OpenAI tool schemas and call them with injected arguments."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from workbench.errors import EnvLoadError

#: Parameters a tool may declare that are injected by the harness and never shown to the model.
INJECTED = frozenset({"sandbox", "state", "task", "info", "mcp"})

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_type(tp: Any) -> dict[str, Any]:
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    origin = get_origin(tp)
    if origin is Literal:
        vals = list(get_args(tp))
        schema: dict[str, Any] = {"enum": vals}
        if all(isinstance(v, str) for v in vals):
            schema["type"] = "string"
        elif all(isinstance(v, int) for v in vals):
            schema["type"] = "integer"
        return schema
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _json_type(args[0])
        return {"anyOf": [_json_type(a) for a in args]}
    if origin in (list, tuple, set, frozenset) or tp in (list, tuple):
        items = get_args(tp)
        out: dict[str, Any] = {"type": "array"}
        if items and items[0] is not Ellipsis:
            out["items"] = _json_type(items[0])
        return out
    if origin is dict or tp is dict:
        return {"type": "object"}
    if tp in _SIMPLE:
        return {"type": _SIMPLE[tp]}
    return {}


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a docstring into its description and per-argument descriptions (Google or Sphinx style)."""
    if not doc:
        return "", {}
    doc = inspect.cleandoc(doc)
    params: dict[str, str] = {}
    desc_lines: list[str] = []
    section = None
    current = None
    for line in doc.splitlines():
        stripped = line.strip()
        m = re.match(r":param\s+(?:\w+\s+)?(\w+):\s*(.*)", stripped)
        if m:
            params[m.group(1)] = m.group(2)
            current, section = m.group(1), "sphinx"
            continue
        if re.match(r"^(Args|Arguments|Parameters):\s*$", stripped):
            section, current = "args", None
            continue
        if re.match(r"^(Returns|Raises|Yields|Examples?|Notes?):\s*$", stripped):
            section, current = "other", None
            continue
        if section == "args":
            m = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m:
                current = m.group(1)
                params[current] = m.group(2)
            elif current and stripped:
                params[current] += " " + stripped
            continue
        if section is None:
            desc_lines.append(line)
    description = "\n".join(desc_lines).strip()
    return description, params


@dataclass(slots=True)
class Tool:
    """A Python function the model can call."""

    name: str
    fn: Callable[..., Any]
    description: str
    parameters: dict[str, Any]
    injected: tuple[str, ...]
    is_async: bool

    @classmethod
    def from_function(cls, fn: Callable[..., Any] | Tool, name: str | None = None) -> Tool:
        if isinstance(fn, Tool):
            return fn
        tname = name or getattr(fn, "__name__", None)
        if not tname or not callable(fn):
            raise EnvLoadError(f"tool {fn!r} is not a named function")
        try:
            sig = inspect.signature(fn)
            hints = typing.get_type_hints(fn)
        except Exception as e:
            raise EnvLoadError(f"tool {tname!r}: cannot read its signature ({e})") from None
        description, docs = _parse_docstring(fn.__doc__)
        props: dict[str, Any] = {}
        required: list[str] = []
        injected: list[str] = []
        for p in sig.parameters.values():
            if p.name in INJECTED:
                injected.append(p.name)
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            schema = _json_type(hints.get(p.name, p.annotation))
            if p.name in docs:
                schema["description"] = docs[p.name]
            if p.default is not p.empty:
                if p.default is None or isinstance(p.default, str | int | float | bool):
                    schema["default"] = p.default
            else:
                required.append(p.name)
            props[p.name] = schema
        params = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        return cls(tname, fn, description or tname, params, tuple(injected), inspect.iscoroutinefunction(fn))

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    async def call(self, arguments: dict[str, Any], injected: dict[str, Any]) -> Any:
        kwargs = dict(arguments)
        for k in self.injected:
            kwargs[k] = injected.get(k)
        result = self.fn(**kwargs)
        if self.is_async or inspect.isawaitable(result):
            result = await result
        return result
