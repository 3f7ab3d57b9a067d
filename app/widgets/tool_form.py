"""A tool call as a form: pick one of the tools offered, fill one input per argument of its JSON schema.

Each property of the tool's ``parameters`` schema becomes one field, typed by its schema: an ``enum`` or a
``boolean`` is a select, an integer, number or string an input (typed as text, so that a wrong value is
reported by the schema check rather than silently refused), anything else (objects, arrays) JSON text.
Required fields are marked ``*``. :meth:`ToolForm.arguments` reads the values as the schema's types where they
parse; :meth:`ToolForm.show_error` puts a :class:`~workbench.rollouts.human.ReplyError` under the field it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Input, Select, Static

from workbench.rollouts.human import ReplyError, tool_schemas

_UNSET = object()


@dataclass(slots=True)
class Field:
    name: str
    kind: str  # integer | number | string | boolean | enum | json
    required: bool
    description: str
    choices: list[Any]  # the enum's values, or [True, False] for a boolean


def schema_type(prop: dict[str, Any]) -> str:
    """The one JSON type a property takes (the first that is not null), or "json" where it says none."""
    t = prop.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), None)
    return t if isinstance(t, str) else "json"


def fields_of(schema: dict[str, Any]) -> list[Field]:
    """One field per property of a tool's parameters schema, in the schema's order."""
    required = set(schema.get("required") or ())
    out = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        t = schema_type(prop)
        if isinstance(prop.get("enum"), list) and prop["enum"]:
            kind, choices = "enum", list(prop["enum"])
        elif t == "boolean":
            kind, choices = "boolean", [True, False]
        elif t in ("integer", "number", "string"):
            kind, choices = t, []
        else:
            kind, choices = "json", []
        out.append(Field(name, kind, name in required, str(prop.get("description") or ""), choices))
    return out


def parse_value(field: Field, raw: str) -> Any:
    """The value of a text field as its schema's type; a value that does not parse stays the text written, so
    the schema check names it. ``_UNSET`` for an empty field (the argument is left out, or refused when it is
    required: :meth:`ToolForm.arguments` says so)."""
    if raw == "" and field.kind != "string":
        return _UNSET
    if field.kind == "string":
        return _UNSET if raw == "" else raw
    if field.kind == "integer":
        try:
            return int(raw.strip())
        except ValueError:
            return raw
    if field.kind == "number":
        for convert in (int, float):
            try:
                return convert(raw.strip())
            except ValueError:
                pass
        return raw
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ReplyError(f"{field.name}: not JSON ({e})", field.name) from None


def _label(field: Field) -> Text:
    t = Text(field.name, style="bold")
    if field.required:
        t.append(" *", style="bold red")
    t.append(f"  {field.kind if field.kind != 'json' else 'JSON'}", style="dim")
    if field.description:
        t.append(f"  {field.description}", style="dim italic")
    return t


class ToolForm(Widget):
    """The tools offered this turn, and the argument form of the one chosen (none chosen: a text reply)."""

    DEFAULT_CSS = """
    ToolForm { height: auto; }
    ToolForm #tool-select { width: 1fr; }
    ToolForm #tool-args { height: auto; }
    ToolForm .arg-label { height: auto; padding: 0 1; }
    ToolForm .arg-input { width: 1fr; }
    ToolForm .arg-error { height: auto; color: $error; padding: 0 1; display: none; }
    ToolForm .arg-error.-shown { display: block; }
    ToolForm #tool-error { height: auto; color: $error; padding: 0 1; display: none; }
    ToolForm #tool-error.-shown { display: block; }
    ToolForm #tool-none { height: auto; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's name for it
        super().__init__(id=id)
        self.schemas: dict[str, dict[str, Any]] = {}
        self.fields: list[Field] = []
        self._generation = 0  # each form gets new widget ids: removed ones may not be gone yet

    def compose(self) -> ComposeResult:
        yield Select[str]([], prompt="tool call (none: a text reply)", id="tool-select", allow_blank=True)
        yield Static("", id="tool-none")
        yield Vertical(id="tool-args")
        yield Static("", id="tool-error")

    def on_mount(self) -> None:
        self._show_none()

    # -- the tools ------------------------------------------------------------------------------
    def set_tools(self, tools: list[dict[str, Any]] | None) -> None:
        """The tools offered at this turn; the form is cleared (no tool chosen)."""
        schemas = tool_schemas(tools)
        select = self.query_one("#tool-select", Select)
        if schemas != self.schemas:
            self.schemas = schemas
            with select.prevent(Select.Changed):
                select.set_options([(n, n) for n in schemas])
        self.clear()

    @property
    def tool(self) -> str | None:
        """The tool chosen, or None (the reply is text)."""
        value = self.query_one("#tool-select", Select).value
        return value if isinstance(value, str) else None

    def choose(self, name: str | None) -> None:
        select = self.query_one("#tool-select", Select)
        if name is None:
            select.clear()
        else:
            select.value = name
        self._build(name)

    def clear(self) -> None:
        select = self.query_one("#tool-select", Select)
        with select.prevent(Select.Changed):
            select.clear()
        self._build(None)

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "tool-select":
            event.stop()
            self._build(self.tool)

    def _show_none(self) -> None:
        none = self.query_one("#tool-none", Static)
        none.display = self.tool is None
        none.update("no tools offered this turn" if not self.schemas else
                    f"{len(self.schemas)} tools offered: {', '.join(self.schemas)}")

    def _build(self, name: str | None) -> None:
        box = self.query_one("#tool-args", Vertical)
        box.remove_children()
        self._generation += 1
        self.fields = fields_of(self.schemas[name]) if name in self.schemas else []
        widgets: list[Widget] = []
        for i, f in enumerate(self.fields):
            widgets.append(Static(_label(f), classes="arg-label"))
            wid = self._field_id(i)
            if f.kind in ("enum", "boolean"):
                options = [(orjson.dumps(v).decode() if not isinstance(v, str) else v, i_v)
                           for i_v, v in enumerate(f.choices)]
                widgets.append(Select[int](options, prompt="(choose)" if f.required else "(leave out)",
                                           id=wid, classes="arg-input", allow_blank=True))
            else:
                widgets.append(Input("", placeholder=f.kind if f.kind != "json" else "JSON value", id=wid,
                                     classes="arg-input"))
            widgets.append(Static("", id=f"{wid}-error", classes="arg-error"))
        if widgets:
            box.mount_all(widgets)
        self.clear_errors()
        self._show_none()

    def _field_id(self, i: int) -> str:
        return f"arg-{self._generation}-{i}"

    def field_widget(self, name: str) -> Input | Select[int] | None:
        """The input of argument ``name`` of the tool chosen."""
        for i, f in enumerate(self.fields):
            if f.name == name:
                w = self.query_one(f"#{self._field_id(i)}")
                return w if isinstance(w, Input | Select) else None
        return None

    def set_value(self, name: str, value: str) -> None:
        """Write ``value`` into the text field ``name`` (as typing it would)."""
        w = self.field_widget(name)
        if isinstance(w, Input):
            w.value = value

    # -- reading and errors ---------------------------------------------------------------------
    def arguments(self) -> dict[str, Any]:
        """The arguments as written; a ReplyError naming the first required field left empty, or the field
        whose JSON text does not parse (checked before anything is sent)."""
        out: dict[str, Any] = {}
        for i, f in enumerate(self.fields):
            w = self.query_one(f"#{self._field_id(i)}")
            if isinstance(w, Select):
                value = f.choices[w.value] if isinstance(w.value, int) else _UNSET
            else:
                assert isinstance(w, Input)
                value = parse_value(f, w.value)
            if value is not _UNSET:
                out[f.name] = value
            elif f.required:
                raise ReplyError(f"{f.name} is required: {'choose' if isinstance(w, Select) else 'fill in'} "
                                 "a value", f.name)
        return out

    def clear_errors(self) -> None:
        for w in self.query(".arg-error"):
            w.remove_class("-shown")
        for w in self.query(".arg-input"):
            w.remove_class("-invalid")
        self.query_one("#tool-error", Static).remove_class("-shown")

    def show_error(self, message: str, field: str | None) -> None:
        """``message`` under argument ``field`` (focused), or under the form when it names none of them."""
        self.clear_errors()
        names = [f.name for f in self.fields]
        if field in names:
            i = names.index(field)
            wid = self._field_id(i)
            err = self.query_one(f"#{wid}-error", Static)
            err.update(message)
            err.add_class("-shown")
            w = self.query_one(f"#{wid}")
            w.add_class("-invalid")
            w.focus()
            return
        err = self.query_one("#tool-error", Static)
        err.update(message)
        err.add_class("-shown")

    def field_error(self, name: str) -> str:
        """The error shown under argument ``name`` ("" where none is)."""
        for i, f in enumerate(self.fields):
            if f.name == name:
                err = self.query_one(f"#{self._field_id(i)}-error", Static)
                return str(err.render()) if err.has_class("-shown") else ""
        return ""
