"""The app's formatting: the shared helpers (``workbench.format``) and the app's own colours and wording."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.content import Content

from workbench.format import clip, esc, fcost, fnum, fpath, ftime, has_control, safe_text, visible

ROLE_COLORS = {"system": "magenta", "user": "dodger_blue1", "assistant": "green", "tool": "yellow"}

#: The CLI's advice, as the app gives it (the workbench errors are written for the command line).
#: (pattern, replacement); ``{settings}`` is the settings file, where the app reads base_url and model.
_FOR_APP: list[tuple[str, str]] = [
    (r"--task (\d+) is out of range", r"task \1 is out of range"),
    (r"[.;,]? ?[Pp]ick another name or --dir", ". Pick another name"),
    (r"--dir takes a folder", "pick a folder"),
    (r"choose a writable --dir", "choose a writable folder"),
    (r"check --base-url and", "check base_url in {settings} and"),
    (r"--base-url needs a model name too: pass -m MODEL", "base_url needs a model name too: set model in {settings}"),
    (r"no --base-url given", "no base_url set"),
    (r"or pass --base-url URL -m MODEL", "or set base_url and model in {settings}"),
    (r"--base-url ('[^']*')", r"base_url \1"),
    (r"\(--max-steps (\d+)\)", r"(max steps \1)"),
    (r"raise --budget", "raise the budget"),
    (r"or pass another --db", "or open the app on another store (workbench --db PATH)"),
    (r"pass another --db", "open the app on another store (workbench --db PATH)"),
    (r"pass the --db of an existing store", "open the app on an existing store (workbench --db PATH)"),
    (r"--base-url", "base_url"),  # whatever else names the flags: the settings the app reads instead
    (r"--task\b", "task"),  # the Debugger's task # field
]


def for_app(error: BaseException | str, labels: Mapping[str, str] | None = None) -> str:
    """``error``'s line as the app says it: each field a :class:`~workbench.errors.FieldError` names by
    ``labels`` (field → the label of the form at hand; ``{settings}`` in one is the settings file), else by
    its own name; the rest of the CLI's flag advice said the app's way."""
    from workbench.config.settings import settings_path
    from workbench.errors import field_name, named

    settings = fpath(settings_path())
    given = dict(labels or {})
    message = error if isinstance(error, str) else \
        named(error, lambda f: given.get(f, field_name(f)).replace("{settings}", settings))
    for pattern, replacement in _FOR_APP:
        message = re.sub(pattern, replacement.replace("{settings}", settings), message)
    return message


def cell(value: Any) -> Any:
    """A table cell from data, shown as text: a ``str`` never parsed as markup, control characters visible
    (a ``Text`` built by the app keeps its styles unless its text holds a control character)."""
    if isinstance(value, str):  # a plain one stays a str (what DataTable.get_row returns): it has nothing to parse
        return safe_text(value) if "[" in value or visible(value) != value else value
    if isinstance(value, Text) and has_control(value.plain):
        return Text(visible(value.plain), style=value.style)
    return value


def title(value: Any) -> Content:
    """A border title or label from data: plain text (Textual parses a ``str`` title as markup)."""
    return Content(visible(value))


__all__ = ["ROLE_COLORS", "cell", "clip", "esc", "fcost", "fnum", "for_app", "fpath", "ftime", "safe_text", "title",
           "visible"]
