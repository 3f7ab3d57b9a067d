"""Probe: ``workbench probe`` in the app. ``P`` on an environment runs the adversarial policies in a worker
and shows the table (policy, reward, by function, verdict); Enter on an exploitable row opens its example
rollout next to the gold rollout of the same task (the rollout diff); escape goes back."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static
from workbench_app.format import fnum, safe_text
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import CancellableRun, notify_ui, post_ui

from workbench.analysis.diff import RolloutDiff
from workbench.errors import WorkbenchError


class ProbeScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Probe"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back", id="probe.back"),
        Binding("enter", "open", "Open vs gold", id="probe.open"),
    ]
    DEFAULT_CSS = """
    #probe-head { height: auto; padding: 0 1; }
    #probe-table { height: 1fr; }
    """

    def __init__(self, env_spec: str, name: str) -> None:
        super().__init__()
        self.env_spec, self.env_name = env_spec, name
        self.result: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(safe_text(f"probing {self.env_name}: every policy plays its tasks…"), id="probe-head")
        yield RowTable(id="probe-table", cursor_type="row", zebra_stripes=True)
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in ("policy", "reward", "by function", "verdict", "what"):
            table.add_column(col, key=col)
        self._run()

    class Finished(Message):
        """The probe has ended: its result, or (``result`` None) the error that stopped it."""

        def __init__(self, result: dict[str, Any] | None, error: str = "") -> None:
            super().__init__()
            self.result, self.error = result, error

    class DiffLoaded(Message):
        """An exploit's rollout beside the gold rollout, ready to show."""

        def __init__(self, diff: RolloutDiff) -> None:
            super().__init__()
            self.diff = diff

    @work(thread=True, exit_on_error=False, group="probe-run")
    def _run(self) -> None:
        from workbench.runs.probe import probe_env

        try:
            store = self.workbench_app.store.get()
            out = CancellableRun().run(lambda: probe_env(self.env_spec, store))
        except WorkbenchError as e:
            post_ui(self, self.Finished(None, str(e)))
        except Exception as e:
            post_ui(self, self.Finished(None, f"the probe failed: {type(e).__name__}: {e}"))
        else:
            post_ui(self, self.Finished(out))

    @on(Finished)
    def _finished(self, event: Finished) -> None:
        if event.result is None:
            self.query_one("#probe-head", Static).update(Text(event.error, style="red"))
        else:
            self._show(event.result)

    def _show(self, out: dict[str, Any]) -> None:
        self.result = out
        bad = out["exploitable"]
        head = Text.assemble((f"{out['env']} ({out['env_version']})", "bold"),
                             f": {len(out['policies'])} policies on {out['tasks']} tasks in {out['wall_s']:.1f} s; "
                             f"exploitable at {out['threshold']:g} × the {out['basis'].replace('_', ' ')} reward "
                             f"{out['basis_reward']:.3f}  ",
                             (f"{bad} exploitable: enter opens one beside the gold rollout" if bad else
                              "nothing exploitable", "bold red" if bad else "green"))
        self.query_one("#probe-head", Static).update(head)
        table = self.query_one(DataTable)
        table.clear()
        for p in out["policies"]:
            verdict = Text("EXPLOITABLE", style="bold red") if p["exploitable"] else \
                Text("baseline" if not p["earns_nothing"] else (p["skipped"] or "ok"), style="dim")
            by = ", ".join(f"{k} {v:.2f}" for k, v in p["rewards"].items())
            table.add_row(p["name"], fnum(p["mean_reward"]), by, verdict, p["summary"], key=p["name"])
        first = next((i for i, p in enumerate(out["policies"]) if p["exploitable"]), 0)
        table.move_cursor(row=first)
        table.focus()

    def action_back(self) -> None:
        self.dismiss(None)

    @on(DataTable.RowSelected, "#probe-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self.action_open()

    def action_open(self) -> None:
        if self.result is None:
            return
        name = self.query_one(RowTable).selected_key()
        p = next((x for x in self.result["policies"] if x["name"] == name), None)
        if p is None or not p["example_rollout"]:
            return
        self._open(p["example_rollout"], p["gold_rollout"])

    @work(thread=True, exit_on_error=False, group="probe-open", exclusive=True)
    def _open(self, example: str, gold: str | None) -> None:
        from workbench.analysis.diff import load_diff

        if gold is None:  # an environment without gold answers: nothing to put it beside
            notify_ui(self, f"no gold rollout to compare with; the example is {example} (Traces finds it)",
                      title="probe")
            return
        try:
            diff = load_diff(self.workbench_app.store.get().conn, gold, example)
        except Exception as e:
            notify_ui(self, f"comparing the rollouts failed: {e}", severity="error")
            return
        post_ui(self, self.DiffLoaded(diff))

    @on(DiffLoaded)
    def _diff_loaded(self, event: DiffLoaded) -> None:
        from workbench_app.screens.rollout_diff import RolloutDiffScreen

        self.app.push_screen(RolloutDiffScreen(event.diff))


__all__ = ["ProbeScreen"]
