"""Token-budget packing of training samples into padded micro-batches, and data-parallel sharding.

A micro-batch is a ``[rows, width]`` right-padded block: its cost is ``rows * width`` (padding
costs compute too), and :func:`pack` keeps that at or under ``max_tokens``. A sample longer than
``max_tokens`` is truncated to its first ``max_tokens`` tokens (and counted) rather than failing
the step. :func:`collate` shifts everything by one so position ``t`` of every per-token tensor is
about predicting token ``t + 1`` from tokens ``<= t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.training.algorithms import TrainSample

if TYPE_CHECKING:
    import torch


def pack(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices of ``lengths`` grouped into micro-batches with ``rows * longest <= max_tokens``
    (lengths above ``max_tokens`` count as ``max_tokens``). First-fit decreasing: deterministic,
    and every index appears exactly once."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be at least 1")
    order = sorted(range(len(lengths)), key=lambda i: (-min(lengths[i], max_tokens), i))
    bins: list[list[int]] = []
    widths: list[int] = []
    for i in order:
        n = max(1, min(lengths[i], max_tokens))
        for b, idx in enumerate(bins):
            # sorted decreasing, so the bin's width (its first, longest sample) never grows
            if widths[b] * (len(idx) + 1) <= max_tokens and n <= widths[b]:
                idx.append(i)
                break
        else:
            bins.append([i])
            widths.append(n)
    return bins


def shard(samples: Sequence[TrainSample], rank: int, world_size: int) -> list[TrainSample]:
    """This rank's share of a batch every rank sees whole: longest first, each sample to the rank
    with the fewest tokens so far (ties to the lowest rank), so shards are balanced and disjoint."""
    if world_size <= 1:
        return list(samples)
    load = [0] * world_size
    mine: list[tuple[int, TrainSample]] = []
    for i in sorted(range(len(samples)), key=lambda i: (-samples[i].n_tokens, i)):
        r = min(range(world_size), key=lambda k: (load[k], k))
        load[r] += samples[i].n_tokens
        if r == rank:
            mine.append((i, samples[i]))
    return [s for _, s in sorted(mine, key=lambda t: t[0])]


@dataclass(slots=True)
class MicroBatch:
    input_ids: torch.Tensor  # [B, T] long, right-padded
    attention_mask: torch.Tensor | None  # [B, T] long; None for a context-parallel shard (causal, right padding)
    target_ids: torch.Tensor  # [B, T-1]: input_ids shifted left
    loss_mask: torch.Tensor  # [B, T-1] bool: target sampled by the policy (never padding)
    inference_logprobs: torch.Tensor  # [B, T-1] float32
    advantages: torch.Tensor  # [B, T-1] float32
    n_tokens: int  # real (unpadded) tokens
    n_loss_tokens: int
    truncated: int  # samples cut to the budget
    shared: Any = None  # shared_prefix.SharedRows: what the model runs instead of input_ids, when set
    # context parallelism (cp_step.py): this rank's shard of the sequence, as its tokens' global positions;
    # then every per-token tensor is aligned to input_ids (position t predicts target t: no shift)
    position_ids: Any = None


def collate(samples: Sequence[TrainSample], max_tokens: int, pad_id: int = 0,
            device: str | torch.device = "cpu") -> MicroBatch:
    import torch

    rows = [s for s in samples]
    cut = [min(s.n_tokens, max_tokens) for s in rows]
    width = max(max(cut, default=1), 2)
    b = len(rows)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attn = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.bool)
    inf = torch.zeros((b, width), dtype=torch.float32)
    adv = torch.zeros((b, width), dtype=torch.float32)
    for r, (s, n) in enumerate(zip(rows, cut, strict=True)):
        ids[r, :n] = torch.tensor(s.token_ids[:n], dtype=torch.long)
        attn[r, :n] = 1
        mask[r, :n] = torch.tensor(s.loss_mask[:n], dtype=torch.bool)
        inf[r, :n] = torch.tensor(s.inference_logprobs[:n], dtype=torch.float32)
        adv[r, :n] = torch.tensor(s.advantages[:n], dtype=torch.float32)
    loss_mask = mask[:, 1:] & attn[:, 1:].bool()
    return MicroBatch(ids.to(device), attn.to(device), ids[:, 1:].to(device), loss_mask.to(device),
                      inf[:, 1:].to(device), adv[:, 1:].to(device), int(sum(cut)), int(loss_mask.sum()),
                      sum(1 for s, n in zip(rows, cut, strict=True) if n < s.n_tokens))


__all__ = ["MicroBatch", "collate", "pack", "shard"]
