"""The trainer's micro-batches under context parallelism (``[trainer] context_parallel = cp > 1``), on
the pieces of ``context_parallel.py`` (torch's context-parallel engine).

How a step runs on ``world`` ranks::

    mesh (dp, cp): dp = world / cp groups of cp consecutive ranks (context_parallel.group_mesh)
    batch   -> packing.shard(samples, dp_rank, dp)     every rank of a cp group holds the same samples
    counts  -> summed over every rank, divided by cp     each cp group counts its samples once
    each micro-batch [B, T] (no shared-prefix rows: their 4-D mask is not causal, the ring takes none)
      per-token tensors aligned to the input tokens (position t predicts token t + 1), the loss weights
      and token shares computed on the whole rows (the "sequence" normalisation divides by a row's token
      count, which no rank sees alone)
      -> sharded_sequence: this rank's head-tail shard of every tensor and its global position ids
      -> the policy's forward (ring attention over the cp group), logprobs (chunked when set) and the
         loss of this rank's tokens; backward inside the context (torch's ring backward runs there)

Why the sums are right: every token of a cp group's rows lies on exactly one of its ranks, so the
loss terms (and every additive metric: token shares, weights) summed over the group are the
whole-sequence ones, and summed over all ranks the whole batch's. The gradient reduction spans every
rank (FSDP's mesh over all ranks, or the data-parallel all-reduce over all ranks, SUM), so the
summed gradient is one process's gradient of the whole batch; the trainer's metric reduction sums
over all ranks too, so nothing is counted twice.

``Trainer.step(samples, shard_batch=False)`` under context parallelism: the ranks of one cp group
pass the same samples (the counts are divided by ``cp``).

What needs the whole row and so cannot run split: a loss that masks whole sequences by their mean
ratio (``sequence_mask_low`` / ``sequence_mask_high`` of ``pg``) is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from workbench_local.training import context_parallel as cpm
from workbench_local.training.losses import Loss, token_weights
from workbench_local.training.packing import MicroBatch
from workbench_local.training.trainer_config import TrainerConfig

from workbench.errors import ConfigError

if TYPE_CHECKING:
    import torch

#: ``compute(local_mb, weights, token_share) -> (loss value, additive metrics)`` for one rank's shard.
Compute = Callable[[MicroBatch, Any, Any], tuple[Any, dict[str, Any]]]


class ContextParallel:
    """This rank's place in the ``(dp, cp)`` mesh and the sharded forward of one micro-batch."""

    def __init__(self, config: TrainerConfig, device: str, rank: int, world: int, loss: Loss,
                 models: list[Any]) -> None:
        """``models``: every model that runs a forward (the policy, a frozen reference or None), switched
        to the ring; ``loss``: the trainer's, checked to need no whole rows."""
        cp = self.cp = config.context_parallel
        self.check_loss(loss)
        self.mesh = cpm.group_mesh(cp, "cuda" if device.startswith("cuda") else "cpu")  # refuses a cp not dividing world
        self.normalization, self.max_tokens = config.normalization, config.max_tokens
        self.dp_rank, self.dp_size = rank // cp, world // cp  # group_mesh lays cp consecutive ranks in a group
        for model in models:
            if model is not None:
                cpm.use_ring_attention(model)

    def check_loss(self, loss: Loss) -> None:
        check_loss(loss, self.cp)

    def forward(self, mb: MicroBatch, compute: Compute, *, n_loss: float, n_seq: float,
                backward: bool) -> tuple[Any, dict[str, Any]]:
        """This rank's share of ``mb``'s loss and metrics; with ``backward`` its gradients too, always
        (the ring's backward is a collective of the group: a rank never leaves it out)."""
        if mb.shared is not None:
            raise ValueError("shared-prefix rows cannot be split for context parallelism")
        aligned = _aligned(mb)
        mask = aligned["loss_mask"]
        aligned["weights"] = token_weights(mask, self.normalization, n_loss, n_seq, self.max_tokens)  # on the whole rows
        aligned["token_share"] = mask.float() / n_loss
        with cpm.sharded_sequence(self.mesh, aligned) as shard:
            local = MicroBatch(shard["input_ids"], None, shard["target_ids"], shard["loss_mask"],
                               shard["inference_logprobs"], shard["advantages"], mb.n_tokens, mb.n_loss_tokens,
                               mb.truncated, position_ids=shard[cpm.POSITION_IDS])
            value, metrics = compute(local, shard["weights"], shard["token_share"])
            if backward:
                value.backward()
        return value, metrics


def check_loss(loss: Loss, cp: int) -> None:
    """One clear line for a loss term that needs whole rows (it cannot run split ``cp`` ways)."""
    for term in getattr(loss, "terms", [loss]):
        if getattr(term, "sequence_mask_low", None) is not None or \
                getattr(term, "sequence_mask_high", None) is not None:
            raise ConfigError(f"loss {term.name!r} masks whole sequences (sequence_mask_low/high), which needs "
                              f"each row whole; it cannot run with trainer.context_parallel = {cp}")


def _aligned(mb: MicroBatch) -> dict[str, torch.Tensor]:
    """``mb``'s per-token tensors, each ``[B, T]`` and aligned to the input tokens: the targets and
    their loss tensors (``[B, T-1]``) get one more position at the end that predicts nothing."""
    import torch

    def widen(t: torch.Tensor) -> torch.Tensor:
        return torch.cat([t, t.new_zeros((t.shape[0], 1))], dim=1)

    return {"input_ids": mb.input_ids, "target_ids": widen(mb.target_ids), "loss_mask": widen(mb.loss_mask),
            "inference_logprobs": widen(mb.inference_logprobs), "advantages": widen(mb.advantages)}


__all__ = ["ContextParallel", "check_loss"]
