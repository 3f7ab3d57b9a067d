"""Runs: every run in the store and the selected run's summary (``workbench show RUN``); for a training
run also its curves (reward and held-out evals, step-time split, staleness, throughput), evals, events,
newest rollouts and last steps (``workbench runs RUN``), live while it runs: each second a worker
reads only the records and rollouts stored since the last read.

The list shows the user's own kinds of run (evaluations, training, imports, optimisations,
distillations); K steps through every kind and each other kind alone (probe, validate, debug, play...).
The runs of one probe or ``validate`` are one entry; Enter opens it (its runs, one per policy) and
escape goes back. Runs of a registered model show the name the user gave it. m marks a run for
Compare (● in its row)."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Header, Static
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist
from workbench_app.format import fnum
from workbench_app.screens.run_panels import (
    COLUMNS,
    STATUS_STYLE,
    mark_cell,
    pipeline_renderable,
    row_cells,
    summary_renderable,
)
from workbench_app.trace_source import kind_label, next_kinds
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.pipeline_view import optimize_renderable
from workbench_app.widgets.run_plots import RunPlots
from workbench_app.widgets.tables import RowTable
from workbench_app.widgets.train_view import TrainView, read_new_rollouts
from workbench_app.workers import notify_ui, post_ui

from workbench.errors import WorkbenchError
from workbench.runs.kinds import USER_KINDS
from workbench.store.run_lookups import comparison_of, run_counts

TRAIN_POLL_S = 1.0  # how often a running training run's new records are read


class RunsScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "next_plot", "Next plot", id="runs.next_plot"),  # first: shown only while one plot fits at a time
        Binding("r", "refresh", "Refresh", id="runs.refresh"),
        Binding("K", "cycle_kind", "Kind", id="runs.kind"),  # mine, all, probe, validate, debug, play, ...
        Binding("t", "traces", "Traces of run", id="runs.traces"),
        Binding("S", "stop", "Stop launched run", id="runs.stop"),
        Binding("m", "mark", "Mark", id="runs.mark"),
        Binding("c", "compare", "Compare", id="runs.compare"),
        Binding("escape", "close_pipeline", "Back", show=False),
    ]

    class RunsRead(Message, bubble=False):
        """The listing (or the opened pipeline's runs) read for ``kinds`` and ``pipeline``."""

        def __init__(self, runs: list[dict[str, Any]], kinds: tuple[str, ...] | None = USER_KINDS,
                     pipeline: str | None = None) -> None:
            super().__init__()
            self.runs, self.kinds, self.pipeline = runs, kinds, pipeline

    class PipelineRead(Message, bubble=False):
        """A probe's pipeline entry with its member ``runs`` (``workbench show PIPELINE``)."""

        def __init__(self, entry: dict[str, Any]) -> None:
            super().__init__()
            self.entry = entry

    class SummaryRead(Message, bubble=False):
        """A run, its summary and, for a training run, its records and rollouts so far."""

        def __init__(self, run: dict[str, Any], summary: dict[str, Any], records: list[dict[str, Any]] | None,
                     rollouts: list[Any]) -> None:
            super().__init__()
            self.run, self.summary, self.records, self.rollouts = run, summary, records, rollouts

    class TrainPolled(Message, bubble=False):
        """A poll's result: new records and rollouts, the run's status and (when rollouts came in) its
        counts (``records`` None and ``status`` an error message when it failed)."""

        def __init__(self, run_id: str, records: list[dict[str, Any]] | None, rollouts: list[Any], status: str,
                     counts: tuple[int, int, float | None] | None = None) -> None:
            super().__init__()
            self.run_id, self.records, self.rollouts, self.status, self.counts = \
                run_id, records, rollouts, status, counts

    class ComparisonRead(Message, bubble=False):
        def __init__(self, result: dict[str, Any], means: dict[str, dict[str, float]]) -> None:
            super().__init__()
            self.result, self.means = result, means

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[dict[str, Any]] = []
        self.marked: list[str] = []  # runs marked for Compare, in the order marked
        self.kinds: tuple[str, ...] | None = USER_KINDS  # the kinds listed (K steps through them); None: every kind
        self.pipeline: str | None = None  # the probe pipeline opened (its runs listed), or None: the listing
        self._reselect: str | None = None  # the row the next listing puts the cursor on (a pipeline closed)
        self._train_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="runs-body"):
            yield RowTable(id="runs-table", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="run-summary-box"):
                yield Static("no run selected", id="run-summary")
        yield TrainView(id="train-view")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in COLUMNS:
            if col == "mark":
                table.add_column("", key=col, width=1)
            else:
                table.add_column(col, key=col)
        self._show_scope()
        self.action_refresh()

    def on_screen_resume(self) -> None:
        if self.is_mounted and self.runs:
            self.action_refresh()  # reloads the summary, which restarts the live training view

    def on_screen_suspend(self) -> None:
        self._watch_train(None)

    def action_refresh(self) -> None:
        self._load_runs(self.kinds, self.pipeline)

    def action_cycle_kind(self) -> None:
        """The user's own kinds, then every kind, then each other kind alone, and the user's own again."""
        self.kinds = next_kinds(self.kinds)
        self.pipeline = None
        self._show_scope()
        self.action_refresh()

    def action_close_pipeline(self) -> None:
        """Back from an opened pipeline's runs to the listing, on the pipeline's entry."""
        if self.pipeline is not None:
            self._reselect, self.pipeline = self.pipeline, None
            self._show_scope()
            self.action_refresh()

    def _show_scope(self) -> None:
        """What the list holds, after the store in the screen's subtitle: the kinds listed, or the pipeline opened."""
        scope = (f"pipeline {self.pipeline} (escape: back)" if self.pipeline is not None
                 else f"kind: {kind_label(self.kinds)}")
        self.sub_title = f"{self.app.sub_title} · {scope}" if self.app.sub_title else scope

    @work(thread=True, exit_on_error=False, exclusive=True, group="runs-list")
    def _load_runs(self, kinds: tuple[str, ...] | None, pipeline: str | None) -> None:
        from workbench.store.queries import list_runs
        from workbench.store.reports import compared_run
        from workbench.store.run_listing import pipeline_members

        try:
            conn = self.workbench_app.store.get().conn
            if pipeline is not None:
                entry = pipeline_members(conn, pipeline)
                runs = [] if entry is None else list(entry["runs"])
            else:
                runs = list_runs(conn, limit=500, kinds=kinds)
            for r in runs:
                if "members" not in r:  # a run (not a pipeline's entry): the registered name it was run under
                    found = compared_run(conn, r["id"])
                    r["model_name"] = None if found is None else found[3]
        except Exception as e:
            notify_ui(self, f"reading runs failed: {e}", severity="error")
            return
        post_ui(self, self.RunsRead(runs, kinds, pipeline))

    @on(RunsRead)
    def _show_runs(self, event: RunsRead) -> None:
        if (event.kinds, event.pipeline) != (self.kinds, self.pipeline):
            return  # read for a scope left since
        self._show_scope()
        runs = event.runs
        table = self.query_one(DataTable)
        selected = self._reselect or self._selected_id()
        self._reselect = None
        self.runs = runs
        table.clear()
        for r in runs:
            table.add_row(*row_cells(r, r["id"] in self.marked), key=r["id"])
        if selected is not None and selected in {r["id"] for r in runs}:
            table.move_cursor(row=table.get_row_index(selected))
        if not runs:
            self.query_one("#run-summary", Static).update(
                "no runs yet: press 1, pick an environment and press e" if self.kinds == USER_KINDS
                else f"no runs of kind {kind_label(self.kinds)}: K shows another kind")
        else:
            self._load_summary(self._selected_id() or runs[0]["id"])

    def _entry(self, key: str | None) -> dict[str, Any] | None:
        return next((r for r in self.runs if r["id"] == key), None)

    @on(DataTable.RowSelected, "#runs-table")
    def _open_pipeline(self, event: DataTable.RowSelected) -> None:
        """Enter on a probe's entry lists its runs, one per policy."""
        entry = self._entry(None if event.row_key.value is None else str(event.row_key.value))
        if entry is not None and "members" in entry and self.pipeline is None:
            self.pipeline = entry["id"]
            self._show_scope()
            self.action_refresh()

    def action_mark(self) -> None:
        run_id = self._selected_id()
        if run_id is None:
            return
        if run_id in self.marked:
            self.marked.remove(run_id)
        else:
            self.marked.append(run_id)
        try:
            self.query_one(DataTable).update_cell(
                run_id, "mark", mark_cell(run_id in self.marked))
        except (CellDoesNotExist, RowDoesNotExist):
            pass
        self.notify(f"{len(self.marked)} runs marked for Compare (c)" if self.marked else "no run marked")

    def action_compare(self) -> None:
        """Compare the marked runs, or the highlighted run's comparison (``eval -m A -m B``)."""
        run_id = self._selected_id()
        if len(self.marked) >= 2:
            self._compare(list(self.marked), None)
        elif run_id is not None:
            self._compare(None, run_id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_plot":  # only while a training run's view shows one plot at a time
            view = self.query_one(TrainView)
            return view.display and view.query_one(RunPlots).single
        return True

    def action_next_plot(self) -> None:
        """The training view's next plot (the list keeps the focus)."""
        self.query_one(TrainView).action_next_plot()
        self.refresh_bindings()

    @work(thread=True, exit_on_error=False, exclusive=True, group="runs-compare")
    def _compare(self, runs: list[str] | None, of_run: str | None) -> None:
        from workbench_app.screens.compare import load_comparison

        conn = self.workbench_app.store.get().conn
        if runs is None:
            comparison = comparison_of(conn, of_run or "")
            if comparison is None:
                notify_ui(self, "mark two runs or more with m, or pick a run of a comparison "
                          "(`workbench eval ENV -m A -m B`)", severity="warning")
                return
            runs = [comparison]
        try:
            result, means = load_comparison(conn, runs)
        except WorkbenchError as e:
            notify_ui(self, str(e), severity="error")
            return
        except Exception as e:
            notify_ui(self, f"comparing failed: {e}", severity="error")
            return
        post_ui(self, self.ComparisonRead(result, means))

    @on(ComparisonRead)
    def _show_comparison(self, event: ComparisonRead) -> None:
        from workbench_app.screens.compare import CompareScreen

        self.app.push_screen(CompareScreen(event.result, event.means))

    def _selected_id(self) -> str | None:
        return self.query_one(RowTable).selected_key()

    @on(DataTable.RowHighlighted, "#runs-table")
    def _on_highlight(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._load_summary(str(event.row_key.value))

    @work(thread=True, exit_on_error=False, exclusive=True, group="runs-summary")
    def _load_summary(self, run_id: str) -> None:
        from workbench.analysis.report import run_summary
        from workbench.store.run_listing import pipeline_members

        entry = self._entry(run_id)
        if entry is not None and "members" in entry:  # a probe's pipeline: its policies' runs
            try:
                found = pipeline_members(self.workbench_app.store.get().conn, run_id)
            except Exception as e:
                notify_ui(self, f"reading pipeline {run_id} failed: {e}", severity="error")
                return
            if found is not None:
                post_ui(self, self.PipelineRead(found))
            return
        try:
            store = self.workbench_app.store.get()
            run = store.get_run(run_id)
            summary = run_summary(store, run_id)
            records = store.train_records(run["id"]) if run["kind"] == "train" else None
            rollouts = read_new_rollouts(store.conn, run["id"]) if records is not None else []
        except WorkbenchError as e:
            notify_ui(self, str(e), severity="error")
            return
        except Exception as e:
            notify_ui(self, f"summarising run {run_id} failed: {e}", severity="error")
            return
        post_ui(self, self.SummaryRead(run, summary, records, rollouts))

    @on(PipelineRead)
    def _show_pipeline(self, event: PipelineRead) -> None:
        if self._selected_id() != event.entry["id"]:
            return
        self.query_one("#run-summary", Static).update(pipeline_renderable(event.entry))
        self.query_one(TrainView).display = False
        self._watch_train(None)

    @on(SummaryRead)
    def _show_summary(self, event: SummaryRead) -> None:
        run, summary, records, rollouts = event.run, event.summary, event.records, event.rollouts
        if self._selected_id() != run["id"]:
            return
        optimizing = run["kind"] == "optimize"
        self.query_one("#run-summary", Static).update(
            optimize_renderable(run) if optimizing else summary_renderable(run, summary))
        if optimizing and run["status"] == "running":  # the search updates its summary as it goes
            self.set_timer(TRAIN_POLL_S, lambda: self._reload_if_selected(run["id"]))
        view = self.query_one(TrainView)
        view.display = records is not None
        if records is not None:
            view.show(run["id"], records, rollouts)
        self._watch_train(run["id"] if records is not None and run["status"] == "running" else None)

    def _reload_if_selected(self, run_id: str) -> None:
        if self.is_mounted and self._selected_id() == run_id:
            self._load_summary(run_id)

    def _watch_train(self, run_id: str | None) -> None:
        """Poll the training run ``run_id`` for new records (``None``: stop polling)."""
        if self._train_timer is not None:
            self._train_timer.stop()
            self._train_timer = None
        if run_id is not None:
            self._train_timer = self.set_interval(TRAIN_POLL_S, self._tick_train)

    def _tick_train(self) -> None:
        view = self.query_one(TrainView)
        if view.run_id is not None:
            self._poll_train(view.run_id, view.last_id, view.last_rollout_pk)

    @work(thread=True, exit_on_error=False, exclusive=True, group="train-poll")
    def _poll_train(self, run_id: str, after_id: int, after_pk: int) -> None:
        try:
            store = self.workbench_app.store.get()
            records = store.train_records(run_id, after_id=after_id)
            rollouts = read_new_rollouts(store.conn, run_id, after_pk)
            status = store.get_run(run_id)["status"]
            counts = run_counts(store.conn, run_id) if rollouts else None
        except Exception as e:
            post_ui(self, self.TrainPolled(run_id, None, [], f"reading training run {run_id} failed: {e}"))
            return
        post_ui(self, self.TrainPolled(run_id, records, rollouts, status, counts))

    @on(TrainPolled)
    def _add_train(self, event: TrainPolled) -> None:
        run_id, records, rollouts, status, counts = event.run_id, event.records, event.rollouts, event.status, \
            event.counts
        view = self.query_one(TrainView)
        if view.run_id != run_id or self._train_timer is None:
            return
        if records is None:
            self._watch_train(None)
            self.notify(status, severity="error")
            return
        view.add(records, rollouts)
        if counts is not None:
            self._update_row(run_id, status, counts)
        if status != "running":  # finished: stop, and show the final status in the list and summary
            self._watch_train(None)
            self.action_refresh()

    def _update_row(self, run_id: str, status: str, counts: tuple[int, int, float | None]) -> None:
        """The run's row in the list as the store has it now, while its panels stream."""
        table = self.query_one(DataTable)
        n, errors, mean = counts
        for key, value in (("status", Text(status, style=STATUS_STYLE.get(status, ""))), ("n", str(n)),
                           ("err", str(errors)), ("reward", fnum(mean))):
            try:
                table.update_cell(run_id, key, value, update_width=True)
            except CellDoesNotExist:  # the list was reloaded without it meanwhile
                return
        for r in self.runs:
            if r["id"] == run_id:
                r.update(status=status, rollouts=n, errors=errors, mean_reward=mean)

    def action_traces(self) -> None:
        run_id = self._selected_id()
        if run_id is None:
            return
        entry = self._entry(run_id)
        if entry is not None and "members" in entry:
            self.notify("a probe's runs are one per policy: Enter lists them, then t on one shows its traces")
            return
        self.app.switch_mode("traces")
        screen = self.app.screen
        if hasattr(screen, "set_filters"):
            screen.set_filters(run_id=run_id)

    def action_stop(self) -> None:
        run_id = self._selected_id()
        if run_id is not None:
            self._stop(run_id)

    @work(thread=True, exit_on_error=False, group="runs-stop")
    def _stop(self, run_id: str) -> None:
        """``workbench stop RUN``: raise the launched run's stop flag; it stops within one step."""
        from workbench_cloud.launch import stop_run

        try:
            rid = stop_run(self.workbench_app.store.get(), run_id)
        except WorkbenchError as e:
            notify_ui(self, str(e), title="stop", severity="warning", timeout=8)
            return
        except Exception as e:
            notify_ui(self, f"stopping run {run_id} failed: {e}", severity="error")
            return
        notify_ui(self, f"asked run {rid} to stop; it stops within one step", title="stop")
