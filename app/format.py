"""The app's formatting: the shared helpers (``workbench.format``) and the app's own colours and wording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text
from textual.content import Content

from workbench.format import clip, esc, fcost, fnum, fpath, ftime, has_control, safe_text, visible

ROLE_COLORS = {"system": "magenta", "user": "dodger_blue1", "assistant": "green", "tool": "yellow"}

#: What the app calls the fields a :class:`~workbench.errors.FieldError` names, where its word is not the
#: field's own name (``{settings}`` is the settings file, where the app reads its endpoint). A screen's own
#: labels (its form's fields) come first.
APP_LABELS = {
    "EvalOptions.base_url": "base_url in {settings}",
    "EvalOptions.model": "model in {settings}",
    "EvalOptions.api_key": "the API key",
    "Store.db": "store (workbench --db PATH)",
    "create_env.directory": "the folder",
    "LaunchPlan.max_steps": "max steps",
    "LaunchPlan.budget": "the budget",
}


def for_app(error: BaseException | str, labels: Mapping[str, str] | None = None) -> str:
    """``error``'s line as the app says it: each field a :class:`~workbench.errors.FieldError` names by
    ``labels`` (field → the label of the form at hand), else by :data:`APP_LABELS`, else by its own name."""
    from workbench.config.settings import settings_path
    from workbench.errors import field_name, named

    if isinstance(error, str):
        return error
    words = {**APP_LABELS, **(labels or {})}
    settings = fpath(settings_path())
    return named(error, lambda f: words.get(f, field_name(f)).replace("{settings}", settings))


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


__all__ = ["APP_LABELS", "ROLE_COLORS", "cell", "clip", "esc", "fcost", "fnum", "for_app", "fpath", "ftime", "safe_text", "title",
           "visible"]
