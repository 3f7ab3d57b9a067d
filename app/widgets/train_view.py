"""A training run's progress (what ``workbench runs RUN`` prints): the reward curve, then the held-out
evals, the events and the last steps, newest first. Fed with ``Store.train_records`` dicts in id order;
records already seen are ignored, so the owner can append the result of every poll."""

from __future__ import annotations

from collections import deque
from statistics import fmean
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, Sparkline, Static

from workbench.report import STEP_COLUMNS

from ..format import fnum

TRAIN_ROWS = 20  # steps in the table
MAX_EVENTS = 200


def _event_line(rec: dict[str, Any]) -> Text:
    msg = rec["message"] or rec["kind"]
    if rec["kind"] == "skipped":
        return Text(f"step {rec['step']} skipped: {msg}", style="yellow")
    style = "red" if "fail" in msg else "yellow" if "dropped" in msg else ""
    return Text(f"step {rec['step']}: {msg}", style=style)


class TrainView(Vertical):
    """Shows one training run at a time: :meth:`show` starts over, :meth:`add` appends newer records."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_id: str | None = None
        self.last_id = 0
        self.rewards: list[float] = []
        self.steps: deque[dict[str, Any]] = deque(maxlen=TRAIN_ROWS)
        self.evals: list[dict[str, Any]] = []
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)

    def compose(self) -> ComposeResult:
        with Horizontal(id="train-top"):
            with Vertical(id="train-curve-box"):
                yield Static("no steps yet", id="train-curve-label")
                yield Sparkline([], summary_function=fmean, id="train-curve")
            with VerticalScroll(id="train-log-box"):
                yield Static(id="train-evals")
                yield Static(id="train-events")
        yield DataTable(id="train-steps", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one("#train-steps", DataTable)
        table.add_column("step", key="step")
        for title, key, _ in STEP_COLUMNS:
            table.add_column(title, key=key)

    def show(self, run_id: str, records: list[dict[str, Any]]) -> None:
        self.run_id, self.last_id = run_id, 0
        self.rewards.clear()
        self.steps.clear()
        self.evals.clear()
        self.events.clear()
        self.add(records, force=True)

    def add(self, records: list[dict[str, Any]], force: bool = False) -> None:
        new = [r for r in records if r["id"] > self.last_id]
        if not new and not force:
            return
        for rec in new:
            if rec["kind"] == "step":
                self.steps.append(rec)
                if rec["metrics"].get("reward_mean") is not None:
                    self.rewards.append(rec["metrics"]["reward_mean"])
            elif rec["kind"] == "eval":
                self.evals.append(rec)
            else:
                self.events.append(rec)
        if new:
            self.last_id = new[-1]["id"]
        self._update_widgets()

    def _update_widgets(self) -> None:
        label = "no steps yet"
        if self.rewards:
            label = (f"reward per step ({len(self.rewards)} steps): first {fnum(self.rewards[0])}, "
                     f"last {fnum(self.rewards[-1])}, best {fnum(max(self.rewards))}")
        self.query_one("#train-curve-label", Static).update(label)
        self.query_one("#train-curve", Sparkline).data = list(self.rewards)
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
        table = self.query_one("#train-steps", DataTable)
        table.clear()
        for rec in reversed(self.steps):
            m = rec["metrics"]
            table.add_row(str(rec["step"]), *(fnum(m.get(key), digits) for _, key, digits in STEP_COLUMNS),
                          key=str(rec["id"]))
