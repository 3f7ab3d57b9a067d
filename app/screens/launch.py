"""Launch: the dialog behind ``L`` on an environment — what ``workbench launch ENV --backend NAME
--max-steps N --budget USD [--config FILE]`` does, from the app.

The backends are the registered ``workbench.backends`` plugins (``workbench.usecases.launch.backends``:
bundled, ``local`` and ``modal``). While the user picks a backend, steps, budget and config, a worker asks
the chosen backend's pre-flight (``workbench.usecases.launch.preflight``, what the CLI and the
``plan_launch`` tool call) what the run will cost: for a cluster backend (``modal``) the cluster plan of
``workbench launch --plan`` judged by the run and monthly budgets and the memory fit; for ``local``
device-seconds × the local price and the cap the budget guard will enforce. A refused plan disables
Launch, with the numbers shown. Confirming resolves the run config (``workbench.training.run_config.resolve``,
in a worker: it imports the trainer; for a cluster backend the pre-flight again with its credentials, as
``workbench launch --backend modal`` does) and the cap (``workbench.cost.budgets.run_cap``) and returns a
:class:`LaunchRequest`; the Environments screen runs the launch in a thread worker. A Modal launch is
marked unverified, as the CLI marks it: it has never run on Modal from this project."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Button, Input, Label, RadioButton, RadioSet, Select, Static
from workbench_app.format import esc, for_app
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.forecast import ConfigPicker, cloud_text, local_text
from workbench_app.workers import post_ui

from workbench.errors import WorkbenchError

MODAL_REASON = "unverified: never run on Modal from this project"
DEFAULT_MAX_STEPS = 20
PLAN_DEBOUNCE_S = 0.25  # typing in a field replans once the keys stop


@dataclass(slots=True)
class LaunchRequest:
    env: str  # the name shown
    spec: str  # what the run config's env.name is set to (a name, module or file path)
    backend: str
    max_steps: int
    budget_usd: float | None  # the cap the budget guard enforces: the run's budget or what is left of the month
    config_file: str | None
    run_cfg: Any  # what the backend launches: a resolved RunConfig (takes "run"), the planned LaunchConfig ("launch")
    plan: Any = None  # the cluster plan a cluster launch runs (workbench_cloud.plan.Plan)


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


@dataclass(slots=True)
class Forecast:
    """One computed forecast for the inputs it was computed from."""

    backend: str
    inputs: tuple[int, float | None, str | None]
    text: Text
    refusal: str | None  # why Launch is disabled (None: it may launch)
    result: Any = None  # the CloudForecast / LocalForecast, for tests and callers


def forecast_text(backend: str, fc: Any) -> Text:
    """A backend's forecast for people: a cluster plan's or a local run's panel, else its refusal."""
    from workbench_cloud.forecast import CloudForecast, LocalForecast

    if isinstance(fc, CloudForecast):
        text = cloud_text(fc)
        notice = getattr(_backend(backend), "notice", "")
        if notice:
            text.append(f"\n{notice}", style="yellow")
        return text
    if isinstance(fc, LocalForecast):
        return local_text(fc)
    refusal = getattr(fc, "refusal", None)
    return Text(f"{backend}: " + (f"refused: {refusal}" if refusal else "may launch"),
                style="bold red" if refusal else "")


def backend_id(name: str) -> str:
    """The radio button of backend ``name``: ``#backend-local`` (a name's other characters as ``_``)."""
    return "backend-" + re.sub(r"[^A-Za-z0-9_-]", "_", name)


def _backend(name: str) -> Any:
    from workbench.training.backends import backend

    return backend(name)


def compute_forecast(conn: Any, backend: str, spec: str, steps: int, budget: float | None,
                     config: str | None) -> Forecast:
    """The forecast for these inputs (runs in a worker: it reads the store and the config file): the backend's
    pre-flight. A config the plan cannot use is a refusal that says why, as the CLI would."""
    from workbench.usecases.launch import preflight

    inputs = (steps, budget, config)
    cluster = getattr(_backend(backend), "takes", "") == "launch"
    try:
        checked = preflight(conn, backend, env=spec, config_file=config, max_steps=steps, budget_usd=budget)
    except WorkbenchError as e:
        hint = "" if config or not cluster else " (pick a run config with a [cloud] table, e.g. a bundled one)"
        return Forecast(backend, inputs, Text(f"no plan: {e}{hint}", style="bold red"), str(e))
    text = forecast_text(backend, checked.forecast)
    if config and not cluster:
        from workbench.training.run_config import load_tables

        try:
            if load_tables(config).get("cloud"):
                text.append("\nthis config has a [cloud] table: pick modal (a cluster backend) to see its plan",
                            style="dim")
        except WorkbenchError as e:  # the confirm shows it too; say it now
            text.append(f"\nconfig: {e}", style="bold red")
    return Forecast(backend, inputs, text, checked.refusal, checked.forecast)


class LaunchScreen(WorkbenchAppMixin, ModalScreen["LaunchRequest | None"]):
    """Backend, max steps, budget, config file and the live forecast; enter or Launch confirms, escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="launch.cancel"),
    ]
    DEFAULT_CSS = """
    #launch-plan { height: auto; min-height: 3; border: round $primary-darken-1; padding: 0 1; }
    #launch-box { max-height: 100%; }
    #launch-fields { height: auto; }
    """
    COMPACT = 32  # below this many lines (or 100 columns) the dialog drops its blank lines
    #: The dialog's lines outside its scrolling fields: border, title, error line, buttons, one to spare.
    FIXED_LINES = 2 + 1 + 1 + 3 + 1

    def __init__(self, env: str, spec: str | None = None, max_steps: int = DEFAULT_MAX_STEPS) -> None:
        super().__init__()
        self.env = env
        self.spec = spec or env
        self._default_steps = max_steps
        self.busy = False
        self.error = ""
        self.forecast: Forecast | None = None
        self._plan_gen = 0
        self._shown_gen = 0
        self._planned: tuple[str, ...] | None = None  # the backend and raw fields of the latest plan
        self._plan_timer: Timer | None = None
        from workbench.usecases.launch import BackendChoice, backends

        # The registered launch backends (a plugin's own too); "local" first when it is installed.
        found = sorted(backends(), key=lambda b: (b.name != "local", b.name))
        self.choices = found or [BackendChoice("local", "local (this machine's CPU)", "run")]

    def compose(self) -> ComposeResult:
        with Vertical(id="launch-box"):
            yield Static(f"[b]Launch a training run of {esc(self.env)}[/b]", id="launch-title")
            with VerticalScroll(id="launch-fields"):
                with RadioSet(id="launch-backend"):
                    for i, choice in enumerate(self.choices):
                        yield RadioButton(choice.label, value=i == 0, id=backend_id(choice.name), name=choice.name)
                with Horizontal(classes="launch-field"):
                    yield Label("max steps", classes="launch-label")
                    yield Input(str(self._default_steps), id="launch-steps")
                    yield Label(" budget USD", classes="launch-label")
                    yield Input("", placeholder="empty: no budget", id="launch-budget")
                with Horizontal(classes="launch-field"):
                    yield Label("config file", classes="launch-label")
                    yield ConfigPicker("launch-config", "optional: a run config TOML (a path)")
                yield Static("computing the plan…", id="launch-plan")
            yield Static("", id="launch-error")
            with Horizontal(id="launch-buttons"):
                yield Button("Launch", variant="primary", id="launch-ok")
                yield Button("Cancel", id="launch-cancel")

    def on_resize(self, event: events.Resize) -> None:
        """The fields scroll between the title and the buttons, so Launch and Cancel are always on screen."""
        compact = event.size.height < self.COMPACT or event.size.width < 100
        self.set_class(compact, "-compact")
        margins = 0 if compact else 1
        self.query_one("#launch-fields").styles.max_height = max(3, event.size.height - self.FIXED_LINES - margins)

    def on_mount(self) -> None:
        self.query_one("#launch-backend", RadioSet).border_title = "backend"
        self.query_one("#launch-plan", Static).border_title = "plan and cost"
        self.query_one("#launch-steps", Input).focus()
        self._replan()

    @property
    def backend(self) -> str:
        """The chosen backend's name (the first registered one until another is picked)."""
        chosen = next((b for b in self.query("#launch-backend RadioButton").results(RadioButton) if b.value), None)
        return str(chosen.name) if chosen is not None and chosen.name else self.choices[0].name

    def _inputs(self) -> tuple[int, float | None, str | None]:
        return parse_inputs(self.query_one("#launch-steps", Input).value,
                            self.query_one("#launch-budget", Input).value,
                            self.query_one("#launch-config", Input).value)

    # -- the live forecast -------------------------------------------------------------------------
    @on(Input.Changed)
    @on(RadioSet.Changed)
    @on(Select.Changed)
    def _inputs_changed(self) -> None:
        if not self.busy and self.error:
            self.error = ""
            self.query_one("#launch-error", Static).update("")
        if self._plan_timer is not None:
            self._plan_timer.stop()
        self._plan_timer = self.set_timer(PLAN_DEBOUNCE_S, self._replan)

    @property
    def settled(self) -> bool:
        """The plan on screen is for the fields as they are: no replan pending or computing."""
        return self.forecast is not None and self._plan_timer is None and self._shown_gen == self._plan_gen

    def _raw_fields(self) -> tuple[str, ...]:
        return (self.backend, *(self.query_one(f"#launch-{f}", Input).value
                                for f in ("steps", "budget", "config")))

    def _replan(self) -> None:
        self._plan_timer = None
        raw = self._raw_fields()
        if raw == self._planned:
            return  # a Changed that changed nothing (the fields post one as they mount)
        self._planned = raw
        self._plan_gen += 1
        try:
            steps, budget, config = self._inputs()
        except ValueError as e:
            self._show_forecast(self._plan_gen, Forecast(self.backend, (0, None, None),
                                                         Text(str(e), style="bold red"), str(e)))
            return
        self.query_one("#launch-plan", Static).border_subtitle = "computing…"
        self._compute(self._plan_gen, self.backend, steps, budget, config)

    @work(thread=True, exit_on_error=False, exclusive=True, group="launch-plan")
    def _compute(self, gen: int, backend: str, steps: int, budget: float | None, config: str | None) -> None:
        try:
            fc = compute_forecast(self.workbench_app.store.get().conn, backend, self.spec, steps, budget, config)
        except Exception as e:  # never a crash: say what went wrong where the plan would be
            msg = f"{type(e).__name__}: {e}" if not isinstance(e, WorkbenchError) else for_app(e)
            fc = Forecast(backend, (steps, budget, config), Text(f"no plan: {msg}", style="bold red"), msg)
        post_ui(self, self.ForecastMade(gen, fc))

    class ForecastMade(Message, bubble=False):
        def __init__(self, gen: int, forecast: Forecast) -> None:
            super().__init__()
            self.gen, self.forecast = gen, forecast

    class Resolved(Message, bubble=False):
        """The launch request the dialog's fields make, or (``request`` None) why there is none."""

        def __init__(self, request: LaunchRequest | None, error: str = "") -> None:
            super().__init__()
            self.request, self.error = request, error

    @on(ForecastMade)
    def _forecast_made(self, event: ForecastMade) -> None:
        self._show_forecast(event.gen, event.forecast)

    def _show_forecast(self, gen: int, fc: Forecast) -> None:
        if gen != self._plan_gen or not self.is_attached:
            return  # the inputs changed meanwhile: a newer forecast is on its way
        self.forecast = fc
        self._shown_gen = gen
        panel = self.query_one("#launch-plan", Static)
        panel.update(fc.text)
        panel.border_subtitle = "Launch disabled" if fc.refusal else ""
        self.query_one("#launch-ok", Button).disabled = fc.refusal is not None

    # -- confirm -----------------------------------------------------------------------------------
    def show_error(self, message: str) -> None:
        self.busy = False
        self.error = message
        self.query_one("#launch-error", Static).update(Text(message, style="bold red"))

    @on(Resolved)
    def _resolved(self, event: Resolved) -> None:
        if event.request is None:
            self.show_error(event.error)
        elif self.is_current:  # not cancelled meanwhile
            self.dismiss(event.request)

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
            steps, budget, config = self._inputs()
        except ValueError as e:
            self.show_error(str(e))
            return
        self.busy = True
        self.query_one("#launch-error", Static).update("resolving the run config…")
        self._resolve(self.backend, steps, budget, config)

    @work(thread=True, exit_on_error=False, exclusive=True, group="launch-resolve")
    def _resolve(self, backend: str, steps: int, budget: float | None, config: str | None) -> None:
        try:
            cluster = getattr(_backend(backend), "takes", "") == "launch"
            request = (self._cluster_request if cluster else self._local_request)(backend, steps, budget, config)
        except WorkbenchError as e:
            post_ui(self, self.Resolved(None, for_app(e)))
            return
        except Exception as e:
            post_ui(self, self.Resolved(None, f"{type(e).__name__}: {e}"))
            return
        post_ui(self, self.Resolved(request))

    def _local_request(self, backend: str, steps: int, budget: float | None, config: str | None) -> LaunchRequest:
        from workbench.cost.budgets import run_cap
        from workbench.training.run_config import resolve

        run_cfg = resolve(config, {"loop.max_steps": steps}, self.spec)
        # What `workbench launch` hands the budget guard: the run's budget or what is left of
        # the month, whichever is lower (refused when the month is spent).
        cap, _ = run_cap(self.workbench_app.store.get().conn, budget)
        return LaunchRequest(self.env, self.spec, backend, steps, cap, config, run_cfg)

    def _cluster_request(self, backend: str, steps: int, budget: float | None, config: str | None) -> LaunchRequest:
        """What ``workbench launch ENV --backend modal`` checks before it builds anything: the pre-flight's
        verdict (run and monthly budgets, memory fit: as fresh as the month's spend) and the backend's
        credentials (a missing Modal token's error names ``workbench login modal``)."""
        from workbench.cost.budgets import run_cap
        from workbench.usecases.launch import preflight

        conn = self.workbench_app.store.get().conn
        checked = preflight(conn, backend, env=self.spec, config_file=config, max_steps=steps, budget_usd=budget,
                            credentials=True)
        if checked.refusal:
            raise WorkbenchError(checked.refusal)
        cap, _ = run_cap(conn, budget)
        return LaunchRequest(self.env, self.spec, backend, steps, cap, config, checked.launch_config, checked.plan)
