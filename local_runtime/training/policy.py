"""The policy's forward pass as the trainer runs it: a micro-batch in, the log-probabilities of its
sampled tokens (and their entropies) out.

:class:`PolicyForward` is an ``nn.Module`` around the causal LM, so that under FSDP it is the root
the sharded decoder layers hang from: calling it gathers the embedding, the final norm and the
output head the way calling the LM would, whichever path the micro-batch takes —

* a plain micro-batch (one row per sample): the decoder over ``[B, T]``, the output head over
  every position;
* a shared-prefix micro-batch (``shared_prefix``): the decoder over the packed rows, the output
  head only at the positions that predict a sampled token.

Logprobs are ``log_softmax(logits / temperature)`` at the sampled tokens, so they match the
inference server's when ``temperature`` is the sampling temperature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from workbench_local.training import shared_prefix

if TYPE_CHECKING:
    from workbench_local.training.packing import MicroBatch


def _base(model: Any) -> Any:
    """The causal LM under a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class PolicyForward(torch.nn.Module):
    """``forward(mb) -> (logprobs, entropy)``: ``logprobs`` is ``[B, T-1]`` (0 where nothing is
    sampled under shared-prefix packing); ``entropy`` (detached, ``None`` unless asked for) is
    ``[B, T-1]`` for a plain micro-batch, ``[N]`` at the sampled tokens (loss-mask order) for a
    shared-prefix one."""

    def __init__(self, model: Any, *, temperature: float = 1.0, compute_entropy: bool = True) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.compute_entropy = compute_entropy

    def forward(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        if mb.shared is None:
            logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask).logits[:, :-1].float()
            return self._at_targets(logits, mb.target_ids)
        logits = shared_prefix.sampled_logits(self.model, mb.shared).float()
        sampled, entropy = self._at_targets(logits, mb.target_ids[mb.loss_mask])
        full = torch.zeros(mb.loss_mask.shape, dtype=sampled.dtype, device=sampled.device)
        return full.masked_scatter(mb.loss_mask, sampled), entropy

    def _at_targets(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.temperature != 1.0:
            logits = logits / self.temperature
        lse = logits.logsumexp(-1)
        logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
        entropy = None
        if self.compute_entropy:
            with torch.no_grad():
                lg = logits.detach()
                entropy = lse.detach() - (lg.softmax(-1) * lg).sum(-1)
        return logprobs, entropy


__all__ = ["PolicyForward"]
