"""``?``: Workbench's own keys, grouped: the current screen's (its widgets' included), then the ones every
screen has. Textual's internal bindings (focus moves, copy, a table's cursor keys) are left out, and so
are widget names: a key is listed with what it does."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Static
from workbench_app.screens.dialog import Dialog
from workbench_app.widgets.footer import is_own
from workbench_app.widgets.tables import RowTable

#: The group of the keys every screen has.
EVERYWHERE = "every screen"


def binding_rows(screen: Screen) -> list[tuple[str, str, str]]:
    """(key, description, group) for every Workbench binding active on ``screen``: the screen's own and its
    widgets' (group: the screen's title), then the app's (group :data:`EVERYWHERE`)."""
    app = screen.app
    here = str(screen.title or type(screen).__name__.removesuffix("Screen"))
    rows: list[tuple[int, str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for active in screen.active_bindings.values():
        b, node = active.binding, active.node
        if not b.description or not is_own(node, b):
            continue
        group = EVERYWHERE if node is app else here
        key = app.get_key_display(b)
        if (key, group) in seen:
            continue
        seen.add((key, group))
        rank = 0 if node is screen else 1 if node is not app else 2  # the screen, its widgets, then the app
        rows.append((rank, key, b.description, group))
    rows.sort(key=lambda r: r[0])
    return [r[1:] for r in rows]


class HelpScreen(Dialog[None]):
    """A modal list of key bindings by group; any of escape, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close", show=False),
        Binding("question_mark", "dismiss", "Close", show=False),
    ]

    def __init__(self, rows: list[tuple[str, str, str]], title: str) -> None:
        super().__init__()
        self._rows = rows
        self._title = title

    def compose(self) -> ComposeResult:
        with Vertical(id="help-box"):
            yield Static(f"[b]Keys — {self._title}[/b]   (escape closes; ctrl+p opens the command palette)",
                         id="help-title")
            table = RowTable(id="help-table", cursor_type="row", zebra_stripes=True)
            table.add_columns("key", "action")
            group = None
            for key, description, where in self._rows:
                if where != group:
                    group = where
                    table.add_row(Text(where, style="bold"), "")
                table.add_row(Text(key), Text(description))
            yield table
