"""A training run's progress (what ``workbench runs RUN`` prints), as a dashboard: the curves (reward
with held-out evals, step-time split, staleness, throughput), the evals and events, the newest
rollouts streaming in, and the last steps, newest first.

Fed with ``Store.train_records`` dicts in id order and rollout summaries in store order; records
and rollouts already seen are ignored, so the owner can append the result of every poll, and a
poll need only read what is newer than :attr:`TrainView.last_id` and :attr:`TrainView.last_rollout_pk`.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Static
from workbench_app.format import clip, fnum
from workbench_app.widgets.run_plots import RunPlots, TrainSeries
from workbench_app.widgets.tables import RowTable

from workbench.analysis.report import STEP_COLUMNS
from workbench.store.queries import RolloutFilter, RolloutSummary, page_rollouts

TRAIN_ROWS = 20  # steps in the table
NARROW_WIDTH = 110  # narrower: the side column narrows to give the curves room
SHORT_HEIGHT = 20  # shorter: the step table shows fewer rows
MAX_EVENTS = 200
STREAM_ROWS = 50  # newest rollouts listed


def read_new_rollouts(conn: sqlite3.Connection, run_id: str, after_pk: int = 0,
                      limit: int = STREAM_ROWS) -> list[RolloutSummary]:
    """The run's rollouts stored after ``after_pk`` (0: from the start), oldest first, at most the
    newest ``limit``. A keyset read from ``after_pk``, so a poll costs what is new, not the run's size."""
    if after_pk:
        rows = page_rollouts(conn, RolloutFilter(run_id=run_id, sort="created"), limit=limit + 1,
                             after=(after_pk, after_pk))
        if len(rows) <= limit:
            return rows
    return page_rollouts(conn, RolloutFilter(run_id=run_id, sort="-created"), limit=limit)[::-1]


def _event_line(rec: dict[str, Any]) -> Text:
    msg = rec["message"] or rec["kind"]
    if rec["kind"] == "skipped":
        return Text(f"step {rec['step']} skipped: {msg}", style="yellow")
    style = "red" if "fail" in msg else "yellow" if "dropped" in msg else ""
    return Text(f"step {rec['step']}: {msg}", style=style)


def _reward_cell(r: RolloutSummary) -> Text:
    if r.reward is None:
        return Text(str(r.error_kind or "error"), style="red")
    return Text(fnum(r.reward), style="green" if r.reward >= 1 else "yellow" if r.reward > 0 else "")


class TrainView(Vertical):
    """Shows one training run at a time: :meth:`show` starts over, :meth:`add` appends newer records.

    Narrow or short, the side column and the step table give the curves room, and the curves show one plot
    at a time (``p`` the next; see :class:`~workbench_app.widgets.run_plots.RunPlots`)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "next_plot", "Next plot", id="train.next_plot"),
    ]

    DEFAULT_CSS = """
    TrainView { display: none; height: 3fr; border-top: solid $primary; }
    TrainView #train-main { width: 1fr; }
    TrainView #train-step-table { height: 8; }
    TrainView #train-side { width: 46; border-left: solid $primary; }
    TrainView.-narrow #train-side { width: 28; }
    TrainView.-short #train-step-table { height: 4; }
    TrainView #train-log { height: 1fr; padding: 0 1; }
    TrainView #train-rollouts-label { height: 2; padding: 0 1; border-top: solid $primary; }
    TrainView #train-rollouts { height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_id: str | None = None
        self.last_id = 0
        self.last_rollout_pk = 0
        self.series = TrainSeries()
        self.steps: deque[dict[str, Any]] = deque(maxlen=TRAIN_ROWS)
        self.evals: list[dict[str, Any]] = []
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.rollouts: deque[RolloutSummary] = deque(maxlen=STREAM_ROWS)

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW_WIDTH, "-narrow")
        self.set_class(self.size.height < SHORT_HEIGHT, "-short")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "next_plot":
            return self.query_one(RunPlots).single  # the grid shows every plot: no key to show
        return True

    def action_next_plot(self) -> None:
        """Show the next plot (when one is shown at a time)."""
        self.query_one(RunPlots).action_next_plot()

    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical(id="train-main"):
                yield RunPlots(id="train-plots")
                yield RowTable(id="train-step-table", cursor_type="row", zebra_stripes=True)
            with Vertical(id="train-side"):
                with VerticalScroll(id="train-log"):
                    yield Static(id="train-evals")
                    yield Static(id="train-events")
                yield Static("newest rollouts", id="train-rollouts-label")
                yield RowTable(id="train-rollouts", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one("#train-step-table", DataTable)
        table.add_column("step", key="step")
        for title, key, _ in STEP_COLUMNS:
            table.add_column(title, key=key)
        stream = self.query_one("#train-rollouts", DataTable)
        for title in ("task.s", "policy", "reward", "turns", "secs"):
            stream.add_column(title, key=title)

    def show(self, run_id: str, records: list[dict[str, Any]],
             rollouts: list[RolloutSummary] | None = None) -> None:
        self.run_id, self.last_id, self.last_rollout_pk = run_id, 0, 0
        self.series = TrainSeries()
        self.steps.clear()
        self.evals.clear()
        self.events.clear()
        self.rollouts.clear()
        self.add(records, rollouts or [], force=True)

    def add(self, records: list[dict[str, Any]], rollouts: list[RolloutSummary] | None = None,
            force: bool = False) -> None:
        """Append what a poll read: records newer than :attr:`last_id`, rollouts after :attr:`last_rollout_pk`."""
        new_rollouts = [r for r in rollouts or [] if r.pk > self.last_rollout_pk]
        if new_rollouts or force:
            self.rollouts.extend(new_rollouts)
            if new_rollouts:
                self.last_rollout_pk = new_rollouts[-1].pk
            self._show_rollouts()
        new = [r for r in records if r["id"] > self.last_id]
        if not new and not force:
            return
        plotted = False
        for rec in new:
            plotted = self.series.add(rec) or plotted
            if rec["kind"] == "step":
                self.steps.append(rec)
            elif rec["kind"] == "eval":
                self.evals.append(rec)
            else:
                self.events.append(rec)
        if new:
            self.last_id = new[-1]["id"]
        if plotted or force:
            self.query_one(RunPlots).draw(self.series)
        self._update_widgets()

    def _show_rollouts(self) -> None:
        table = self.query_one("#train-rollouts", DataTable)
        table.clear()
        for r in reversed(self.rollouts):
            table.add_row(f"{r.task_index}.{r.sample_index}", clip(r.model, 12), _reward_cell(r), str(r.turns),
                          f"{r.duration_s:.2f}", key=r.id)
        label = Text("newest rollouts", style="bold")
        label.append(f"  {len(self.rollouts)} shown" if self.rollouts else "  none yet", style="dim")
        self.query_one("#train-rollouts-label", Static).update(label)

    def _update_widgets(self) -> None:
        evals = Text("held-out evals", style="bold")
        for rec in reversed(self.evals):
            evals.append(f"\nstep {rec['step']}: {fnum(rec['metrics'].get('reward_mean'))}  ")
            evals.append(rec["message"], style="dim")
        if not self.evals:
            evals.append("\nnone yet", style="dim")
        self.query_one("#train-evals", Static).update(evals)
        events = Text("events", style="bold")
        for rec in reversed(self.events):
            events.append("\n").append_text(_event_line(rec))
        if not self.events:
            events.append("\nnone", style="dim")
        self.query_one("#train-events", Static).update(events)
        table = self.query_one("#train-step-table", DataTable)
        table.clear()
        for rec in reversed(self.steps):
            m = rec["metrics"]
            table.add_row(str(rec["step"]), *(fnum(m.get(key), digits) for _, key, digits in STEP_COLUMNS),
                          key=str(rec["id"]))
