"""A training run's curves, drawn with textual-plotext: reward per step with the held-out evals,
the step time split into wait / train / weight update, staleness (policy-version lag of the
rollouts trained on) and trainer throughput.

:class:`TrainSeries` keeps the numbers, extended record by record as the Runs screen polls the
store (``Store.train_records``; what the trainer records is listed in local_runtime/training/trainer.py
and local_runtime/training/worker.py); :class:`RunPlots` redraws from it only when a record changed something.
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


def legend(title: str, *items: tuple[str, str]) -> str:
    """A plot's border title: its name, then each series' name in its colour (markup)."""
    return " ".join([f"[b]{title}[/b]", *(f"[{COLORS[c][1]}]━{name}[/]" for name, c in items)])


class RunPlots(Grid):
    """Four plots in a 2 x 2 grid; :meth:`draw` redraws them from a :class:`TrainSeries`."""

    DEFAULT_CSS = """
    RunPlots { grid-size: 2 2; grid-gutter: 0 1; height: 1fr; }
    RunPlots > PlotextPlot { border: round $foreground 25%; border-title-align: left; height: 1fr; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.series: TrainSeries | None = None  # what was drawn last, redrawn on resize
        self._width = 0

    def on_resize(self) -> None:
        self.call_after_refresh(self._redraw_if_resized)  # once the plots themselves have their new size

    def _redraw_if_resized(self) -> None:
        """Series are thinned to the plots' width: draw them again at a new width."""
        width = self.query_one("#plot-reward", PlotextPlot).size.width
        if self.series is not None and width != self._width:
            self.draw(self.series)

    def compose(self) -> ComposeResult:
        for pid in ("plot-reward", "plot-time", "plot-staleness", "plot-throughput"):
            yield PlotextPlot(id=pid)

    def _start(self, pid: str, title: str, subtitle: str = "") -> tuple[PlotextPlot, Any]:
        widget = self.query_one(f"#{pid}", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        widget.border_title, widget.border_subtitle = title, subtitle
        return widget, plt

    def _line(self, widget: PlotextPlot, s: TrainSeries, ys: list[float | None], color: str) -> bool:
        xs, vs = points(s.steps, ys, min(MAX_POINTS, max(40, POINTS_PER_CELL * widget.size.width)))
        plt = widget.plt
        if xs:
            plt.plot(xs, vs, marker="braille", color=COLORS[color][0])
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
        self.series, self._width = s, self.query_one("#plot-reward", PlotextPlot).size.width
        lo = min([*s.steps[:1], *s.eval_steps[:1]], default=0)
        hi = max([*s.steps[-1:], *s.eval_steps], default=0)
        rewards = [r for r in s.reward if r is not None]
        sub = f"last {fnum(rewards[-1])} · best {fnum(max(rewards))}" if rewards else ""
        widget, plt = self._start("plot-reward", legend("reward", ("train", "blue"), ("eval", "magenta")), sub)
        drawn = self._line(widget, s, s.reward, "blue")
        if s.eval_steps:
            plt.scatter(s.eval_steps, s.eval_reward, marker="●", color=COLORS["magenta"][0])
        self._finish(widget, plt, lo, hi, drawn or bool(s.eval_steps), "no steps yet")

        times = [sum(v or 0.0 for v in t) for t in zip(s.wait_s, s.train_s, s.update_s, strict=True)]
        widget, plt = self._start("plot-time", legend("step s", ("wait", "yellow"), ("train", "green"),
                                                      ("update", "red")),
                                  f"last {times[-1]:.1f} s · total {sum(times):,.0f} s" if times else "")
        drawn = False
        for ys, color in ((s.wait_s, "yellow"), (s.train_s, "green"), (s.update_s, "red")):
            drawn = self._line(widget, s, ys, color) or drawn
        self._finish(widget, plt, lo, hi, drawn, "no steps yet")

        hist = " ".join(f"{lag}:{n:,}" for lag, n in sorted(s.lag_hist.items()))
        widget, plt = self._start("plot-staleness", legend("policy lag", ("mean", "blue"), ("max", "red")),
                                  f"rollouts by lag {hist}" if hist else "")
        drawn = self._line(widget, s, s.lag_max, "red")
        drawn = self._line(widget, s, s.lag_mean, "blue") or drawn
        self._finish(widget, plt, lo, hi, drawn, "no staleness recorded")

        tps = [v for v in s.tokens_per_s if v is not None]
        widget, plt = self._start("plot-throughput", legend("trainer tokens/s"),
                                  f"last {tps[-1]:,.0f} · mean {sum(tps) / len(tps):,.0f}" if tps else "")
        drawn = self._line(widget, s, s.tokens_per_s, "blue")
        self._finish(widget, plt, lo, hi, drawn, "no steps yet")
