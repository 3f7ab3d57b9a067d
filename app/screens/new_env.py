"""New environment: a name and a template, then ``workbench new NAME --template T`` from the app
(:func:`workbench.authoring.templates.create_env`, in a worker). The dialog dismisses with the new folder's
path (None when cancelled), so its caller can reload the environment list and open the file."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static
from workbench_app.format import for_app, fpath
from workbench_app.screens.dialog import Dialog
from workbench_app.workers import post_ui

from workbench.authoring.templates import TEMPLATES, check_name, default_dir
from workbench.errors import WorkbenchError


class NewEnvScreen(Dialog["Path | None"]):
    """Name, template, Create. Enter in the name field creates; escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="new.cancel"),
    ]
    DEFAULT_CSS = """
    NewEnvScreen { align: center middle; }
    #new-box { width: 84; max-width: 95%; height: auto; border: thick $primary; background: $surface;
               padding: 0 1; }
    #new-title { height: 1; margin-bottom: 1; }
    #new-name-row { height: 3; }
    #new-name-row Label { width: 10; padding: 1 0; }
    #new-name { width: 1fr; }
    #new-template { width: 1fr; }
    #new-summary { height: auto; min-height: 2; color: $text-muted; }
    #new-where { height: auto; }
    #new-error { height: auto; min-height: 1; }
    #new-buttons { height: 3; align-horizontal: right; }
    #new-buttons Button { margin-left: 1; }
    """

    def __init__(self, directory: str | Path | None = None, template: str = "single-turn") -> None:
        """``directory``: where to create it (default: the user environment directory discovery searches)."""
        super().__init__()
        self.directory = Path(directory).expanduser() if directory is not None else None
        self.initial_template = template if template in TEMPLATES else next(iter(TEMPLATES))
        self.busy = False
        self.error = ""
        self._error_inputs: tuple[str, str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="new-box"):
            yield Static("[b]New environment from a template[/b]", id="new-title")
            with Horizontal(id="new-name-row"):
                yield Label("name")
                yield Input("", placeholder="my_env: letters, digits, underscores", id="new-name")
            with RadioSet(id="new-template"):
                for t in TEMPLATES.values():
                    yield RadioButton(t.name, value=t.name == self.initial_template, id=f"template-{t.package}")
            yield Static("", id="new-summary")
            yield Static("", id="new-where")
            yield Static("", id="new-error")
            with Horizontal(id="new-buttons"):
                yield Button("Create", variant="primary", id="new-ok")
                yield Button("Cancel", id="new-cancel")

    def on_mount(self) -> None:
        self.query_one("#new-template", RadioSet).border_title = "template"
        self.query_one("#new-name", Input).focus()
        self._describe()

    @property
    def template(self) -> str:
        pressed = self.query_one("#new-template", RadioSet).pressed_button
        return str(pressed.label) if pressed is not None else self.initial_template

    @property
    def parent_dir(self) -> Path:
        return self.directory if self.directory is not None else default_dir()

    @on(Input.Changed, "#new-name")
    @on(RadioSet.Changed)
    def _describe(self) -> None:
        self.query_one("#new-summary", Static).update(TEMPLATES[self.template].summary)
        name = self.query_one("#new-name", Input).value.strip() or "NAME"
        where = Text("creates ", style="dim")
        where.append(fpath(self.parent_dir / name), style="bold")
        self.query_one("#new-where", Static).update(where)
        if self.error and not self.busy and self._error_inputs != self._inputs():
            self.error = ""  # the input that caused it changed
            self.query_one("#new-error", Static).update("")

    def _inputs(self) -> tuple[str, str]:
        return self.query_one("#new-name", Input).value, self.template

    def show_error(self, message: str) -> None:
        self.busy = False
        self.error = message
        self._error_inputs = self._inputs()
        self.query_one("#new-error", Static).update(Text(message, style="bold red"))

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#new-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#new-ok")
    @on(Input.Submitted, "#new-name")
    def create(self) -> None:
        if self.busy:
            return
        try:
            name = check_name(self.query_one("#new-name", Input).value)
        except WorkbenchError as e:
            self.show_error(for_app(e))
            return
        self.busy = True
        self.query_one("#new-error", Static).update("creating…")
        self._create(name, self.template)

    class Created(Message, bubble=False):
        """The environment is written at ``path``, or (``path`` None) ``error`` says why not."""

        def __init__(self, path: Path | None, error: str = "") -> None:
            super().__init__()
            self.path, self.error = path, error

    @work(thread=True, exit_on_error=False, exclusive=True, group="new-env")
    def _create(self, name: str, template: str) -> None:
        from workbench.authoring.templates import create_env

        try:
            path = create_env(name, template, self.directory)
        except WorkbenchError as e:
            post_ui(self, self.Created(None, for_app(e)))
            return
        except Exception as e:  # an unexpected failure is a message in the dialog, never a crash
            post_ui(self, self.Created(None, f"{type(e).__name__}: {e}"))
            return
        post_ui(self, self.Created(path))

    @on(Created)
    def _created(self, event: Created) -> None:
        if event.path is None:
            self.show_error(event.error)
        elif self.is_current:
            self.dismiss(event.path)
