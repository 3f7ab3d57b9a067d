"""Losses: turn per-token advantages into a gradient (DESIGN.md, "Algorithm vs loss").

torch is imported inside functions only, so ``import workbench_local.training.losses`` stays cheap.

A loss sees one micro-batch as a :class:`LossBatch` of ``[batch, time]`` tensors aligned to the
*predicted* tokens (position ``t`` holds the logprob of token ``t`` given tokens ``< t``):

* ``logprobs`` — the trainer's logprobs of the sampled tokens (carries the gradient);
* ``inference_logprobs`` — what the inference server reported when it sampled them;
* ``advantages`` — from the algorithm (``workbench.training.algorithms``);
* ``mask`` — bool, the tokens the policy sampled (the loss mask);
* ``weights`` — the normalisation: ``loss = sum(weights * per_token_loss)``;
* ``token_share`` — ``mask / (masked tokens in the whole step)``, for metrics;
* ``reference_logprobs`` — only for losses with ``needs_reference``.

**Normalisation by token count.** :func:`token_weights` builds ``weights`` from counts over the
*whole optimizer step* (every micro-batch on every data-parallel rank), so summing the micro-batch
losses (gradient accumulation) and summing gradients across ranks (all-reduce SUM) gives exactly
the loss of the full batch, however it was split:

* ``"token"`` (default): ``1 / N_tokens`` — each sampled token weighs the same (DAPO, prime-rl);
* ``"sequence"``: ``1 / (n_tokens_of_its_sequence * N_sequences)`` — each sequence weighs the same
  (original GRPO);
* ``"constant"``: ``1 / (max_tokens * N_sequences)`` — Dr.GRPO's length-unbiased constant.

**Metrics** are 0-d detached tensors and *additive*: each is this micro-batch's share of the step
mean (a sum weighted by ``token_share``), so the trainer sums them over micro-batches and ranks.

Losses combine with ``+``: ``make_loss("pg") + make_loss("kl", coef=0.01)``, or
``build_loss("pg", kl_coef=0.01)`` from a config.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.errors import ConfigError, nearest
from workbench.training.algorithms import configure

if TYPE_CHECKING:
    from torch import Tensor

Metrics = dict[str, "Tensor"]
NORMALIZATIONS = ("token", "sequence", "constant")


@dataclass(slots=True)
class LossBatch:
    logprobs: Tensor
    inference_logprobs: Tensor
    advantages: Tensor
    mask: Tensor
    weights: Tensor
    token_share: Tensor
    reference_logprobs: Tensor | None = None


def token_weights(mask: Tensor, mode: str, total_tokens: float, total_sequences: float,
                  max_tokens: float | None = None) -> Tensor:
    """Per-token loss weights of a ``[batch, time]`` mask for the normalisation ``mode``, given
    the step-wide (all micro-batches, all ranks) count of masked tokens and of sequences. A row
    of the batch is one sequence."""
    import torch

    m = mask.to(torch.float32)
    if mode == "token":
        return m / max(total_tokens, 1.0)
    if mode == "sequence":
        per_seq = m.sum(dim=-1, keepdim=True).clamp(min=1.0)
        return m / per_seq / max(total_sequences, 1.0)
    if mode == "constant":
        if not max_tokens:
            raise ConfigError("normalization 'constant' needs max_tokens (the generation budget)")
        return m / (float(max_tokens) * max(total_sequences, 1.0))
    raise ConfigError(f"unknown normalization {mode!r}{nearest(mode, NORMALIZATIONS)}; use one of "
                      f"{', '.join(NORMALIZATIONS)}")


class Loss:
    """Base class: ``loss(batch) -> (scalar loss tensor, additive metrics)``."""

    name: ClassVar[str] = ""
    needs_reference: ClassVar[bool] = False

    def __call__(self, batch: LossBatch) -> tuple[Tensor, Metrics]:
        raise NotImplementedError

    def __add__(self, other: Loss) -> SumLoss:
        return SumLoss([*_terms(self), *_terms(other)])

    @property
    def uses_reference(self) -> bool:
        return self.needs_reference

    def config(self) -> dict[str, Any]:
        from workbench.training.algorithms import _options

        return {k: getattr(self, k) for k in _options(type(self))}


def _terms(loss: Loss) -> list[Loss]:
    return list(loss.terms) if isinstance(loss, SumLoss) else [loss]


class SumLoss(Loss):
    """Several losses added (their metrics merged; each term's value as ``loss/<name>``)."""

    name = "sum"

    def __init__(self, terms: Iterable[Loss]) -> None:
        self.terms = list(terms)

    @property
    def uses_reference(self) -> bool:
        return any(t.uses_reference for t in self.terms)

    def __call__(self, batch: LossBatch) -> tuple[Tensor, Metrics]:
        total: Any = 0.0
        metrics: Metrics = {}
        for t in self.terms:
            value, m = t(batch)
            total = total + value
            metrics.update(m)
            metrics[f"loss/{t.name}"] = value.detach()
        return total, metrics


class ImportanceRatioPG(Loss):
    """Token-level policy gradient with an importance ratio, masked as prime-rl does.

    With ``r_t = exp(logprob_t - inference_logprob_t)`` (trainer over inference policy), a token
    is *kept* when ``token_mask_low <= r_t <= token_mask_high`` (a ``[1/c, c]`` trust region is
    ``low=1/c, high=c``) and, if set, its sequence's geometric-mean ratio lies within
    ``[sequence_mask_low, sequence_mask_high]``. Masked tokens are dropped, not clipped: they give
    exactly zero gradient. Per token, ``loss_t = -r_t * A_t`` on kept tokens, so
    ``d loss / d logprob_t = -weights_t * r_t * A_t`` (on-policy, ``r = 1``: REINFORCE).

    Metrics: ``pg_loss``; ``masked_fraction`` (of sampled tokens dropped by the trust region);
    ``mismatch_kl`` — KL(inference || trainer) on the sampled tokens, the k3 estimator
    ``r - 1 - log r``; ``ratio_mean``."""

    name = "pg"
    token_mask_low: float = 0.125
    token_mask_high: float = 8.0
    sequence_mask_low: float | None = None
    sequence_mask_high: float | None = None

    def __call__(self, batch: LossBatch) -> tuple[Tensor, Metrics]:
        import torch

        mask = batch.mask.bool()
        log_ratio = torch.where(mask, batch.logprobs - batch.inference_logprobs, torch.zeros_like(batch.logprobs))
        lr_d = log_ratio.detach()
        keep = mask & (lr_d >= _log(self.token_mask_low)) & (lr_d <= _log(self.token_mask_high))
        if self.sequence_mask_low is not None or self.sequence_mask_high is not None:
            n = mask.sum(-1).clamp(min=1)
            seq_lr = (lr_d * mask).sum(-1) / n  # log of the geometric-mean ratio
            ok = torch.ones_like(seq_lr, dtype=torch.bool)
            if self.sequence_mask_low is not None:
                ok &= seq_lr >= _log(self.sequence_mask_low)
            if self.sequence_mask_high is not None:
                ok &= seq_lr <= _log(self.sequence_mask_high)
            keep &= ok.unsqueeze(-1)
        zeros = torch.zeros_like(log_ratio)
        # Double `where`: masked tokens never reach exp(), so an out-of-region ratio (even inf) gives
        # exactly zero gradient instead of 0 * inf = nan.
        ratio = torch.exp(torch.where(keep, log_ratio, zeros))
        adv = torch.where(keep, batch.advantages.to(ratio.dtype), zeros)
        per_token = torch.where(keep, -ratio * adv, zeros)
        loss = (batch.weights * per_token).sum()
        with torch.no_grad():
            share = batch.token_share
            lr_c = lr_d.clamp(-20.0, 20.0)
            r_c = torch.exp(lr_c)
            metrics = {
                "pg_loss": loss.detach(),
                "masked_fraction": (share * (mask & ~keep)).sum(),
                "mismatch_kl": (share * (r_c - 1.0 - lr_c)).sum(),
                "ratio_mean": (share * r_c).sum(),
            }
        return loss, metrics


def _log(x: float) -> float:
    import math

    return math.log(x) if x > 0 else float("-inf")


class CrossEntropy(Loss):
    """Negative log-likelihood of the sampled (chosen) tokens: SFT. With ``"token"`` weights it
    equals ``torch.nn.functional.cross_entropy`` over the masked tokens. ``weight_by_advantage``
    multiplies each token's loss by its advantage (advantage-weighted regression)."""

    name = "ce"
    weight_by_advantage: bool = False

    def __call__(self, batch: LossBatch) -> tuple[Tensor, Metrics]:
        import torch

        mask = batch.mask.bool()
        nll = torch.where(mask, -batch.logprobs, torch.zeros_like(batch.logprobs))
        if self.weight_by_advantage:
            nll = nll * torch.where(mask, batch.advantages.to(nll.dtype), torch.zeros_like(nll))
        loss = (batch.weights * nll).sum()
        with torch.no_grad():
            metrics = {"ce_loss": loss.detach(), "nll": (batch.token_share * nll).sum()}
        return loss, metrics


class KLToReference(Loss):
    """``coef * KL(trainer || reference)`` on sampled tokens, the k3 estimator
    ``exp(ref - lp) - (ref - lp) - 1`` (non-negative, unbiased for samples from the policy). Added
    to a policy loss; needs ``reference_logprobs`` (the trainer computes them with the LoRA
    adapter disabled, or with a frozen copy under full fine-tuning)."""

    name = "kl"
    needs_reference = True
    coef: float = 0.01

    def __call__(self, batch: LossBatch) -> tuple[Tensor, Metrics]:
        import torch

        if batch.reference_logprobs is None:
            raise ValueError("KLToReference needs reference_logprobs in the batch")
        mask = batch.mask.bool()
        d = torch.where(mask, batch.reference_logprobs - batch.logprobs, torch.zeros_like(batch.logprobs))
        kl = torch.exp(d) - d - 1.0
        loss = self.coef * (batch.weights * kl).sum()
        with torch.no_grad():
            metrics = {"kl": (batch.token_share * kl).sum()}
        return loss, metrics


LOSSES: dict[str, type[Loss]] = {
    "pg": ImportanceRatioPG,
    "importance_ratio_pg": ImportanceRatioPG,
    "ce": CrossEntropy,
    "cross_entropy": CrossEntropy,
    "kl": KLToReference,
    "kl_to_reference": KLToReference,
}


def make_loss(name: str, **cfg: Any) -> Loss:
    """The loss registered as ``name`` with options ``cfg``; a typo is a ConfigError naming the
    nearest valid name or option."""
    cls = LOSSES.get(name.strip().lower().replace("-", "_"))
    if cls is None:
        raise ConfigError(f"unknown loss {name!r}{nearest(name, LOSSES)}; choose one of {', '.join(sorted(LOSSES))}")
    return configure(cls(), f"loss {cls.name!r}", cfg)


def build_loss(name: str, *, kl_coef: float = 0.0, **cfg: Any) -> Loss:
    """``make_loss(name, **cfg)``, plus a :class:`KLToReference` term when ``kl_coef > 0``."""
    loss = make_loss(name, **cfg)
    return loss + make_loss("kl", coef=kl_coef) if kl_coef > 0 else loss


__all__ = ["LOSSES", "NORMALIZATIONS", "CrossEntropy", "ImportanceRatioPG", "KLToReference", "Loss", "LossBatch",
           "SumLoss", "build_loss", "make_loss", "token_weights"]
