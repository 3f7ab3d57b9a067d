"""FSDP2 sharding on CPU: 1, 2 and 4 gloo processes holding a shard each take the same step as one
process holding everything — the loss, the gathered gradients, the updated weights — for LoRA and full
fine-tuning, with and without shared-prefix packing; and each rank holds its share of the state."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import torch
from workbench_local.training.distributed import launch
from workbench_local.training.losses import build_loss
from workbench_local.training.trainer import Trainer, TrainerConfig

from tests.training.conftest import make_samples
from workbench.errors import ConfigError

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

LR = 1e-2
#: name -> trainer settings; every case trains with a KL term, so the reference (a sharded copy under full
#: fine-tuning, the adapter switched off under LoRA) runs under FSDP too
CASES: dict[str, dict[str, Any]] = {
    "lora-packed": {"lora": True, "shared_prefix": True},
    "lora-unpacked": {"lora": True, "shared_prefix": False},
    "full-packed": {"lora": False, "shared_prefix": True},
    "full-unpacked": {"lora": False, "shared_prefix": False},
    "full-packed-checkpointed": {"lora": False, "shared_prefix": True, "gradient_checkpointing": True},
}
WORLD_SIZES = (1, 2, 4)


def _config(model: str, case: str) -> TrainerConfig:
    # adam_eps well above float noise: a gradient that is ~0 up to summation order moves no weight visibly
    return TrainerConfig(model=model, lr=LR, micro_batch_tokens=48, max_grad_norm=0.5, adam_eps=1e-4,
                         sharding="fsdp", **CASES[case])


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _train_case(model: str, case: str) -> dict[str, Any]:
    t = Trainer(_config(model, case), loss=build_loss("pg", kl_coef=0.1))
    grads: list[dict[str, torch.Tensor]] = []  # the gradients each optimizer step applies, gathered whole
    t.optimizer.register_step_pre_hook(
        lambda *_: grads.append({n: _full(p.grad) for n, p in t.model.named_parameters() if p.grad is not None}))
    samples = make_samples(5, seed=7)
    metrics = [t.step(samples).metrics, t.step(samples).metrics, t.step(samples[:1]).metrics]
    metrics.append(t.evaluate(samples[:3]))  # forward passes only (collectives too): the same loss
    weights = {n: _full(p) for n, p in t.model.named_parameters() if p.requires_grad}
    return {"metrics": metrics, "grads": grads, "weights": weights, "state": t.state_bytes, "sharded": t.sharded}


def _train(rank: int, world_size: int, model: str) -> dict[str, Any]:
    """Every case: two steps on five samples (shards of unequal size), then one on a single sample (the
    other ranks have no micro-batch at all and pad with zero-weight passes)."""
    return {case: _train_case(model, case) for case in CASES}


@cache
def _runs(model: str, ranks: int) -> list[dict[str, Any]]:
    """Each rank's results with ``ranks`` gloo processes; 0: one process, no process group, nothing sharded."""
    if ranks == 0:
        torch.set_num_threads(1)
        return [_train(0, 1, model)]
    return launch(_train, ranks, model, backend="gloo", threads_per_rank=1)


@pytest.mark.timeout(900)  # the first test of a world size starts its processes (minutes on a loaded machine)
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("ranks", WORLD_SIZES)
def test_fsdp_step_equals_one_process(tiny_model: str, case: str, ranks: int) -> None:
    single = _runs(tiny_model, 0)[0][case]
    sharded = _runs(tiny_model, ranks)
    assert not single["sharded"] and all(r[case]["sharded"] for r in sharded)
    for r in sharded:
        run = r[case]
        assert len(run["metrics"]) == 4  # three steps and an evaluation
        for step, (want, got) in enumerate(zip(single["metrics"], run["metrics"], strict=True)):
            for key in ("loss", "kl", "entropy", "tokens", "loss_tokens", "samples") + ("grad_norm",) * (step < 3):
                assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (step, key)
        assert len(run["grads"]) == len(single["grads"]) == 3
        for want_g, got_g in zip(single["grads"], run["grads"], strict=True):
            assert want_g.keys() == got_g.keys()
            for name, g in want_g.items():
                assert torch.allclose(got_g[name], g, atol=1e-5, rtol=1e-4), name
        for name, w in single["weights"].items():
            assert torch.allclose(run["weights"][name], w, atol=1e-5, rtol=1e-4), name
    moved = max(float(g.abs().max()) for g in single["grads"][1].values())
    assert moved > 1e-3  # the steps did train (a gradient that vanished everywhere would prove nothing)


@pytest.mark.timeout(900)
def test_each_rank_holds_its_share_of_the_training_state(tiny_model: str) -> None:
    one = _runs(tiny_model, 0)[0]["full-unpacked"]["state"]
    two = [r["full-unpacked"]["state"] for r in _runs(tiny_model, 2)]
    assert sum(s["params"] for s in two) == one["params"] and sum(s["grads"] for s in two) == one["grads"]
    for s in two:
        assert 0.45 <= s["total"] / one["total"] <= 0.55, (s, one)


def test_a_model_fsdp_cannot_shard_is_one_clear_line() -> None:
    from torch import nn
    from workbench_local.training.sharding import check_shardable

    no_layers = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))  # one block: nothing to shard layer by layer
    with pytest.raises(ConfigError) as err:
        check_shardable(no_layers, "bag-of-words")
    assert str(err.value).startswith('trainer.sharding = "fsdp" cannot shard model bag-of-words')
    assert "\n" not in str(err.value)


def _non_finite(rank: int, world_size: int, model: str) -> dict[str, Any]:
    t = Trainer(_config(model, "full-packed"), loss="pg")
    bad = make_samples(5, seed=7)
    bad[0] = make_samples(1, seed=7, advantage=float("inf"))[0]  # one rank's shard holds it, the other's does not
    before = {n: _full(p) for n, p in t.model.named_parameters()}
    skipped = t.step(bad)
    unchanged = all(torch.equal(_full(p), before[n]) for n, p in t.model.named_parameters())
    after = t.step(make_samples(5, seed=7))  # the collectives are still in step: the next batch trains
    return {"skipped": skipped, "unchanged": unchanged, "after": after}


@pytest.mark.timeout(900)
def test_a_non_finite_loss_on_one_rank_skips_the_step_on_every_rank(tiny_model: str) -> None:
    ranks = launch(_non_finite, 2, tiny_model, backend="gloo", threads_per_rank=1)
    reasons = sorted(r["skipped"].reason or "" for r in ranks)
    assert all(r["skipped"].skipped and r["skipped"].step == 0 and r["unchanged"] for r in ranks)
    assert reasons[0].startswith("non-finite loss (") and reasons[1] == "non-finite loss on another rank"
    assert all(not r["after"].skipped and r["after"].step == 1 for r in ranks)
