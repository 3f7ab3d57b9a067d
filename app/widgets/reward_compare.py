"""The reward distribution before and after a re-score, side by side.

Two textual-plotext bar charts over the same bins and the same count axis (so the bars compare
directly), mean and standard error in their titles, then a table of every reward and metric (mean
before and after, rollouts changed, errors) and what was skipped. While a re-score runs it shows
its progress; the numbers come from :class:`workbench.analysis.rescore.RescoreResult` as they are.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, JustifyMethod
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, ProgressBar, Static
from textual_plotext import PlotextPlot
from workbench_app.format import clip, fnum, safe_text

from workbench.analysis.rescore import RescoreResult
from workbench.analysis.reward_stats import Distribution

BEFORE, AFTER = "cyan+", "magenta+"  # plotext colours of the two charts


def mean_text(d: Distribution) -> str:
    """``M (se S) · n N``, the mean and its standard error, as the panel's titles show it."""
    if d.mean is None:
        return "no rollouts"
    err = f" (se {d.stderr:.3f})" if d.n > 1 and d.stderr is not None else ""
    return f"{d.mean:.3f}{err} · n {d.n:,}"


class RewardCompare(Vertical):
    """Before/after histograms, per-function table; :meth:`show_progress` then :meth:`show_result`."""

    DEFAULT_CSS = """
    RewardCompare { display: none; width: 2fr; height: 22; border-top: solid $primary; border-left: solid $primary;
                    padding: 0 1; }
    RewardCompare #rc-title { height: 1; width: 1fr; }
    RewardCompare #rc-progress { height: 1; }
    RewardCompare #rc-plots { height: 1fr; min-height: 6; }
    RewardCompare PlotextPlot { border: round $foreground 25%; border-title-align: left; height: 1fr; }
    RewardCompare #rc-table { height: auto; max-height: 9; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.result: RescoreResult | None = None

    def compose(self) -> ComposeResult:
        yield Label("", id="rc-title")
        yield ProgressBar(id="rc-progress", show_eta=False)
        with Horizontal(id="rc-plots"):
            yield PlotextPlot(id="rc-before")
            yield PlotextPlot(id="rc-after")
        yield Static("", id="rc-table")

    def show_progress(self, env: str, done: int, total: int | None) -> None:
        """A re-score of ``env`` is running; the last result (if any) stays below until it ends."""
        self.query_one("#rc-title", Label).update(Text.assemble(("re-scoring ", "bold"), (env, "bold"),
                                                                f" from the stored messages… {done:,}/{total or '?'}"))
        bar = self.query_one(ProgressBar)
        bar.display = True
        bar.update(total=total or None, progress=done)

    def show_result(self, res: RescoreResult) -> None:
        self.result = res
        self.query_one(ProgressBar).display = False
        scope = f"run {res.run_id}" if res.run_id else f"{len(res.runs)} run{'s' * (len(res.runs) != 1)}"
        title = Text.assemble((f"{res.env} re-scored: ", "bold"),
                              (f"{res.changed:,} of {res.rescored:,} changed", "bold yellow" if res.changed else "green"),
                              " · ", (f"{res.failed:,} with errors", "bold red" if res.failed else "green"),
                              f" · version {res.env_version} · {scope} · {res.wall_s:.2f} s")
        self.query_one("#rc-title", Label).update(title)
        h = res.histogram
        peak = max(1, h.peak)
        for pid, name, dist, counts, color in (("rc-before", "before", res.before, h.before, BEFORE),
                                               ("rc-after", "after", res.after, h.after, AFTER)):
            widget = self.query_one(f"#{pid}", PlotextPlot)
            plt = widget.plt
            plt.clear_data()
            plt.clear_figure()
            widget.border_title = f"[b]{name}[/b] {mean_text(dist)}"
            if res.rescored:
                centers = [(a + b) / 2 for a, b in zip(h.edges, h.edges[1:], strict=False)]
                plt.bar(centers, counts, color=color, width=0.9 * (h.edges[1] - h.edges[0]))
                plt.ylim(0, peak)
                plt.yticks(sorted({0, peak // 2, peak}))  # counts: whole numbers
                plt.xticks([h.edges[0], h.edges[len(h.edges) // 2], h.edges[-1]],
                           [fnum(h.edges[0], 2), fnum(h.edges[len(h.edges) // 2], 2), fnum(h.edges[-1], 2)])
            else:
                plt.title("nothing re-scored")
                plt.frame(False)
                plt.xticks([])
                plt.yticks([])
            widget.refresh()
        self.query_one("#rc-table", Static).update(self._table(res))

    def _table(self, res: RescoreResult) -> Group:
        t = Table(box=None, pad_edge=False, show_edge=False, expand=True)
        columns: tuple[tuple[str, JustifyMethod], ...] = (("function", "left"), ("kind", "left"), ("before", "right"),
                                                          ("after", "right"), ("changed", "right"), ("errors", "right"))
        for col, just in columns:
            t.add_column(col, justify=just, no_wrap=True)
        t.add_row(Text("weighted total", style="bold"), "", fnum(res.before.mean), fnum(res.after.mean),
                  f"{res.changed:,}", f"{res.failed:,}")
        for f in res.functions:
            t.add_row(safe_text(f.name), f.kind, fnum(f.before.mean), fnum(f.after.mean), f"{f.changed:,}",
                      Text(f"{f.errors:,}", style="bold red" if f.errors else ""))
        notes = [Text.assemble((f"{name}: ", "bold red"), clip(res.error_examples.get(name, ""), 160))
                 for name in res.errors]
        notes += [Text(f"skipped {n:,}: {clip(reason, 160)}", style="yellow") for reason, n in res.skipped.items()]
        if res.kept:
            notes.append(Text(f"kept as stored: {', '.join(res.kept)}", style="dim"))
        return Group(t, *notes)
