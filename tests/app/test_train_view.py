"""The Runs screen on a training run: the curves (reward + evals, step time, staleness, throughput),
evals, events, newest rollouts, last steps, and the live refresh that reads only what is new."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import DataTable
from textual_plotext import PlotextPlot
from workbench_app.main import WorkbenchApp
from workbench_app.screens.runs import RunsScreen
from workbench_app.widgets.run_plots import RunPlots, points, step_ticks
from workbench_app.widgets.train_view import TrainView, read_new_rollouts

from tests.app.conftest import SIZE, T0, _record, wait_until
from workbench.store import Store

# slow: the Runs screen on a training run, its curves redrawn and refreshed live
pytestmark = pytest.mark.slow

TRAIN = "1114-train1"


def _step(i: int) -> dict[str, float]:
    """Step ``i``'s metrics, as the trainer records them (staleness: mean, max and a histogram by lag)."""
    lag = i % 3
    return {"reward_mean": i / 10, "reward_std": 0.2, "loss": 0.01 * i, "mismatch_kl": 0.0001, "masked_fraction": 0.05,
            "entropy": 0.9, "tokens_per_s": 1234.0 + 100 * lag, "dropped": 0.0, "wait_s": 0.5 * lag, "train_s": 2.0,
            "update_s": 0.3, "staleness_mean": lag / 2, "staleness_max": float(lag), "staleness_0": 8.0 - 4 * (lag > 0),
            f"staleness_{lag}": 4.0 if lag else 8.0}


def add_train_rollouts(path: Path, start: int, n: int) -> None:
    """Rollouts ``start`` .. ``start + n - 1`` of the training run, sampled by policy ``step-(i // 4)``."""
    with Store(path) as store:
        w = store.writer()
        w.submit([_record(TRAIN, "adder", f"step-{i // 4}", i, reward=None if i == 5 else float(i % 3 != 0),
                          error="timeout" if i == 5 else None) for i in range(start, start + n)])
        w.close()


def add_train_run(path: Path, status: str, steps: int, rollouts: int = 0) -> None:
    """A training run between the two fixture runs (second row): an eval, ``steps`` steps, events,
    and ``rollouts`` rollouts."""
    with Store(path) as store:
        store.create_run(TRAIN, kind="train", env_name="adder", model="mock-model", status=status,
                         created_at=T0 + 1800)
        store.record_train(TRAIN, 0, "eval", {"reward_mean": 0.25}, f"{TRAIN}-eval0")
        for i in range(1, steps + 1):
            store.record_train(TRAIN, i, "step", _step(i), f"step-{i}")
        store.record_train(TRAIN, steps, "skipped", _step(0), "NaN loss")
        store.record_train(TRAIN, steps, "event", {"dropped": 4.0}, "dropped a whole batch of 4 stale rollouts")
        store.record_train(TRAIN, steps, "event", {}, f"checkpoint saved at step {steps}")
    if rollouts:
        add_train_rollouts(path, 0, rollouts)


def _text(view: TrainView, wid: str) -> str:
    return str(view.query_one(wid).render())


def _plot(view: TrainView, name: str) -> PlotextPlot:
    return view.query_one(f"#plot-{name}", PlotextPlot)


def _drawn(plot: PlotextPlot) -> str:
    """What the plot shows now, as plain text (plotext draws at the widget's size)."""
    return plot.render().plain


def _braille(text: str) -> int:
    return sum(0x2800 < ord(ch) <= 0x28FF for ch in text)


async def test_train_run_shows_curves_steps_evals_events(make_app: Callable[..., WorkbenchApp],
                                                         store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=3, rollouts=6)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        assert not view.display  # an eval run: just the summary
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
        await pilot.pause()
        table = view.query_one("#train-step-table", DataTable)
        assert table.row_count == 3
        assert table.get_row_at(0) == ["3", "0.300", "0.200", "0.0300", "0.0001", "0.050", "0.900", "1234", "0",
                                       "0.0", "2.0", "0.3"]  # newest first
        assert [table.get_row_at(i)[0] for i in range(3)] == ["3", "2", "1"]
        # the curves: one point per step (the skipped step is not one), the eval at step 0
        s = view.series
        assert (s.steps, s.reward, s.eval_steps, s.eval_reward) == ([1, 2, 3], [0.1, 0.2, 0.3], [0], [0.25])
        assert (s.wait_s, s.lag_mean, s.lag_max) == ([0.5, 1.0, 0.0], [0.5, 1.0, 0.0], [1.0, 2.0, 0.0])
        assert dict(s.lag_hist) == {0: 16, 1: 4, 2: 4}
        reward = _plot(view, "reward")
        assert reward.border_subtitle == "last 0.300 · best 0.300"
        drawn = _drawn(reward)
        assert _braille(drawn) and "●" in drawn  # the training curve and the held-out point
        assert [ln.split() for ln in drawn.splitlines() if ln.strip().startswith("0 ")] == [["0", "1", "2", "3"]]
        assert _plot(view, "staleness").border_subtitle == "rollouts by lag 0:16 1:4 2:4"
        assert "last 2.3 s" in _plot(view, "time").border_subtitle
        assert _plot(view, "throughput").border_subtitle == "last 1,234 · mean 1,334"
        for name in ("time", "staleness", "throughput"):
            assert _braille(_drawn(_plot(view, name))), name
        assert f"step 0: 0.250  {TRAIN}-eval0" in _text(view, "#train-evals")
        events = _text(view, "#train-events")
        for frag in ("step 3 skipped: NaN loss", "dropped a whole batch", "checkpoint saved at step 3"):
            assert frag in events, frag
        # the newest rollouts, newest first, with the policy that sampled them
        stream = view.query_one("#train-rollouts", DataTable)
        assert stream.row_count == 6
        assert [str(c) for c in stream.get_row_at(0)] == ["5.0", "step-1", "timeout", "1", "0.30"]
        assert [str(c) for c in stream.get_row_at(5)] == ["0.0", "step-0", "0.000", "1", "0.25"]
        assert "6 shown" in _text(view, "#train-rollouts-label")
        assert screen._train_timer is None  # finished: nothing to poll
        await pilot.press("down")
        await wait_until(pilot, lambda: not view.display, what="the eval run's summary only")


async def test_plots_are_redrawn_for_a_new_width(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=120)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        await pilot.press("down")
        plots = view.query_one(RunPlots)
        reward = _plot(view, "reward")
        await wait_until(pilot, lambda: view.run_id == TRAIN and reward.size.width and plots._width == reward.size.width,
                         what="the plots drawn at their width")
        narrow = reward.size.width
        assert len(reward.plt.monitor.x[0]) == 2 * narrow  # 120 steps thinned to two points per cell
        await pilot.resize_terminal(200, 50)
        await wait_until(pilot, lambda: reward.size.width > narrow and plots._width == reward.size.width,
                         what="the plots drawn again, wider")
        assert len(reward.plt.monitor.x[0]) == 120  # room for every step now


async def test_a_run_without_steps_says_so(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    with Store(store_file) as store:
        store.create_run(TRAIN, kind="train", env_name="adder", model="mock-model", status="running",
                         created_at=T0 + 1800)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
        await pilot.pause()
        assert "no steps yet" in _drawn(_plot(view, "reward")) and not _braille(_drawn(_plot(view, "reward")))
        assert "no staleness recorded" in _drawn(_plot(view, "staleness"))
        assert "none yet" in _text(view, "#train-rollouts-label")


async def test_running_train_run_refreshes_live(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    add_train_run(store_file, "running", steps=2, rollouts=4)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
        await pilot.pause()
        table = view.query_one("#train-step-table", DataTable)
        stream = view.query_one("#train-rollouts", DataTable)
        assert table.row_count == 2 and stream.row_count == 4 and screen._train_timer is not None
        before = _drawn(_plot(view, "reward"))
        seen_pk = view.last_rollout_pk
        with Store(store_file) as store:
            store.record_train(TRAIN, 3, "step", _step(3), "step-3")
            store.record_train(TRAIN, 3, "eval", {"reward_mean": 0.75}, f"{TRAIN}-eval3")
        add_train_rollouts(store_file, 4, 3)
        await wait_until(pilot, lambda: table.row_count == 3 and stream.row_count == 7, what="the new step and rollouts")
        await pilot.pause()
        assert table.get_row_at(0)[:2] == ["3", "0.300"]
        assert view.series.reward == [0.1, 0.2, 0.3] and view.series.eval_reward == [0.25, 0.75]
        after = _drawn(_plot(view, "reward"))
        assert after != before and after.count("●") == before.count("●") + 1  # the new point and the new eval
        assert _plot(view, "reward").border_subtitle == "last 0.300 · best 0.300"
        assert [str(c) for c in stream.get_row_at(0)][:2] == ["6.0", "step-1"]
        assert view.last_rollout_pk > seen_pk
        assert f"step 3: 0.750  {TRAIN}-eval3" in _text(view, "#train-evals")
        with Store(store_file) as store:
            store.update_run(TRAIN, status="completed")
        await wait_until(pilot, lambda: screen._train_timer is None, what="polling to stop")
        runs = screen.query_one("#runs-table")
        await wait_until(pilot, lambda: "completed" in str(runs.get_cell(TRAIN, "status")), what="the new status")
        assert table.row_count == 3 and stream.row_count == 7  # reloaded once more, nothing twice
        assert view.series.steps == [1, 2, 3]


def test_read_new_rollouts_reads_only_what_is_new(store_file: Path) -> None:
    add_train_run(store_file, "running", steps=1, rollouts=5)
    with Store(store_file) as store:
        first = read_new_rollouts(store.conn, TRAIN)
        assert [r.id for r in first] == [f"{TRAIN}.{i}.0" for i in range(5)]  # oldest first
        assert read_new_rollouts(store.conn, TRAIN, first[-1].pk) == []
        add_train_rollouts(store_file, 5, 2)
        assert [r.id for r in read_new_rollouts(store.conn, TRAIN, first[-1].pk)] == [f"{TRAIN}.5.0", f"{TRAIN}.6.0"]
        # more new than fit: the newest ``limit`` of them, still oldest first
        assert [r.id for r in read_new_rollouts(store.conn, TRAIN, first[1].pk, limit=3)] == [
            f"{TRAIN}.{i}.0" for i in (4, 5, 6)]
        assert [r.id for r in read_new_rollouts(store.conn, TRAIN, limit=2)] == [f"{TRAIN}.5.0", f"{TRAIN}.6.0"]
        assert read_new_rollouts(store.conn, "1114-nothing") == []


def test_long_series_are_thinned_to_bucket_means() -> None:
    xs = list(range(1, 1001))
    px, py = points(xs, [float(x) for x in xs], limit=100)
    assert len(px) == len(py) == 100 and px[0] == 5.5 and py[-1] == 995.5
    assert points([1, 2, 3], [None, float("nan"), 2.0]) == ([3.0], [2.0])
    assert step_ticks(0, 12) == [0, 3, 6, 9, 12] and step_ticks(1, 3) == [1, 2, 3] and step_ticks(4, 4) == [4]


async def test_a_running_run_row_counts_follow_its_rollouts(make_app: Callable[..., WorkbenchApp],
                                                           store_file: Path) -> None:
    """The list row of a run still running (a launched training run) is not frozen at its first read:
    its rollout and error counts and mean reward follow what its panels stream."""
    add_train_run(store_file, "running", steps=1)  # no rollouts yet: "running 0"
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        view = screen.query_one(TrainView)
        runs = screen.query_one("#runs-table", DataTable)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and screen._train_timer is not None,
                         what="the live training view")
        assert [str(runs.get_cell(TRAIN, k)) for k in ("status", "n", "err")] == ["running", "0", "0"]
        add_train_rollouts(store_file, 0, 6)  # rollout 5 failed (a timeout)
        await wait_until(pilot, lambda: str(runs.get_cell(TRAIN, "n")) == "6", what="the row's count")
        assert str(runs.get_cell(TRAIN, "err")) == "1"
        assert str(runs.get_cell(TRAIN, "reward")) == "0.600"  # 3 of the 5 scored
        assert str(runs.get_cell(TRAIN, "status")) == "running"
