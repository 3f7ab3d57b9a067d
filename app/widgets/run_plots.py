"""A training run's curves, drawn with textual-plotext: reward per step with the held-out evals,
the step time split into wait / train / weight update, staleness (policy-version lag of the
rollouts trained on) and trainer throughput.

:class:`TrainSeries` keeps the numbers, extended record by record as the Runs screen polls the
store (``Store.train_records``; what the trainer records is listed in local_runtime/training/trainer.py
and local_runtime/training/worker.py); :class:`RunPlots` redraws from it only when a record changed something.

Wide, the four plots share a 2 x 2 grid; narrow (a cell would be too small to read), one plot fills the
space and ``p`` (:meth:`RunPlots.action_next_plot`) shows the next. Each plot's border title is its legend:
the first series is a line (``━``), every other one is drawn with its own marker character, so the legend
names each series by its glyph as well as by its colour.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from textual.app import ComposeResult
from textual.containers import Grid
from textual_plotext import PlotextPlot
from workbench_app.format import fnum

MAX_POINTS = 400  # longer series are drawn as bucket means: a terminal cannot show more anyway
#: Braille draws two points per cell across; more points cost drawing time (on the UI thread) for nothing.
POINTS_PER_CELL = 2
# plotext colour names and the Rich names of the same terminal colours (for the legends in titles)
COLORS = {c: (f"{c}+", f"bright_{c}") for c in ("blue", "green", "red", "yellow", "magenta")}
#: The plots, in the order ``p`` cycles them, and the name each goes by.
PLOTS = {"plot-reward": "reward", "plot-time": "step time", "plot-staleness": "policy lag",
         "plot-throughput": "throughput"}
#: The least size of one plot (border included) the grid gives each; below it one plot is shown at a time.
GRID_MIN_WIDTH, GRID_MIN_HEIGHT = 30, 7
#: The glyph that stands for a braille line in a legend.
LINE = "━"


@dataclass(slots=True)
class TrainSeries:
    """Per-step series of one training run. Only ``step`` records are plotted (a skipped step
    changed no weights); ``eval`` records add held-out points."""

    steps: list[int] = field(default_factory=list)
    reward: list[float | None] = field(default_factory=list)
    wait_s: list[float | None] = field(default_factory=list)
    train_s: list[float | None] = field(default_factory=list)
    update_s: list[float | None] = field(default_factory=list)
    lag_mean: list[float | None] = field(default_factory=list)
    lag_max: list[float | None] = field(default_factory=list)
    tokens_per_s: list[float | None] = field(default_factory=list)
    lag_hist: Counter[int] = field(default_factory=Counter)  # rollouts by policy-version lag, whole run
    eval_steps: list[int] = field(default_factory=list)
    eval_reward: list[float] = field(default_factory=list)

    def add(self, rec: dict[str, Any]) -> bool:
        """Take one ``train_records`` dict; True when it adds something to plot."""
        m = rec.get("metrics") or {}
        if rec["kind"] == "eval" and m.get("reward_mean") is not None:
            self.eval_steps.append(rec["step"])
            self.eval_reward.append(m["reward_mean"])
            return True
        if rec["kind"] != "step":
            return False
        self.steps.append(rec["step"])
        for name, key in (("reward", "reward_mean"), ("wait_s", "wait_s"), ("train_s", "train_s"),
                          ("update_s", "update_s"), ("lag_mean", "staleness_mean"), ("lag_max", "staleness_max"),
                          ("tokens_per_s", "tokens_per_s")):
            getattr(self, name).append(m.get(key))
        for key, count in m.items():
            lag = key.removeprefix("staleness_")
            if lag.isdigit():
                self.lag_hist[int(lag)] += int(count)
        return True


def points(xs: list[int], ys: list[float | None], limit: int = MAX_POINTS) -> tuple[list[float], list[float]]:
    """The (x, y) pairs that have a value, as at most ``limit`` bucket means."""
    pairs = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True)
             if y is not None and math.isfinite(y)]
    if len(pairs) <= limit:
        return [p[0] for p in pairs], [p[1] for p in pairs]
    size = len(pairs) / limit
    out_x, out_y = [], []
    for i in range(limit):
        chunk = pairs[int(i * size):int((i + 1) * size)] or pairs[-1:]
        out_x.append(sum(p[0] for p in chunk) / len(chunk))
        out_y.append(sum(p[1] for p in chunk) / len(chunk))
    return out_x, out_y


def step_ticks(lo: int, hi: int, n: int = 5) -> list[int]:
    """Up to ``n`` whole-number ticks from ``lo`` to ``hi`` (steps are integers; plotext would say 0.5)."""
    if hi <= lo:
        return [lo]
    step = max(1, math.ceil((hi - lo) / (n - 1)))
    return list(range(lo, hi + 1, step))


def legend(title: str, *items: tuple[str, str, str]) -> str:
    """A plot's border title: its name, then each series as ``glyph name`` in its colour (markup); the
    glyph (``━`` for the line, else the series' marker) tells the series apart without colour."""
    return " ".join([f"[b]{title}[/b]", *(f"[{COLORS[c][1]}]{glyph}[/] {name}" for name, glyph, c in items)])


class RunPlots(Grid):
    """The four plots, in a 2 x 2 grid or one at a time (see the module docstring); :meth:`draw` redraws
    them from a :class:`TrainSeries`."""

    DEFAULT_CSS = """
    RunPlots { grid-size: 2 2; grid-gutter: 0 1; height: 1fr; }
    RunPlots.-single { grid-size: 1 1; grid-gutter: 0; }
    RunPlots > PlotextPlot { border: round $foreground 25%; border-title-align: left; height: 1fr; }
    """
    can_focus = True  # so that the training view's ``p`` reaches it from the plots too

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.series: TrainSeries | None = None  # what was drawn last, redrawn on resize
        self._width = 0
        self.current = 0  # the plot shown when one is shown at a time
        self.single = False

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw_if_resized)  # once the plots themselves have their new size

    def _redraw_if_resized(self) -> None:
        """One plot at a time when a grid cell would be too small; series are thinned to the plots' width:
        draw them again at a new width."""
        single = self.size.width < 2 * GRID_MIN_WIDTH + 1 or self.size.height < 2 * GRID_MIN_HEIGHT
        if single != self.single:
            self.single = single
            self._show_current()
            self.screen.refresh_bindings()  # the next-plot key shows only while one plot is shown
            self.call_after_refresh(self._redraw_if_resized)
            return
        width = self._shown().size.width
        if self.series is not None and width != self._width:
            self.draw(self.series)

    def _shown(self) -> PlotextPlot:
        return self.query_one(f"#{list(PLOTS)[self.current if self.single else 0]}", PlotextPlot)

    def _show_current(self) -> None:
        self.set_class(self.single, "-single")
        for i, plot in enumerate(self.query(PlotextPlot)):
            plot.display = not self.single or i == self.current
        self.screen.refresh_bindings()  # the training view's ``p`` is shown only now

    def action_next_plot(self) -> None:
        """Show the next plot (one at a time, at a narrow size)."""
        self.current = (self.current + 1) % len(PLOTS)
        self._show_current()
        if self.series is not None:
            self.call_after_refresh(self.draw, self.series)

    def compose(self) -> ComposeResult:
        for pid in PLOTS:
            yield PlotextPlot(id=pid)

    def _start(self, pid: str, title: str, subtitle: str = "") -> tuple[PlotextPlot, Any]:
        widget = self.query_one(f"#{pid}", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        if self.single:
            title += f" [dim]{list(PLOTS).index(pid) + 1}/{len(PLOTS)}[/]"
        widget.border_title, widget.border_subtitle = title, subtitle
        return widget, plt

    def _line(self, widget: PlotextPlot, s: TrainSeries, ys: list[float | None], color: str,
              glyph: str = LINE) -> bool:
        """One series: a braille line (``glyph`` ``━``), or points drawn with ``glyph``."""
        per_cell = POINTS_PER_CELL if glyph == LINE else 1  # a marker character fills its cell
        xs, vs = points(s.steps, ys, min(MAX_POINTS, max(40, per_cell * widget.size.width)))
        plt = widget.plt
        if xs:
            plt.plot(xs, vs, marker="braille" if glyph == LINE else glyph, color=COLORS[color][0])
        return bool(xs)

    def _finish(self, widget: PlotextPlot, plt: Any, lo: int, hi: int, drawn: bool, empty: str) -> None:
        if drawn:
            plt.xticks(step_ticks(lo, hi))
        else:  # no axes around nothing: just say why
            plt.title(empty)
            plt.frame(False)
            plt.xticks([])
            plt.yticks([])
        widget.refresh()

    def draw(self, s: TrainSeries) -> None:
        self.series, self._width = s, self._shown().size.width
        lo = min([*s.steps[:1], *s.eval_steps[:1]], default=0)
        hi = max([*s.steps[-1:], *s.eval_steps], default=0)
        rewards = [r for r in s.reward if r is not None]
        sub = f"last {fnum(rewards[-1])} · best {fnum(max(rewards))}" if rewards else ""
        widget, plt = self._start("plot-reward", legend("reward", ("train", LINE, "blue"), ("eval", "●", "magenta")),
                                  sub)
        drawn = self._line(widget, s, s.reward, "blue")
        if s.eval_steps:
            plt.scatter(s.eval_steps, s.eval_reward, marker="●", color=COLORS["magenta"][0])
        self._finish(widget, plt, lo, hi, drawn or bool(s.eval_steps), "no steps yet")

        times = [sum(v or 0.0 for v in t) for t in zip(s.wait_s, s.train_s, s.update_s, strict=True)]
        widget, plt = self._start("plot-time", legend("step s", ("train", LINE, "green"), ("wait", "w", "yellow"),
                                                      ("update", "u", "red")),
                                  f"last {times[-1]:.1f} s · total {sum(times):,.0f} s" if times else "")
        drawn = False
        for ys, color, glyph in ((s.train_s, "green", LINE), (s.wait_s, "yellow", "w"), (s.update_s, "red", "u")):
            drawn = self._line(widget, s, ys, color, glyph) or drawn
        self._finish(widget, plt, lo, hi, drawn, "no steps yet")

        hist = " ".join(f"{lag}:{n:,}" for lag, n in sorted(s.lag_hist.items()))
        widget, plt = self._start("plot-staleness", legend("policy lag", ("mean", LINE, "blue"), ("max", "x", "red")),
                                  f"rollouts by lag {hist}" if hist else "")
        drawn = self._line(widget, s, s.lag_max, "red", "x")
        drawn = self._line(widget, s, s.lag_mean, "blue") or drawn
        self._finish(widget, plt, lo, hi, drawn, "no staleness recorded")

        tps = [v for v in s.tokens_per_s if v is not None]
        widget, plt = self._start("plot-throughput", legend("trainer tokens/s"),
                                  f"last {tps[-1]:,.0f} · mean {sum(tps) / len(tps):,.0f}" if tps else "")
        drawn = self._line(widget, s, s.tokens_per_s, "blue")
        self._finish(widget, plt, lo, hi, drawn, "no steps yet")
