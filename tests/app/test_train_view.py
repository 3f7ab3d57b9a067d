"""The Runs screen on a training run: reward curve, evals, events, last steps, and live refresh."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.main import WorkbenchApp
from app.screens.runs import RunsScreen
from app.widgets.train_view import TrainView
from tests.app.conftest import SIZE, T0, wait_until
from workbench.store import Store

TRAIN = "1114-train1"


def _step(i: int) -> dict[str, float]:
    return {"reward_mean": i / 10, "reward_std": 0.2, "loss": 0.01 * i, "mismatch_kl": 0.0001, "masked_fraction": 0.05,
            "entropy": 0.9, "tokens_per_s": 1234.0, "dropped": 0.0, "wait_s": 0.5, "train_s": 2.0, "update_s": 0.3}


def add_train_run(path: Path, status: str, steps: int) -> None:
    """A training run between the two fixture runs (second row): an eval, ``steps`` steps, events."""
    with Store(path) as store:
        store.create_run(TRAIN, kind="train", env_name="adder", model="mock-model", status=status,
                         created_at=T0 + 1800)
        store.record_train(TRAIN, 0, "eval", {"reward_mean": 0.25}, f"{TRAIN}-eval0")
        for i in range(1, steps + 1):
            store.record_train(TRAIN, i, "step", _step(i), f"step-{i}")
        store.record_train(TRAIN, steps, "skipped", _step(0), "NaN loss")
        store.record_train(TRAIN, steps, "event", {"dropped": 4.0}, "dropped a whole batch of 4 stale rollouts")
        store.record_train(TRAIN, steps, "event", {}, f"checkpoint saved at step {steps}")


def _text(view: TrainView, wid: str) -> str:
    return str(view.query_one(wid).render())


async def test_train_run_shows_curve_steps_evals_events(make_app: Callable[..., WorkbenchApp],
                                                        store_file: Path) -> None:
    add_train_run(store_file, "completed", steps=3)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        assert not view.display  # an eval run: just the summary
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
        table = view.query_one("#train-steps")
        assert table.row_count == 3
        assert table.get_row_at(0) == ["3", "0.300", "0.200", "0.0300", "0.0001", "0.050", "0.900", "1234", "0",
                                       "0.5", "2.0", "0.3"]  # newest first
        assert [table.get_row_at(i)[0] for i in range(3)] == ["3", "2", "1"]
        assert view.query_one("#train-curve").data == [0.1, 0.2, 0.3]
        assert "3 steps" in _text(view, "#train-curve-label")
        assert f"step 0: 0.250  {TRAIN}-eval0" in _text(view, "#train-evals")
        events = _text(view, "#train-events")
        for frag in ("step 3 skipped: NaN loss", "dropped a whole batch", "checkpoint saved at step 3"):
            assert frag in events, frag
        assert screen._train_timer is None  # finished: nothing to poll
        await pilot.press("down")
        await wait_until(pilot, lambda: not view.display, what="the eval run's summary only")


async def test_running_train_run_refreshes_live(make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    add_train_run(store_file, "running", steps=2)
    app = make_app(mode="runs")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        view = screen.query_one(TrainView)
        await wait_until(pilot, lambda: len(screen.runs) == 3, what="the runs")
        await pilot.press("down")
        await wait_until(pilot, lambda: view.run_id == TRAIN and view.display, what="the training view")
        table = view.query_one("#train-steps")
        assert table.row_count == 2 and screen._train_timer is not None
        with Store(store_file) as store:
            store.record_train(TRAIN, 3, "step", _step(3), "step-3")
            store.record_train(TRAIN, 3, "eval", {"reward_mean": 0.75}, f"{TRAIN}-eval3")
        await wait_until(pilot, lambda: table.row_count == 3, what="the new step")
        assert table.get_row_at(0)[:2] == ["3", "0.300"]
        assert view.query_one("#train-curve").data == [0.1, 0.2, 0.3]
        assert f"step 3: 0.750  {TRAIN}-eval3" in _text(view, "#train-evals")
        with Store(store_file) as store:
            store.update_run(TRAIN, status="completed")
        await wait_until(pilot, lambda: screen._train_timer is None, what="polling to stop")
        runs = screen.query_one("#runs-table")
        await wait_until(pilot, lambda: "completed" in str(runs.get_cell(TRAIN, "status")), what="the new status")
        assert table.row_count == 3  # reloaded once more, nothing twice
