"""Token-budget packing, collation (the shift by one) and data-parallel sharding."""

from __future__ import annotations

import random

import pytest
from workbench_local.training.packing import collate, pack, shard

from tests.training.conftest import make_samples
from workbench.training.algorithms import TrainSample


@pytest.mark.parametrize("seed", range(5))
def test_pack_respects_the_budget_and_covers_every_sample_once(seed: int) -> None:
    rng = random.Random(seed)
    lengths = [rng.randint(1, 120) for _ in range(rng.randint(1, 60))]
    budget = rng.choice([64, 128, 300])
    bins = pack(lengths, budget)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    for b in bins:
        width = max(min(lengths[i], budget) for i in b)
        assert len(b) * width <= budget


def test_over_long_samples_are_truncated_to_the_budget() -> None:
    s = make_samples(1, prompt=6, completion=(30, 30))[0]
    assert pack([s.n_tokens], 16) == [[0]]
    mb = collate([s], 16)
    assert mb.input_ids.shape == (1, 16) and mb.truncated == 1 and mb.n_tokens == 16


def test_collate_shifts_targets_and_masks_padding() -> None:
    a = TrainSample([5, 6, 7, 8], [0, 0, 1, 1], [0, 0, -0.5, -0.25], [0, 0, 2.0, 2.0])
    b = TrainSample([9, 10], [0, 1], [0, -0.125], [0, -1.0])
    mb = collate([a, b], 64, pad_id=0)
    assert mb.input_ids.tolist() == [[5, 6, 7, 8], [9, 10, 0, 0]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert mb.target_ids.tolist() == [[6, 7, 8], [10, 0, 0]]
    assert mb.loss_mask.tolist() == [[False, True, True], [True, False, False]]
    assert mb.inference_logprobs.tolist() == [[0, -0.5, -0.25], [-0.125, 0, 0]]
    assert mb.advantages.tolist() == [[0, 2.0, 2.0], [-1.0, 0, 0]]
    assert mb.n_tokens == 6 and mb.n_loss_tokens == 3


def test_shards_are_disjoint_balanced_and_complete() -> None:
    samples = make_samples(9, completion=(1, 40))
    parts = [shard(samples, r, 3) for r in range(3)]
    ids = [s.rollout_id for p in parts for s in p]
    assert sorted(ids) == sorted(s.rollout_id for s in samples)
    loads = [sum(s.n_tokens for s in p) for p in parts]
    assert max(loads) - min(loads) <= max(s.n_tokens for s in samples)
    assert shard(samples, 0, 1) == samples
