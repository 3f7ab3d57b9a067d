"""Compare: runs of one environment side by side (``workbench compare`` in the app).

Pushed over Runs (``m`` marks runs, ``c`` compares the marked ones, or the highlighted run's comparison
from ``eval -m A -m B``). The leaderboard (reward with its 95% CI, pass@1, cost per solved task, the
paired difference against the baseline), a cost-versus-reward plot with the Pareto front marked (no
other run is both cheaper and better; each model drawn with its own marker character, which the legend
under the plot names), and the task-by-model matrix, worst regression first, each task named by its index
and the start of its prompt; Enter on a cell opens that task's rollout next to the baseline's (the rollout diff).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static
from textual_plotext import PlotextPlot
from workbench_app.format import clip, fcost, fnum, title, visible
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import notify_ui, post_ui

if TYPE_CHECKING:
    from workbench.analysis.diff import RolloutDiff


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (cheaper or as cheap, and better or as good)."""
    front = []
    for i, (c, r) in enumerate(points):
        if not any((c2 <= c and r2 >= r) and (c2, r2) != (c, r) for c2, r2 in points):
            front.append(i)
    return front


#: The marker each model is drawn with on the cost/reward plot, the baseline first (the legend and the
#: leaderboard name them).
MARKERS = "123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: Their plotext colours, a second cue only: the marker and the legend name the model.
MARKER_COLORS = ("cyan+", "magenta+", "yellow+", "green+", "red+", "blue+")
#: Width of the matrix's task column: the index and the start of the prompt.
TASK_COLUMN = 28


def leaderboard(result: dict[str, Any]) -> Table:
    """One row per run, best first: its plot marker and name, reward ± the 95% CI's half width, pass@1, cost
    per solved task, and the paired difference against the baseline (``*``: significant; green better, red
    worse). The numbers are never cut; the model's name folds."""
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", expand=True)
    for col in ("model", "reward ±95%", "pass@1", "$/solved", "Δ base"):
        t.add_column(col, justify="left" if col == "model" else "right", no_wrap=col != "model",
                     overflow="fold", ratio=2 if col == "model" else None)
    for m in sorted(result["models"], key=lambda m: -(m["mean_reward"] or 0)):
        ci = m["mean_ci95"]
        delta = "base" if m["baseline"] else f"{m['delta']:+.2f}" + ("*" if m["significant"] else "")
        style = "" if m["baseline"] or not m["significant"] else ("green" if m["delta"] > 0 else "red")
        reward = "-" if m["mean_reward"] is None else f"{m['mean_reward']:.2f}" + (
            f"±{(ci[1] - ci[0]) / 2:.2f}" if ci else "")
        marker = MARKERS[result["models"].index(m) % len(MARKERS)]
        t.add_row(Text.assemble((marker, "bold"), " ", visible(m["label"])), reward, fnum(m["pass_at_k"].get("pass@1")),
                  fcost(m["cost_per_solved_task"]), Text(delta, style=style))
    return t


def task_name(result: dict[str, Any], task_id: str, width: int = TASK_COLUMN) -> str:
    """A task as a reader knows it, on one line: ``#index`` and the start of its prompt (the id, a hash,
    only when the comparison has no label for it)."""
    label = result.get("task_labels", {}).get(task_id)
    if not label:
        return clip(visible(task_id), width)
    head = f"#{label['task_index']} "
    return head + clip(visible(label["prompt"]), max(0, width - len(head)))


def plot_legend(result: dict[str, Any], front: set[int]) -> Text:
    """Which marker is which model (the baseline first), ``◆`` after those on the Pareto front."""
    legend = Text()
    for i, m in enumerate(result["models"]):
        if i:
            legend.append("  ")
        legend.append(MARKERS[i % len(MARKERS)], style="bold")
        legend.append(" ")
        legend.append(visible(m["label"]))
        if i in front:
            legend.append(" ◆", style="bold")
    return legend


class CompareScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Compare"
    DEFAULT_CSS = """
    #compare-top { height: 10; }
    #compare-board { width: 2fr; height: 100%; padding: 0 1; }
    #compare-plot-box { width: 1fr; min-width: 26; height: 100%; }
    #compare-plot { height: 1fr; border: round $foreground 25%; border-title-align: left; }
    #compare-legend { height: auto; max-height: 3; padding: 0 1; }
    #compare-matrix { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back", id="compare.back"),
        Binding("enter", "open_cell", "Diff with baseline", id="compare.diff"),
    ]

    def __init__(self, result: dict[str, Any], task_means: dict[str, dict[str, float]]) -> None:
        super().__init__()
        self.result = result
        self.task_means = task_means  # run id -> task id -> mean reward
        self.runs = [m["run_id"] for m in result["models"]]
        base = self.task_means[self.runs[0]]
        worst = {t: min(self.task_means[r].get(t, 0.0) - base.get(t, 0.0) for r in self.runs[1:]) for t in base}
        labels = result.get("task_labels", {})
        # the worst regression first; ties in task order
        self.tasks = sorted(base, key=lambda t: (worst[t], labels.get(t, {}).get("task_index", 0), t))

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            with Horizontal(id="compare-top"):
                board = Static(leaderboard(self.result), id="compare-board", classes="section")
                board.border_title = title(f"{self.result['env']}: {self.result['tasks']} tasks")
                yield board
                with Vertical(id="compare-plot-box"):
                    yield PlotextPlot(id="compare-plot")
                    yield Static(id="compare-legend")
            yield RowTable(id="compare-matrix", cursor_type="cell", zebra_stripes=True)
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.sub_title = f"baseline {self.result['baseline']}"
        for note in self.result["notes"]:
            self.notify(visible(note), severity="warning", markup=False)
        models = self.result["models"]
        points = [(m["cost_usd"], m["mean_reward"] or 0.0) for m in models]
        front = set(pareto(points))
        plot = self.query_one(PlotextPlot)
        plot.border_title = "cost vs reward"
        plot.border_subtitle = "◆ Pareto front"
        plt = plot.plt
        plt.clear_figure()
        for i, (cost, reward) in enumerate(points):
            plt.scatter([cost], [reward], marker=MARKERS[i % len(MARKERS)],
                        color=MARKER_COLORS[i % len(MARKER_COLORS)])
        costs = sorted({c for c, _ in points})
        plt.xticks([costs[0], costs[-1]], [fcost(costs[0]), fcost(costs[-1])])
        self.query_one("#compare-legend", Static).update(plot_legend(self.result, front))
        table = self.query_one(DataTable)
        table.add_column("task", key="task", width=TASK_COLUMN)
        for m in models:
            table.add_column(m["label"] + (" (base)" if m["baseline"] else ""), key=m["run_id"])
        base = self.task_means[self.runs[0]]
        for t in self.tasks:
            cells: list[Any] = [task_name(self.result, t)]
            for run in self.runs:
                v = self.task_means[run].get(t)
                d = None if v is None or run == self.runs[0] else v - base.get(t, 0.0)
                style = "" if not d else ("green" if d > 0 else "red")
                cells.append(Text("-" if v is None else f"{v:.2f}", style=style))
            table.add_row(*cells, key=t)
        if len(self.runs) > 1:
            table.move_cursor(row=0, column=2)

    @on(DataTable.CellSelected, "#compare-matrix")
    def _on_cell(self, event: DataTable.CellSelected) -> None:
        self.action_open_cell()

    def action_open_cell(self) -> None:
        table = self.query_one(DataTable)
        row, col = table.cursor_coordinate
        if not self.tasks or col < 1:
            return
        run = self.runs[col - 1]
        if run == self.runs[0]:
            self.notify("that is the baseline: pick another model's column", severity="information")
            return
        self._open_diff(self.runs[0], run, self.tasks[row])

    class DiffLoaded(Message, bubble=False):
        """The baseline's and another run's rollouts of a task, side by side, ready to show."""

        def __init__(self, diff: RolloutDiff) -> None:
            super().__init__()
            self.diff = diff

    @work(thread=True, exit_on_error=False, group="compare-diff", exclusive=True)
    def _open_diff(self, base_run: str, run: str, task_id: str) -> None:
        from workbench.analysis.diff import load_diff
        from workbench.store.run_lookups import first_rollout_of_task

        conn = self.workbench_app.store.get().conn
        ids = []
        for r in (base_run, run):
            rollout_id = first_rollout_of_task(conn, r, task_id)
            if rollout_id is None:
                notify_ui(self, f"run {r} has no rollout of task {task_id}", severity="warning")
                return
            ids.append(rollout_id)
        try:
            diff = load_diff(conn, ids[0], ids[1])
        except Exception as e:
            notify_ui(self, f"comparing the rollouts failed: {e}", severity="error")
            return
        post_ui(self, self.DiffLoaded(diff))

    @on(DiffLoaded)
    def _diff_loaded(self, event: DiffLoaded) -> None:
        from workbench_app.screens.rollout_diff import RolloutDiffScreen

        self.app.push_screen(RolloutDiffScreen(event.diff))


def load_comparison(conn: Any, runs: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """What the screen shows: ``workbench compare``'s result and each run's per-task means."""
    from workbench.analysis.compare import compare_runs, load_runs

    loaded = load_runs(conn, runs)
    return compare_runs(loaded, allow_mismatch=True), {r.run_id: r.task_means for r in loaded}
