"""Training samples with seeds: each rollout's seed comes from the run's ``loop.seed`` and its place
(group, sample), so what the embedded model samples for it does not depend on the order or the company in
which the server gets to it. Checked against the real embedded server: the same seed at concurrency 1 and
at concurrency 8 (batched with the others) gives the same completions; another seed gives others."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench as wb
from tests.helpers import query
from workbench.rollouts.client import ChatClient
from workbench.rollouts.engine import RolloutEngine, rollout_seed
from workbench.store import Store

from .helpers import SERVED


def make_env() -> wb.Environment:
    rubric = wb.Rubric()

    @rubric.reward
    def said_something(completion: str) -> float:
        return float(bool(completion))

    rows = [{"prompt": f"Count on from {n}."} for n in (3, 11, 27, 40)]
    return wb.Environment(name="seeded", tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                          rubric=rubric, sampling=wb.Sampling(temperature=1.0, max_tokens=12))


async def completions(server: str, db: Path, run_id: str, seed: int | None, concurrency: int) -> list[str]:
    store = Store(db)
    store.create_run(run_id, env_name="seeded")
    writer = store.writer()
    env = make_env()
    try:
        async with ChatClient("unused") as client:
            engine = RolloutEngine(env=env, client=client, writer=writer, run_id=run_id, model=SERVED,
                                   base_url=server + "/v1", rollouts_per_task=3, concurrency=concurrency,
                                   sampling_seed=seed)
            await engine.run(list(env.tasks))
    finally:
        writer.close()
        store.close()
    return [r[0] for r in query(db, "SELECT completion FROM rollout WHERE run_id = ? ORDER BY task_index, sample_index",
                                (run_id,))]


async def test_a_seeded_rollout_samples_the_same_whatever_the_concurrency(server: str, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    alone = await completions(server, db, "alone", seed=7, concurrency=1)
    batched = await completions(server, db, "batched", seed=7, concurrency=8)
    other = await completions(server, db, "other", seed=8, concurrency=8)
    assert len(alone) == 12 and alone == batched
    assert other != alone


@pytest.mark.parametrize(("seed", "group", "sample"), [(0, 0, 0), (0, 5, 3), (7, 5, 3), (2**40, 10**9, 7)])
def test_rollout_seeds_are_distinct_by_place_and_fit_a_generator(seed: int, group: int, sample: int) -> None:
    s = rollout_seed(seed, group, sample)
    assert 0 <= s < 2**31
    assert s != rollout_seed(seed, group, sample + 1) and s != rollout_seed(seed, group + 1, sample)
    assert s != rollout_seed(seed + 1, group, sample)
