"""``?``: the keys of the current screen and of the app."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Static
from workbench_app.widgets.tables import RowTable


def binding_rows(screen: Screen) -> list[tuple[str, str, str]]:
    """(key, description, where) for every binding active on ``screen``, app bindings included."""
    app = screen.app
    rows: list[tuple[int, str, str, str]] = []
    seen: set[tuple[str, str]] = set()
    for active in screen.active_bindings.values():
        b, node = active.binding, active.node
        where = "app" if node is app else type(node).__name__.removesuffix("Screen").lower()
        key = app.get_key_display(b)
        if not b.description or (key, where) in seen:
            continue
        seen.add((key, where))
        rank = 0 if node is screen else 1 if node is app else 2  # this screen, then the app, then widgets
        rows.append((rank, key, b.description, where))
    rows.sort(key=lambda r: r[0])
    return [r[1:] for r in rows]


class HelpScreen(ModalScreen[None]):
    """A modal list of key bindings; any of escape, q or ? closes it."""

    BINDINGS = [
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
            table.add_columns("key", "action", "where")
            for row in self._rows:
                table.add_row(*row)
            yield table
