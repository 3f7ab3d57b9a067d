"""Settings (``6``, or "settings" in the command palette): the registered models, which one the quick eval,
Play's simulated user and the Debugger call, the monthly budget, your name on played rollouts and the hub's
package indexes.

Every value is written to the settings file (``workbench.config.settings.update_settings``, which keeps the
file's other keys and comments) when it is entered, and the app uses it at once: the Costs screen and the
Hub read the file each time they load. A value that does not validate is one line beside its field, and
nothing is written.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Label, Select, Static
from workbench_app.config import TuiConfig, apply_settings, config_path, load_config
from workbench_app.format import for_app, fpath
from workbench_app.screens.models import ModelsPanel
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tables import RowTable

from workbench.config.settings import MODEL_USES
from workbench.errors import WorkbenchError


def parse_budget(raw: str) -> float | None:
    """The monthly budget typed in the form (blank: none); a value that is no number is a ValueError."""
    text = raw.strip().removeprefix("$").replace(",", "")
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"budget.monthly_usd must be a number of USD, e.g. 50, got {raw.strip()!r}") from None


class SettingsScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Settings"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reload", "Reload the file", id="settings.reload", show=False),
        Binding("escape", "leave_field", "Leave the field (then 1-6 switch screens)", id="settings.leave",
                show=False),
    ]
    DEFAULT_CSS = """
    #settings-body > Vertical { height: auto; border: round $primary-darken-1; padding: 0 1; }
    #settings-body .form-row { height: auto; }
    #settings-body .form-row Label { width: 22; padding: 1 1 0 0; }
    #settings-body .form-row Input { width: 1fr; }
    #settings-body .form-row Select { width: 1fr; }
    #settings-body .form-row Button { min-width: 8; width: auto; }
    #settings-body .field-error { color: $error; height: auto; display: none; }
    #hub-indexes { height: 4; }
    """

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="settings-body"):
            yield Static("", id="settings-file")
            yield ModelsPanel(id="models-panel")
            with Vertical(id="uses"):
                for use, what in MODEL_USES.items():
                    with Horizontal(classes="form-row"):
                        yield Label(what)
                        yield Select([], prompt="default (model / base_url)", id=f"use-{use}")
                yield Static("", id="uses-status", classes="field-error")
            with Vertical(id="you"):
                with Horizontal(classes="form-row"):
                    yield Label("monthly budget (USD)")
                    yield Input(placeholder="none: no monthly limit", id="budget")
                yield Static("", id="budget-status", classes="field-error")
                with Horizontal(classes="form-row"):
                    yield Label("your name on plays")
                    yield Input(placeholder="default: your login name", id="user-name")
                yield Static("", id="user-name-status", classes="field-error")
            with Vertical(id="hub"):
                yield RowTable(id="hub-indexes", cursor_type="row")
                with Horizontal(classes="form-row"):
                    yield Input(placeholder="index name, e.g. company", id="index-name")
                    yield Input(placeholder="simple index URL, e.g. https://pypi.example/simple/", id="index-url")
                    yield Button("Add", id="index-add", variant="primary")
                    yield Button("Remove", id="index-remove", variant="error")
                yield Static("", id="hub-status", classes="field-error")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.query_one("#uses", Vertical).border_title = "which model each use calls"
        self.query_one("#you", Vertical).border_title = "budget and you (enter saves)"
        self.query_one("#hub", Vertical).border_title = "hub package indexes (H on Environments)"
        table = self.query_one("#hub-indexes", RowTable)
        for col in ("name", "url", "default"):
            table.add_column(col, key=col)
        self.action_reload()

    def on_screen_resume(self) -> None:
        if self.is_mounted:
            self.action_reload()

    # -- showing the file ---------------------------------------------------------------------------
    def action_reload(self) -> None:
        """Show what the settings file holds now (another terminal may have changed it)."""
        saved = load_config()
        where = self.query_one("#settings-file", Static)
        if saved.problems:  # a value the file holds that does not validate: the first, in one line
            where.update(Text(f"{saved.problems[0]} (enter a new value to replace it)", style="bold yellow"))
        else:
            where.update(Text(f"written to {fpath(config_path())} as you enter each value", style="dim"))
        self.query_one(ModelsPanel).reload()
        self._show_uses(saved)
        budget = saved.monthly_budget_usd
        self.query_one("#budget", Input).value = "" if budget is None else f"{budget:g}"
        self.query_one("#user-name", Input).value = saved.user_name
        self._show_indexes(saved)

    def _show_uses(self, saved: TuiConfig) -> None:
        from workbench.usecases.models import list_models

        try:
            names = list(list_models())
        except WorkbenchError:
            names = []  # the models panel says why
        for use in MODEL_USES:
            select = self.query_one(f"#use-{use}", Select)
            chosen = getattr(saved.models, use)
            options = names + ([chosen] if chosen and chosen not in names else [])
            with select.prevent(Select.Changed):
                select.set_options([(n if n in names else f"{n} (not registered)", n) for n in options])
                if chosen:
                    select.value = chosen
                else:
                    select.clear()

    def _show_indexes(self, saved: TuiConfig) -> None:
        table = self.query_one("#hub-indexes", RowTable)
        table.clear()
        for name, index in saved.hub.indexes.items():
            table.add_row(name, index.url, "yes" if name == saved.hub.default else "", key=name)
        if not saved.hub.indexes:
            self._status("hub-status", "no index configured: add one to browse, pull and fork environments (H)",
                         error=False)

    def _status(self, id_: str, line: str, *, error: bool = True) -> None:
        status = self.query_one(f"#{id_}", Static)
        status.update(Text(line, style="bold red" if error else "dim"))
        status.display = bool(line)

    def action_leave_field(self) -> None:
        self.set_focus(None)

    def _saved(self, saved: TuiConfig, status: str, line: str) -> None:
        apply_settings(self.workbench_app.config, saved)
        self._status(status, line, error=False)

    def _save(self, changes: dict[tuple[str, ...], Any], status: str, line: str) -> bool:
        from workbench.config.settings import update_settings

        try:
            saved = update_settings(changes)
        except WorkbenchError as e:
            self._status(status, for_app(e))
            return False
        self._saved(saved, status, line)
        return True

    # -- the values -----------------------------------------------------------------------------------
    @on(ModelsPanel.Changed)
    def _models_changed(self) -> None:
        self._show_uses(load_config())

    @on(Select.Changed, "#uses Select")
    def _use_chosen(self, event: Select.Changed) -> None:
        use = (event.select.id or "").removeprefix("use-")
        if use not in MODEL_USES:
            return
        value = event.value if isinstance(event.value, str) and event.value else None  # blank: the default
        said = f"{MODEL_USES[use]} calls {value}" if value else f"{MODEL_USES[use]} calls the default model"
        self._save({("models", use): value}, "uses-status", said)

    @on(Input.Submitted, "#budget")
    def _budget(self, event: Input.Submitted) -> None:
        try:
            value = parse_budget(event.value)
        except ValueError as e:
            self._status("budget-status", str(e))
            return
        said = "no monthly budget" if value is None else f"monthly budget: ${value:g} (Costs shows it)"
        self._save({("budget", "monthly_usd"): value}, "budget-status", said)

    @on(Input.Submitted, "#user-name")
    def _user_name(self, event: Input.Submitted) -> None:
        name = event.value.strip()
        if any(not c.isprintable() for c in name) or len(name) > 80:
            self._status("user-name-status", "user_name must be one printable line of at most 80 characters")
            return
        said = f"plays are stored as {name}" if name else "plays are stored under your login name"
        self._save({("user_name",): name or None}, "user-name-status", said)

    @on(Button.Pressed, "#index-add")
    @on(Input.Submitted, "#index-name, #index-url")
    def action_add_index(self) -> None:
        from workbench.config.settings import add_hub_index

        name = self.query_one("#index-name", Input).value.strip()
        url = self.query_one("#index-url", Input).value.strip()
        if not name or not url:
            self._status("hub-status", "an index needs a name and its simple index URL")
            self.query_one("#index-name" if not name else "#index-url", Input).focus()
            return
        try:
            saved = add_hub_index(name, url)
        except WorkbenchError as e:
            self._status("hub-status", for_app(e))
            return
        self.query_one("#index-name", Input).value = ""
        self.query_one("#index-url", Input).value = ""
        self._saved(saved, "hub-status", f"added index {name}; H on Environments browses it")
        self._show_indexes(saved)

    @on(Button.Pressed, "#index-remove")
    def action_remove_index(self) -> None:
        from workbench.config.settings import remove_hub_index

        name = self.query_one("#hub-indexes", RowTable).selected_key()
        if name is None:
            self._status("hub-status", "no index to remove")
            return
        try:
            saved = remove_hub_index(name)
        except WorkbenchError as e:
            self._status("hub-status", for_app(e))
            return
        self._saved(saved, "hub-status", f"removed index {name}")
        self._show_indexes(saved)

    def focus_hub_index(self) -> None:
        """Put the cursor in the new index's name (the Hub sends the user here when it has no index)."""
        field = self.query_one("#index-name", Input)
        field.focus()
        self.query_one("#settings-body", VerticalScroll).scroll_to_widget(self.query_one("#hub", Vertical),
                                                                         animate=False)


__all__ = ["SettingsScreen", "parse_budget"]
