"""The Settings screen's models panel: the registered models (``workbench models``) — listed, added, removed
and tested through the use cases the CLI calls (:mod:`workbench.usecases.models`).

A model's key is never typed here, shown or logged: the form takes the name of the environment variable that
holds it (or ``workbench login PROVIDER`` keeps it in the keyring), and the table says only where it comes from
and whether it is set. A bad value is one line under the form; a test runs in a worker and says, in that line,
whether the model answered and how fast.
"""

from __future__ import annotations

import os
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Select, Static
from workbench_app.format import for_app
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import post_ui

from workbench.config.models import PROVIDERS, ModelEndpoint
from workbench.config.redact import url_credentials
from workbench.errors import WorkbenchError

#: What the registry's fields are called in this form.
MODEL_FORM_LABELS = {"ModelEndpoint.provider": "the provider", "ModelEndpoint.input_price": "the input price",
                     "ModelEndpoint.output_price": "the output price"}


def key_source(m: ModelEndpoint) -> Text:
    """Where ``m``'s key comes from, and whether it is there: never the key."""
    if not m.api_key_env:
        return Text("keyring / none", style="dim")
    state = "set" if os.environ.get(m.api_key_env) else "unset"
    return Text(f"${m.api_key_env} ({state})", style="" if state == "set" else "yellow")


class ModelsPanel(Vertical):
    """The registered models and the form that adds one; ``t`` tests and ``x`` removes the highlighted one."""

    class Changed(Message):
        """The registry changed (a model added or removed): the screen's model choices list it anew."""

    class Checked(Message, bubble=False):
        def __init__(self, ok: bool, line: str) -> None:
            super().__init__()
            self.ok, self.line = ok, line

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "test", "Test model", id="settings.model_test"),
        Binding("x", "remove", "Remove model", id="settings.model_remove"),
    ]
    DEFAULT_CSS = """
    ModelsPanel { height: auto; border: round $primary-darken-1; padding: 0 1; }
    ModelsPanel #models-table { height: 6; }
    ModelsPanel .form-row { height: auto; }
    ModelsPanel .form-row Input { width: 1fr; }
    ModelsPanel #model-provider { width: 16; }
    ModelsPanel .form-row Button { min-width: 8; width: auto; }
    ModelsPanel #models-status { height: auto; display: none; }
    ModelsPanel .error { color: $error; }
    """

    def compose(self) -> ComposeResult:
        yield RowTable(id="models-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(classes="form-row"):
            yield Input(placeholder="name", id="model-name")
            yield Input(placeholder="base URL, e.g. http://127.0.0.1:8000/v1", id="model-url")
            yield Input(placeholder="model id (default: name)", id="model-id")
        with Horizontal(classes="form-row"):
            yield Select([(p, p) for p in PROVIDERS], value=PROVIDERS[0], allow_blank=False, id="model-provider")
            yield Input(placeholder="key's env variable, e.g. OPENAI_API_KEY", id="model-key-env")
            yield Button("Add", id="model-add", variant="primary")
            yield Button("Test", id="model-test")
            yield Button("Remove", id="model-remove", variant="error")
        yield Static("", id="models-status")

    def on_mount(self) -> None:
        self.border_title = "models (workbench models): enter adds, t tests, x removes"
        table = self.query_one(RowTable)
        for col in ("name", "model id", "key from", "base url", "provider"):
            table.add_column(col, key=col)
        self.reload()

    def reload(self) -> None:
        """List the registry again (the file may have changed: ``workbench models`` in another terminal)."""
        from workbench.usecases.models import list_models

        table = self.query_one(RowTable)
        selected = table.selected_key()
        table.clear()
        try:
            models = list_models()
        except WorkbenchError as e:
            self.say(for_app(e), error=True)
            return
        for m in models.values():
            table.add_row(m.name, m.model_id, key_source(m), m.base_url, m.provider, key=m.name)
        if selected in models:
            table.move_cursor(row=list(models).index(selected))

    def say(self, line: str, *, error: bool = False) -> None:
        status = self.query_one("#models-status", Static)
        status.update(Text(line, style="bold red" if error else ""))
        status.set_class(error, "error")
        status.display = bool(line)

    def selected(self) -> str | None:
        return self.query_one(RowTable).selected_key()

    # -- add, remove, test --------------------------------------------------------------------------
    @on(Button.Pressed, "#model-add")
    @on(Input.Submitted, "#model-name, #model-url, #model-id, #model-key-env")
    def action_add(self) -> None:
        from workbench.usecases.models import add_model

        def value(id_: str) -> str:
            return self.query_one(f"#{id_}", Input).value.strip()

        name, url = value("model-name"), value("model-url")
        if not name or not url:
            self.say("a model needs a name and a base URL", error=True)
            self.query_one("#model-name" if not name else "#model-url", Input).focus()
            return
        provider = self.query_one("#model-provider", Select).value
        try:
            m = add_model(name, base_url=url, model_id=value("model-id") or None, provider=str(provider),
                          api_key_env=value("model-key-env") or None)
        except WorkbenchError as e:
            self.say(for_app(e, MODEL_FORM_LABELS), error=True)
            if url_credentials(url):  # a secret typed into the URL is not left on screen
                self.query_one("#model-url", Input).value = ""
            return
        for id_ in ("model-name", "model-url", "model-id", "model-key-env"):
            self.query_one(f"#{id_}", Input).value = ""
        self.say(f"registered {m.name}: {m.model_id} at {m.base_url} ({m.provider}); t tests it")
        self.reload()
        table = self.query_one(RowTable)
        table.move_cursor(row=table.get_row_index(m.name))
        table.focus()
        self.post_message(self.Changed())

    @on(Button.Pressed, "#model-remove")
    def action_remove(self) -> None:
        from workbench.usecases.models import remove_model

        name = self.selected()
        if name is None:
            self.say("no model to remove: add one first", error=True)
            return
        try:
            gone = remove_model(name)
        except WorkbenchError as e:
            self.say(for_app(e), error=True)
            return
        self.say(f"removed {gone.name}")
        self.reload()
        self.post_message(self.Changed())

    @on(Button.Pressed, "#model-test")
    def action_test(self) -> None:
        name = self.selected()
        if name is None:
            self.say("no model to test: add one first", error=True)
            return
        self.say(f"testing {name}: one short chat completion…")
        self._test(name)

    @work(thread=True, exit_on_error=False, exclusive=True, group="settings-model-test")
    def _test(self, name: str) -> None:
        from workbench.usecases.models import check_model

        try:
            check = check_model(name)
        except WorkbenchError as e:
            post_ui(self, self.Checked(False, for_app(e)))
            return
        post_ui(self, self.Checked(check.ok, check.line()))

    @on(Checked)
    def _checked(self, event: Checked) -> None:
        self.say(event.line, error=not event.ok)


__all__ = ["ModelsPanel", "key_source"]
