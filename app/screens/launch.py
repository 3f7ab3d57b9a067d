"""Launch: the dialog behind ``L`` on an environment — what ``workbench launch ENV --backend local
--max-steps N --budget USD [--config FILE]`` does, from the app. The dialog checks the input and
resolves the run config (``workbench.train_config.resolve``, in a worker: it imports the trainer);
it returns a :class:`LaunchRequest` and the Environments screen runs the launch in a thread worker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Static

from workbench.errors import WorkbenchError

from ..data import call_ui

MODAL_REASON = "never run on Modal in this build"
DEFAULT_MAX_STEPS = 20


@dataclass(slots=True)
class LaunchRequest:
    env: str  # the name shown
    spec: str  # what the run config's env.name is set to (a name, module or file path)
    backend: str
    max_steps: int
    budget_usd: float | None
    config_file: str | None
    run_cfg: Any  # the resolved workbench.train_config.RunConfig


def parse_inputs(steps: str, budget: str, config_file: str) -> tuple[int, float | None, str | None]:
    """The dialog's fields, checked as ``workbench launch`` checks its flags; ValueError says what is wrong."""
    try:
        max_steps = int(steps.strip())
    except ValueError:
        raise ValueError(f"max steps must be a whole number, got {steps.strip()!r}") from None
    if max_steps < 1:
        raise ValueError("max steps must be at least 1")
    budget_usd: float | None = None
    if budget.strip():
        try:
            budget_usd = float(budget.strip().removeprefix("$"))
        except ValueError:
            raise ValueError(f"budget must be a number of USD (or empty for none), got {budget.strip()!r}") from None
        if budget_usd < 0 or budget_usd != budget_usd:
            raise ValueError("budget cannot be negative")
    path = config_file.strip() or None
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise ValueError(f"config file {path} does not exist")
        path = str(p)
    return max_steps, budget_usd, path


class LaunchScreen(ModalScreen["LaunchRequest | None"]):
    """Backend, max steps, budget, config file; enter or Launch confirms, escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="launch.cancel"),
    ]

    def __init__(self, env: str, spec: str | None = None, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        super().__init__()
        self.env = env
        self.spec = spec or env
        self._default_steps = max_steps
        self.busy = False
        self.error = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="launch-box"):
            yield Static(f"[b]Launch a training run of {self.env}[/b]", id="launch-title")
            yield Label("backend")
            with RadioSet(id="launch-backend"):
                yield RadioButton("local (this machine's CPU)", value=True, id="backend-local")
                yield RadioButton(f"modal — {MODAL_REASON}", id="backend-modal", disabled=True)
            with Horizontal(classes="launch-field"):
                yield Label("max steps", classes="launch-label")
                yield Input(str(self._default_steps), id="launch-steps")
            with Horizontal(classes="launch-field"):
                yield Label("budget USD", classes="launch-label")
                yield Input("", placeholder="empty: no budget", id="launch-budget")
            with Horizontal(classes="launch-field"):
                yield Label("config file", classes="launch-label")
                yield Input("", placeholder="optional: a run config TOML", id="launch-config")
            yield Static("", id="launch-error")
            with Horizontal(id="launch-buttons"):
                yield Button("Launch", variant="primary", id="launch-ok")
                yield Button("Cancel", id="launch-cancel")

    def on_mount(self) -> None:
        self.query_one("#launch-steps", Input).focus()

    def show_error(self, message: str) -> None:
        self.busy = False
        self.error = message
        self.query_one("#launch-error", Static).update(Text(message, style="bold red"))

    def _resolved(self, request: LaunchRequest) -> None:
        if self.is_current:  # not cancelled meanwhile
            self.dismiss(request)

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#launch-cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#launch-ok")
    @on(Input.Submitted)
    def confirm(self) -> None:
        if self.busy:
            return
        try:
            steps, budget, config = parse_inputs(self.query_one("#launch-steps", Input).value,
                                                 self.query_one("#launch-budget", Input).value,
                                                 self.query_one("#launch-config", Input).value)
        except ValueError as e:
            self.show_error(str(e))
            return
        self.busy = True
        self.query_one("#launch-error", Static).update("resolving the run config…")
        self._resolve(steps, budget, config)

    @work(thread=True, exit_on_error=False, exclusive=True, group="launch-resolve")
    def _resolve(self, steps: int, budget: float | None, config: str | None) -> None:
        from workbench.train_config import resolve

        try:
            run_cfg = resolve(config, {"loop.max_steps": steps}, self.spec)
        except WorkbenchError as e:
            call_ui(self.app, self.show_error, str(e))
            return
        except Exception as e:
            call_ui(self.app, self.show_error, f"{type(e).__name__}: {e}")
            return
        call_ui(self.app, self._resolved, LaunchRequest(self.env, self.spec, "local", steps, budget, config, run_cfg))
