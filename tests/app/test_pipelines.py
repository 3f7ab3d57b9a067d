"""Pipelines in the app's Runs screen: an optimisation's candidates and scores update live while it runs
(the search rewrites its run's summary), a stage run names its pipeline, and `c` on the optimisation
opens its held-out before/after comparison."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.widgets import DataTable
from workbench_app.main import WorkbenchApp
from workbench_app.screens.compare import CompareScreen
from workbench_app.screens.runs import RunsScreen

from tests.app.conftest import T0, _record, screen_text, wait_until
from workbench.store import Store

PID = "opt-0000feed"
BEFORE, AFTER = "1114-before", "1114-after0"
SEED, BETTER = "Answer with a number.", "Work it out step by step, then give only the final integer."


def _candidates(*scores: float | None) -> list[dict[str, Any]]:
    prompts = [SEED, BETTER]
    return [{"index": i, "prompt": prompts[i], "parent": None if i == 0 else 0, "score": s, "mean_reward": s,
             "rollouts": 10, "runs": []} for i, s in enumerate(scores)]


def _add_optimisation(path: Path) -> None:
    store = Store(path)
    try:
        store.create_run(PID, kind="optimize", env_name="adder", env_version="0123456789ab", env_source="test",
                         model="mock-model", n_tasks=30, rollouts_per_task=1, status="running", created_at=T0 + 9000,
                         config={"pipeline": {"id": PID, "kind": "optimize", "stage": "optimize"}},
                         summary={"status": "running", "env": "adder", "model": "mock-model",
                                  "reflection_model": "reflector", "evals": 10, "max_evals": 120,
                                  "heldout_tasks": 12, "candidates": _candidates(0.3),
                                  "heldout_before": {"run_id": BEFORE, "mean_reward": 0.5}})
        for run, good in ((BEFORE, False), (AFTER, True)):
            store.create_run(run, kind="eval", env_name="adder", env_version="0123456789ab", env_source="test",
                             model="mock-model", n_tasks=12, rollouts_per_task=1, status="completed",
                             created_at=T0 + 9001 + good, finished_at=T0 + 9030,
                             config={"comparison_id": PID, "pipeline": {
                                 "id": PID, "kind": "optimize", "stage": "heldout-after" if good else "heldout-before"}})
            w = store.writer()
            w.submit([_record(run, "adder", "mock-model", i, reward=1.0 if good or i % 2 else 0.0) for i in range(12)])
            w.close()
    finally:
        store.close()


async def test_an_optimisation_shows_its_candidates_live_and_opens_its_comparison(
        make_app: Callable[..., WorkbenchApp], store_file: Path) -> None:
    _add_optimisation(store_file)
    app = make_app(mode="runs")
    async with app.run_test(size=(160, 50)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await wait_until(pilot, lambda: len(screen.runs) == 5, what="the runs")
        table = screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(PID))
        await wait_until(pilot, lambda: "optimisation" in screen_text(app)
                         and "10 of 120 rollouts" in screen_text(app), what="the optimisation's summary")
        text = screen_text(app)
        assert "reflector" in text and "before 0.500" in text and "Answer with a" in text, text
        assert "Work it out" not in text, "no second candidate yet"

        store = Store(store_file)
        try:
            run = store.get_run(PID)
            store.update_run(PID, summary={**run["summary"], "evals": 60, "candidates": _candidates(0.3, 0.9),
                                           "best_prompt": BETTER})
        finally:
            store.close()
        await wait_until(pilot, lambda: "60 of 120 rollouts" in screen_text(app), what="the live update")
        text = screen_text(app)
        assert text.index("Work it out") < text.index("Answer with a"), "the best candidate first"

        table.move_cursor(row=table.get_row_index(AFTER))
        await wait_until(pilot, lambda: "pipeline" in screen_text(app) and "heldout-after" in screen_text(app),
                         what="the stage's pipeline line")

        table.move_cursor(row=table.get_row_index(PID))
        await pilot.press("c")
        cmp = await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen,
                               what="the before/after comparison")
        assert cmp.runs == [BEFORE, AFTER]
