"""Shared-prefix packing: a group's common prompt runs once per row, and the logprobs, losses and
gradients are those of running every sample alone (the same trainer with ``shared_prefix = false``)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from workbench_local.training import shared_prefix
from workbench_local.training.losses import build_loss
from workbench_local.training.trainer import Trainer, TrainerConfig

from tests.training.conftest import VOCAB
from workbench.training.algorithms import TrainSample


def sample(ids: list[int], mask: list[int], adv: float, group: str, lp: float = -4.0) -> TrainSample:
    return TrainSample(ids, mask, [lp if m else 0.0 for m in mask], [adv if m else 0.0 for m in mask],
                       group_id=group)


def tokens(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def single_turn(seed: int = 0, groups: int = 3, k: int = 4, prompt: int = 7) -> list[TrainSample]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        head = tokens(rng, prompt)
        for _ in range(k):
            c = rng.randint(1, 6)
            out.append(sample(head + tokens(rng, c), [0] * prompt + [1] * c, rng.uniform(-1, 1), f"g{g}"))
    return out


def multi_turn(seed: int = 1) -> list[TrainSample]:
    """Prompt, a reply, the env's turn (not sampled), a second reply."""
    rng = random.Random(seed)
    out = []
    for g in range(2):
        head = tokens(rng, 6)
        for _ in range(3):
            a, env, b = tokens(rng, rng.randint(1, 4)), tokens(rng, 3), tokens(rng, rng.randint(1, 3))
            out.append(sample(head + a + env + b, [0] * 6 + [1] * len(a) + [0] * 3 + [1] * len(b),
                              rng.uniform(-1, 1), f"m{g}"))
    return out


def same_start() -> list[TrainSample]:
    """Replies that begin with the same sampled tokens, one reply equal to another, and a reply that
    is a prefix of another: the shared prefix then holds sampled tokens, each sample's own."""
    head, mask = [5, 6, 7, 8], [0, 0, 0, 0]
    return [sample(head + [20, 21, 22], mask + [1, 1, 1], 1.0, "s"),
            sample(head + [20, 21, 23], mask + [1, 1, 1], -0.5, "s"),
            sample(head + [20, 21, 22], mask + [1, 1, 1], 0.25, "s"),
            sample(head + [20, 21], mask + [1, 1], -1.0, "s")]


def ungrouped_and_unshared() -> list[TrainSample]:
    """Samples without a group, and a group whose samples share no token."""
    rng = random.Random(3)
    return [sample(tokens(rng, 9), [0] * 5 + [1] * 4, 0.7, ""),
            sample(tokens(rng, 6), [0] * 3 + [1] * 3, -0.3, ""),
            sample([10] + tokens(rng, 5), [0, 0, 1, 1, 1, 1], 0.5, "u"),
            sample([11] + tokens(rng, 7), [0, 0, 0, 1, 1, 1, 1, 1], -0.5, "u")]


def long_samples() -> list[TrainSample]:
    """Samples past the micro-batch budget (cut to it), and a group too wide for one row."""
    rng = random.Random(4)
    head = tokens(rng, 10)
    return [sample(head + tokens(rng, 40), [0] * 10 + [1] * 40, 0.5, "L") for _ in range(2)] + \
           [sample(head + tokens(rng, 20), [0] * 10 + [1] * 20, -0.5, "L") for _ in range(3)]


BATCHES = {"single-turn": single_turn, "multi-turn": multi_turn, "same start": same_start,
           "ungrouped": ungrouped_and_unshared, "past the budget": long_samples}
WIDE = {"token_mask_low": 1e-30, "token_mask_high": 1e30}  # keep every token: compare every gradient


def make(model: str, shared: bool, kl: float = 0.0, **kw: object) -> Trainer:
    cfg = TrainerConfig(model=model, lr=1e-2, micro_batch_tokens=48, shared_prefix=shared, temperature=0.8,
                        **kw)  # type: ignore[arg-type]
    return Trainer(cfg, loss=build_loss("pg", kl_coef=kl, **WIDE))


def gradients(t: Trainer, samples: list[TrainSample]) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    mbs, base = t._prepare(samples, True)
    t.model.train()
    t.optimizer.zero_grad(set_to_none=True)
    sums, bad = t._run(mbs, base, backward=True)
    assert bad is None
    grads = {n: p.grad.clone() for n, p in t.model.named_parameters() if p.grad is not None}
    t.optimizer.zero_grad(set_to_none=True)
    return {**base, **{k: float(v) for k, v in sums.items()}}, grads


def assert_same(shared: Trainer, alone: Trainer, samples: list[TrainSample]) -> dict[str, float]:
    ms, gs = gradients(shared, samples)
    ma, ga = gradients(alone, samples)
    for k in ("loss", "entropy", "mismatch_kl", "pg_loss", "kl", "tokens", "loss_tokens", "truncated"):
        if k in ma:
            assert ms[k] == pytest.approx(ma[k], rel=1e-5, abs=1e-7), k
    assert gs.keys() == ga.keys() and gs
    scale = max(float(g.abs().max()) for g in ga.values())
    for n in ga:
        assert torch.allclose(gs[n], ga[n], atol=1e-5 * scale, rtol=1e-4), n
    return ms


@pytest.mark.parametrize("name", list(BATCHES))
def test_lora_logprobs_losses_and_gradients_are_those_of_each_sample_alone(tiny_model: str, name: str) -> None:
    samples = BATCHES[name]()
    shared, alone = make(tiny_model, True, kl=0.1), make(tiny_model, False, kl=0.1)
    assert shared.shares_prefix and not alone.shares_prefix
    shared.step(samples), alone.step(samples)  # LoRA B is no longer zero: every adapter weight has a gradient
    m = assert_same(shared, alone, samples)
    assert m["kl"] > 0


def test_full_fine_tuning_with_a_reference_copy_matches_too(tiny_model: str) -> None:
    samples = multi_turn()
    assert_same(make(tiny_model, True, kl=0.1, lora=False), make(tiny_model, False, kl=0.1, lora=False), samples)


def test_a_shared_prompt_runs_once_per_row(tiny_model: str) -> None:
    samples = single_turn(groups=2, k=4, prompt=7)
    res = make(tiny_model, True).step(samples)
    replies = sum(s.n_tokens - 7 for s in samples)
    assert res.metrics["packed_tokens"] == 2 * 7 + replies
    assert res.metrics["tokens"] == sum(s.n_tokens for s in samples) > res.metrics["packed_tokens"]
    plain = make(tiny_model, False).step(samples)
    assert plain.metrics["packed_tokens"] == plain.metrics["tokens"]


def test_rows_split_at_the_budget_and_cut_samples_count_as_truncated(tiny_model: str) -> None:
    samples = long_samples()
    rows = shared_prefix.plan_rows(samples, 48)
    assert all(r.width <= 48 for r in rows) and sorted(i for r in rows for i in r.samples) == list(range(5))
    assert {r.prefix for r in rows} == {10}
    res = make(tiny_model, True).step(samples)
    assert res.metrics["truncated"] == 2 and not res.skipped


@pytest.mark.parametrize(("seqs", "expected"), [
    ([], 0), ([[1, 2, 3]], 3), ([[1, 2, 3], [1, 2, 4]], 2), ([[1, 2], [1, 2, 3]], 2), ([[1], [2]], 0),
    ([[1, 2, 3], [1, 2, 3], [1, 9, 3]], 1),
])
def test_common_prefix(seqs: list[list[int]], expected: int) -> None:
    assert shared_prefix.common_prefix(seqs) == expected


def test_a_suffix_sees_the_prefix_and_itself_and_padding_only_itself() -> None:
    seg = torch.tensor([[0, 0, 1, 1, 2, -1]])
    seen = shared_prefix.attention_mask(seg, torch.float32)[0, 0] == 0
    assert seen.tolist() == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 1],
    ]


def test_a_model_outside_the_known_decoders_trains_one_row_per_sample(tmp_path: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=32, n_layer=1, n_head=2)).save_pretrained(
        str(tmp_path / "gpt2"))
    t = make(str(tmp_path / "gpt2"), True)
    assert not t.shares_prefix
    res = t.step(single_turn())
    assert not res.skipped and res.metrics["packed_tokens"] == res.metrics["tokens"]
