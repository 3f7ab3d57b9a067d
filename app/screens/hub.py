"""The Environments screen's Hub scope: the environments on a package index (``workbench hub``).

``H`` on Environments opens it (escape or ``H`` goes back to the Local scope). It lists the index's
environments (``/`` searches, ``i`` switches between the configured indexes), shows the highlighted one's
eval card, and pulls (``P``), forks (``F``, asking for the new name) or updates (``U``) it: an update is
offered, never made, when a newer version than the pulled one exists. Every index call runs in a worker.
With no index configured it says so and ``s`` opens Settings on a new index; the indexes are read from the
settings file on every load, so one added there shows on the next (``r``, or coming back).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static
from workbench_app.format import esc, safe_text
from workbench_app.screens.dialog import Dialog
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import notify_ui, post_ui

from workbench.errors import WorkbenchError
from workbench.hub.card_view import card_renderable


class ForkNameScreen(Dialog["str | None"]):
    """The new name of a fork; enter confirms, escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="fork.cancel")]
    DEFAULT_CSS = """
    ForkNameScreen { align: center middle; }
    #fork-box { width: 60; max-width: 95%; height: auto; border: thick $primary; background: $surface; padding: 0 1; }
    """

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def compose(self) -> ComposeResult:
        with Vertical(id="fork-box"):
            yield Static(f"[b]Fork {esc(self.source)}[/b] into your env folder as:")
            yield Input(f"my_{self.source}", id="fork-name")

    @on(Input.Submitted, "#fork-name")
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class HubScreen(WorkbenchAppMixin, Screen[None]):
    class Listed(Message, bubble=False):
        """The configured indexes, the index searched and the environments it lists."""

        def __init__(self, indexes: list[str], index: str, rows: list[dict[str, Any]]) -> None:
            super().__init__()
            self.indexes, self.index, self.rows = indexes, index, rows

    class CardRead(Message, bubble=False):
        def __init__(self, name: str, card: dict[str, Any]) -> None:
            super().__init__()
            self.name, self.card = name, card

    class Pulled(Message, bubble=False):
        """A pull (or update) is done: the list is read again."""

    class NoIndex(Message, bubble=False):
        """No package index is configured: there is nothing to list until one is added in Settings."""

    class Failed(Message, bubble=False):
        def __init__(self, message: str) -> None:
            super().__init__()
            self.message = message

    TITLE = "Environments — Hub"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,H", "local", "Local scope", id="hub.local"),
        Binding("slash", "search", "Search", id="hub.search"),
        Binding("i", "next_index", "Index", id="hub.index"),
        Binding("P", "pull", "Pull", id="hub.pull"),
        Binding("F", "fork", "Fork", id="hub.fork"),
        Binding("U", "update", "Update", id="hub.update"),
        Binding("r", "refresh", "Refresh", id="hub.refresh", show=False),
        Binding("s", "settings", "Add an index (Settings)", id="hub.settings"),
    ]
    DEFAULT_CSS = """
    #hub-bar { height: 3; }
    #hub-scope { width: auto; padding: 1 1; }
    #hub-query { width: 1fr; }
    #hub-body { height: 1fr; }
    #hub-table { width: 1fr; }
    #hub-card-box { width: 1fr; border-left: solid $primary; padding: 0 1; }
    """

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, Any]] = []
        self.index: str | None = None
        self.indexes: list[str] = []
        self.query_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="hub-bar"):
            yield Static("", id="hub-scope")
            yield Input(placeholder="search the index (enter)", id="hub-query")
        with Horizontal(id="hub-body"):
            yield RowTable(id="hub-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="hub-card-box"):
                yield Static("reading the index…", id="hub-card")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in ("name", "latest", "versions", "here", "summary"):
            table.add_column(col, key=col)
        table.focus()
        self._load()

    def _scope(self) -> None:
        names = "  ".join(f"[reverse]{n}[/]" if n == self.index else n for n in self.indexes) or "no index configured"
        self.query_one("#hub-scope", Static).update(f"Local | [b]Hub[/b]: {names}")

    @work(thread=True, exit_on_error=False, exclusive=True, group="hub-list")
    def _load(self) -> None:
        from workbench.hub.browse import search
        from workbench.hub.pull import record
        from workbench.packaging.indexes import configured

        try:
            indexes, default = configured()
            if not indexes and not default:
                post_ui(self, self.NoIndex())
                return
            index = self.index or default or (next(iter(indexes)) if indexes else None)
            out = search(self.query_text or None, index)
            for row in out["environments"]:
                rec = record(row["name"])
                row["here"] = rec.get("version") if rec and rec.get("index") == out["index"] else None
        except WorkbenchError as e:
            post_ui(self, self.Failed(str(e)))
            return
        post_ui(self, self.Listed(list(indexes), out["index"], out["environments"]))

    @on(NoIndex)
    def _no_index(self) -> None:
        self.indexes, self.index, self.rows = [], None, []
        self._scope()
        self.query_one(DataTable).clear()
        self.query_one("#hub-card", Static).update(Text.assemble(
            ("No package index is configured. ", "bold"),
            "Environments are shared through a package index (a PyPI-style simple index). Press ",
            ("s", "bold"), " to add one in Settings: a name and its URL, e.g. https://pypi.example/simple/."))

    def on_screen_resume(self) -> None:
        if self.is_mounted and not self.indexes:
            self._load()  # an index added in Settings meanwhile is listed now

    def action_settings(self) -> None:
        """Settings, with the cursor in a new index's name; back here (``H``) once it is added."""
        from workbench_app.screens.settings import SettingsScreen

        app = self.app
        self.dismiss(None)

        async def show() -> None:
            await app.switch_mode("settings")
            if isinstance(app.screen, SettingsScreen):
                app.screen.focus_hub_index()

        app.call_later(show)

    @on(Failed)
    def _failed(self, event: Failed) -> None:
        self.query_one("#hub-card", Static).update(Text(event.message, style="red"))
        self.notify(event.message, severity="error", title="hub")

    @on(Listed)
    def _show(self, event: Listed) -> None:
        indexes, index, rows = event.indexes, event.index, event.rows
        self.indexes, self.index, self.rows = indexes or [index], index, rows
        self._scope()
        table = self.query_one(DataTable)
        table.clear()
        from workbench.hub.publish import sorted_versions

        for r in rows:
            here = r["here"] or "-"
            if r["here"] and sorted_versions([r["here"], r["latest"]])[-1] != r["here"]:
                here = Text(f"{r['here']} (U: {r['latest']})", style="yellow")
            table.add_row(r["name"], r["latest"], str(r["versions"]), here, r["summary"], key=r["name"])
        if not rows:
            self.query_one("#hub-card", Static).update(safe_text(
                f"no environment on index {index}" + (f" matching {self.query_text!r}" if self.query_text else "")))
        else:
            self._card(self._selected() or rows[0]["name"])

    def _selected(self) -> str | None:
        return self.query_one(RowTable).selected_key()

    def _row(self, name: str | None) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["name"] == name), None)

    @on(DataTable.RowHighlighted, "#hub-table")
    def _highlight(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._card(str(event.row_key.value))

    @work(thread=True, exit_on_error=False, exclusive=True, group="hub-card")
    def _card(self, name: str) -> None:
        from workbench.hub.browse import show

        try:
            card = show(name, self.index)
        except WorkbenchError as e:
            post_ui(self, self.Failed(str(e)))
            return
        post_ui(self, self.CardRead(name, card))

    @on(CardRead)
    def _show_card(self, event: CardRead) -> None:
        name, card = event.name, event.card
        if self._selected() in (None, name):
            self.query_one("#hub-card", Static).update(card_renderable(card))

    # -- actions ------------------------------------------------------------------------------------
    def action_local(self) -> None:
        self.dismiss(None)

    def action_search(self) -> None:
        self.query_one("#hub-query", Input).focus()

    @on(Input.Submitted, "#hub-query")
    def _query(self, event: Input.Submitted) -> None:
        self.query_text = event.value.strip()
        self.query_one(DataTable).focus()
        self._load()

    def action_refresh(self) -> None:
        self._load()

    def action_next_index(self) -> None:
        if len(self.indexes) > 1 and self.index in self.indexes:
            self.index = self.indexes[(self.indexes.index(self.index) + 1) % len(self.indexes)]
            self._load()

    def action_pull(self) -> None:
        name = self._selected()
        if name is not None and self.workbench_app.require_writable("a pull"):
            self._pull(name, "pull")

    def action_update(self) -> None:
        row = self._row(self._selected())
        if row is None:
            return
        if not row["here"]:
            self.notify(f"{row['name']} is not pulled here: P pulls it", severity="warning", title="hub")
        elif row["here"] == row["latest"]:
            self.notify(f"{row['name']} {row['here']} is the newest version", title="hub")
        else:
            self._pull(row["name"], "update")

    @work(thread=True, exit_on_error=False, group="hub-pull")
    def _pull(self, name: str, what: str) -> None:
        from workbench.hub.pull import pull

        try:
            rec = pull(name, self.index)
        except WorkbenchError as e:
            post_ui(self, self.Failed(str(e)))
            return
        # a pull runs none of the env's code, so whether it loads is for validate to say, not the pull
        notify_ui(self, f"{what}ed {rec['name']} {rec['version']} from {rec['index']}", title="hub",
                  severity="information")
        post_ui(self, self.Pulled())

    @on(Pulled)
    def _pulled(self) -> None:
        self._load()

    def action_fork(self) -> None:
        name = self._selected()
        if name is not None and self.workbench_app.require_writable("a fork"):
            def fork_as(new: str | None) -> None:
                if new:
                    self._fork(name, new)

            self.app.push_screen(ForkNameScreen(name), fork_as)

    @work(thread=True, exit_on_error=False, group="hub-fork")
    def _fork(self, name: str, new: str) -> None:
        from workbench.hub.pull import fork

        try:
            out = fork(name, new, self.index)
        except WorkbenchError as e:
            post_ui(self, self.Failed(str(e)))
            return
        notify_ui(self, f"forked {name} {out['forked_from']['version']} as {new} into {out['path']}", title="hub")


__all__ = ["ForkNameScreen", "HubScreen", "card_renderable"]
