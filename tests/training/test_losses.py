"""Loss math on hand-made tensors: analytic gradients, exact zeros where masked, CE against torch."""

from __future__ import annotations

import math

import pytest
import torch
from workbench_local.training.losses import LossBatch, SumLoss, build_loss, make_loss, token_weights

from workbench.errors import ConfigError


def batch(lp: list[list[float]], inf: list[list[float]], adv: list[list[float]], mask: list[list[int]],
          mode: str = "token", ref: list[list[float]] | None = None) -> tuple[LossBatch, torch.Tensor]:
    logprobs = torch.tensor(lp, dtype=torch.float64, requires_grad=True)
    m = torch.tensor(mask, dtype=torch.bool)
    n = float(m.sum())
    w = token_weights(m, mode, n, float(m.shape[0]), max_tokens=8).double()
    return LossBatch(logprobs, torch.tensor(inf, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64), m, w,
                     m.double() / n, None if ref is None else torch.tensor(ref, dtype=torch.float64)), logprobs


def test_pg_gradient_matches_the_analytic_value() -> None:
    lp = [[-1.0, -0.5, -2.0, -0.7], [-0.3, -1.2, -0.9, -4.0]]
    inf = [[-1.1, -0.4, -2.0, -0.0], [-0.5, -1.0, -0.9, -4.0]]
    adv = [[1.0, 1.0, 1.0, 0.0], [-2.0, -2.0, -2.0, -2.0]]
    mask = [[1, 1, 1, 0], [1, 1, 1, 1]]
    b, x = batch(lp, inf, adv, mask)
    loss, metrics = make_loss("pg")(b)
    loss.backward()
    n = 7.0
    expect = torch.zeros(2, 4, dtype=torch.float64)
    value = 0.0
    for i in range(2):
        for t in range(4):
            if mask[i][t]:
                r = math.exp(lp[i][t] - inf[i][t])
                expect[i, t] = -r * adv[i][t] / n  # d/dlp of -(r * A) / N
                value += -r * adv[i][t] / n
    assert torch.allclose(x.grad, expect, atol=1e-12)
    assert float(loss.detach()) == pytest.approx(value)
    assert x.grad[0, 3] == 0.0  # outside the loss mask
    assert float(metrics["masked_fraction"]) == 0.0
    kl = sum(math.exp(lp[i][t] - inf[i][t]) - 1 - (lp[i][t] - inf[i][t]) for i in range(2) for t in range(4)
             if mask[i][t]) / n
    assert float(metrics["mismatch_kl"]) == pytest.approx(kl)


def test_tokens_outside_the_trust_region_get_exactly_zero_gradient() -> None:
    # ratios: e^3 (> 8: masked), e^-3 (< 1/8: masked), e^40 (huge: masked, must not make nan), 1 (kept)
    lp = [[0.0, -3.0, 0.0, -1.0]]
    inf = [[-3.0, 0.0, -40.0, -1.0]]
    b, x = batch(lp, inf, [[1.0, 1.0, 1.0, 1.0]], [[1, 1, 1, 1]])
    loss, metrics = make_loss("pg")(b)
    loss.backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0, -0.25]]
    assert float(metrics["masked_fraction"]) == pytest.approx(0.75)
    assert math.isfinite(float(metrics["mismatch_kl"]))
    # a [1/c, c] region with c = 30 keeps the e^3 and e^-3 tokens
    x.grad = None
    loss, _ = make_loss("pg", token_mask_low=1 / 30, token_mask_high=30.0)(b)
    loss.backward()
    assert x.grad[0, 0] != 0 and x.grad[0, 1] != 0 and x.grad[0, 2] == 0.0


def test_sequence_level_mask_drops_the_whole_sequence() -> None:
    lp = [[0.0, 0.0], [0.0, 0.0]]
    inf = [[-1.5, -1.5], [0.0, 0.0]]  # sequence 0: geometric-mean ratio e^1.5 > 4
    b, x = batch(lp, inf, [[1.0, 1.0], [1.0, 1.0]], [[1, 1], [1, 1]])
    loss, metrics = make_loss("pg", sequence_mask_high=4.0)(b)
    loss.backward()
    assert x.grad[0].tolist() == [0.0, 0.0] and all(g != 0 for g in x.grad[1].tolist())
    assert float(metrics["masked_fraction"]) == pytest.approx(0.5)


def test_cross_entropy_matches_torch() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (3, 5))
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    lp = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    n = float(mask.sum())
    b = LossBatch(lp, torch.zeros_like(lp), torch.ones_like(lp), mask, token_weights(mask, "token", n, 3.0).double(),
                  mask.double() / n)
    ours, _ = make_loss("ce")(b)
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), targets.masked_fill(~mask, -100).reshape(-1),
                                               ignore_index=-100)
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()))
    g1 = torch.autograd.grad(ours, logits, retain_graph=True)[0]
    g2 = torch.autograd.grad(theirs, logits)[0]
    assert torch.allclose(g1, g2, atol=1e-12)


def test_kl_to_reference_value_and_gradient() -> None:
    lp = [[-1.0, -2.0, -0.5]]
    ref = [[-1.5, -2.0, -0.1]]
    b, x = batch(lp, [[0.0] * 3], [[0.0] * 3], [[1, 1, 0]], ref=ref)
    loss, metrics = make_loss("kl", coef=0.5)(b)
    loss.backward()
    d = [ref[0][t] - lp[0][t] for t in range(2)]
    assert float(metrics["kl"]) == pytest.approx(sum(math.exp(v) - v - 1 for v in d) / 2)
    assert float(loss.detach()) == pytest.approx(0.5 * float(metrics["kl"]))
    # d/dlp (e^(ref-lp) - (ref-lp) - 1) = 1 - e^(ref-lp)
    assert x.grad.tolist()[0] == pytest.approx([0.5 * (1 - math.exp(v)) / 2 for v in d] + [0.0])


def test_combined_loss_and_registry() -> None:
    loss = build_loss("pg", kl_coef=0.1)
    assert isinstance(loss, SumLoss) and loss.uses_reference and not make_loss("pg").uses_reference
    b, _ = batch([[-1.0]], [[-1.0]], [[1.0]], [[1]], ref=[[-1.0]])
    value, metrics = loss(b)
    assert float(value.detach()) == pytest.approx(-1.0) and {"loss/pg", "loss/kl", "kl", "mismatch_kl"} <= set(metrics)
    with pytest.raises(ConfigError, match="did you mean 'pg'"):
        make_loss("gp")
    with pytest.raises(ConfigError, match="token_mask_high"):
        make_loss("pg", token_mask_hi=2.0)


def test_normalisation_is_independent_of_how_the_batch_is_split() -> None:
    torch.manual_seed(1)
    lp = torch.randn(4, 6, dtype=torch.float64) - 2
    inf = lp + 0.1 * torch.randn(4, 6, dtype=torch.float64)
    adv = torch.randn(4, 1, dtype=torch.float64).expand(4, 6)
    mask = torch.rand(4, 6) > 0.3
    for mode in ("token", "sequence", "constant"):
        n, s = float(mask.sum()), 4.0
        full = make_loss("pg")(LossBatch(lp, inf, adv, mask, token_weights(mask, mode, n, s, 8).double(),
                                         mask.double() / n))[0]
        parts = sum(make_loss("pg")(LossBatch(lp[i:i + 2], inf[i:i + 2], adv[i:i + 2], mask[i:i + 2],
                                              token_weights(mask[i:i + 2], mode, n, s, 8).double(),
                                              mask[i:i + 2].double() / n))[0] for i in (0, 2))
        assert float(parts.detach()) == pytest.approx(float(full.detach())), mode
    seq = token_weights(torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]]), "sequence", 6, 2)
    assert seq.tolist() == [[0.25, 0.25, 0, 0], [0.125] * 4]
    with pytest.raises(ConfigError, match="did you mean 'token'"):
        token_weights(mask, "tokens", 1, 1)
