"""A held-out eval runs under the very policy it names, however fast the trainer is: the trainer keeps
an eval step's adapter loaded until that eval is recorded, and the orchestrator evaluates every eval
step, also those the trainer passed between two of its polls."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from workbench.store import Store
from workbench.training.algorithms import Branch, TrainRollout
from workbench.training.run_config import resolve

from .helpers import get_json, post_json


def fresh_groups(version: int) -> list[list[TrainRollout]]:
    return [[TrainRollout(f"v{version}.{g}.{i}", f"v{version}.{g}", float(i), [Branch(
        [1, 2, 3, 4, 5], [0.0, 0.0, -1.0, -1.1, -0.9], [0, 0, 1, 1, 1], version)]) for i in range(2)]
        for g in range(2)]


def served(server: str) -> set[str]:
    return {m["id"] for m in get_json(server + "/v1/models")["data"]} - {get_json(server + "/health")["model"]}


def test_an_eval_steps_adapter_stays_loaded_until_its_eval_is_recorded(tiny_dir: Path, server: str,
                                                                        tmp_path: Path) -> None:
    from workbench_local.training.worker import TrainLoop

    store = Store(tmp_path / "wb.db")
    store.create_run("pin", kind="train", env_name="arithmetic", created_at=0.0)
    cfg = resolve(None, {"trainer.model": str(tiny_dir), "loop.max_off_policy_steps": 0, "loop.async_level": 0,
                         "loop.eval_tasks": 2,
                         "loop.eval_every": 2, "loop.max_steps": 6, "loop.rollouts_per_task": 2,
                         "loop.groups_per_step": 2, "loop.checkpoint_every": 0}, "arithmetic")
    loop = TrainLoop(store, "pin", server, tmp_path / "run", cfg)
    try:
        for _ in range(4):
            assert loop.train_once(fresh_groups(loop.trainer.step_count)) == "step"
        # one adapter for new rollouts (max_off_policy_steps 0), and step 2's for its eval, still running
        assert served(server) == {"step-2", "step-4"}
        store.record_train("pin", 2, "eval", {"reward_mean": 0.5}, "pin-eval2")
        assert loop.train_once(fresh_groups(loop.trainer.step_count)) == "step"
        assert served(server) == {"step-4", "step-5"}  # step 4's eval is not recorded yet
        store.record_train("pin", 4, "eval", {"reward_mean": 0.5}, "pin-eval4")
        assert loop.train_once(fresh_groups(loop.trainer.step_count)) == "step"
        assert served(server) == {"step-6"}  # the last step is an eval step too
    finally:
        for name in served(server):  # the server is shared with the other tests
            post_json(server + "/v1/unload_lora_adapter", {"lora_name": name})
        store.close()


def test_the_orchestrator_evaluates_every_eval_step_it_passed(tmp_path: Path) -> None:
    from workbench.training.loop import Orchestrator

    store = Store(tmp_path / "wb.db")
    store.create_run("jump", kind="train", env_name="arithmetic", created_at=0.0)
    cfg = resolve(None, {"loop.eval_tasks": 2, "loop.eval_every": 2, "loop.max_steps": 7, "data.runs": ["sft"],
                         "algorithm.name": "sft"},
                  "arithmetic")
    for step in (1, 2, 3, 4, 5, 6, 7):  # all there before the first poll: the trainer outran it
        store.record_train("jump", step, "step", {}, f"step-{step}")
    orch = Orchestrator(cfg, store, "jump", env=None)  # type: ignore[arg-type]
    evaluated: list[int] = []

    async def evaluate(tasks: list[Any], version: int) -> None:
        evaluated.append(version)

    orch.evaluate = evaluate  # type: ignore[method-assign]
    asyncio.run(orch.run(engine=None, train_tasks=[], eval_tasks=["held-out"]))  # type: ignore[arg-type,list-item]
    assert evaluated == [0, 2, 4, 6, 7]
    store.close()
