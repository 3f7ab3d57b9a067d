"""The policy's forward pass as the trainer runs it: a micro-batch in, the log-probabilities of its
sampled tokens (and their entropies) out.

:class:`PolicyForward` is an ``nn.Module`` around the causal LM, so that under FSDP it is the root
the sharded decoder layers hang from: calling it gathers the embedding, the final norm and the
output head the way calling the LM would, whichever path the micro-batch takes —

* a plain micro-batch (one row per sample): the decoder over ``[B, T]``, the output head over
  every position; under context parallelism (``mb.position_ids`` set, ``cp_step``) the rows are this
  rank's shard of the sequence at those global positions, aligned to their targets;
* a shared-prefix micro-batch (``shared_prefix``): the decoder over the packed rows, the output
  head only at the positions that predict a sampled token.

Logprobs are ``log_softmax(logits / temperature)`` at the sampled tokens, so they match the
inference server's when ``temperature`` is the sampling temperature.

With ``loss_chunk_tokens`` set, and a model whose logits are the output head of the last hidden state
(``shared_prefix.supports``), the head and the logprobs run over that many positions at a time
(``chunked_logprobs``), in the forward and the backward pass, so the ``[tokens × vocab]`` logits never
exist whole; other models (and ``loss_chunk_tokens = 0``) take the causal LM's own logits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from workbench_local.training import shared_prefix
from workbench_local.training.chunked_logprobs import chunked_logprobs, logprobs_from_logits

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

    def __init__(self, model: Any, *, temperature: float = 1.0, compute_entropy: bool = True,
                 loss_chunk_tokens: int = 0) -> None:
        super().__init__()
        self.model = model
        self.temperature = temperature
        self.compute_entropy = compute_entropy
        self.loss_chunk_tokens = loss_chunk_tokens if shared_prefix.supports(model) else 0

    def forward(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        if mb.shared is None:
            if self.loss_chunk_tokens:
                return self._plain_chunked(mb)
            logits = self.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask,
                                position_ids=mb.position_ids).logits
            return self._at_targets(logits if mb.position_ids is not None else logits[:, :-1], mb.target_ids)
        if self.loss_chunk_tokens:
            sampled, entropy = self._chunked(shared_prefix.sampled_hidden(self.model, mb.shared),
                                             mb.target_ids[mb.loss_mask])
        else:
            sampled, entropy = self._at_targets(shared_prefix.sampled_logits(self.model, mb.shared),
                                                mb.target_ids[mb.loss_mask])
        full = torch.zeros(mb.loss_mask.shape, dtype=sampled.dtype, device=sampled.device)
        return full.masked_scatter(mb.loss_mask, sampled), entropy

    def _plain_chunked(self, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The decoder's last hidden states over ``[B, T]`` (what the causal LM's head reads), then
        the head position chunk by position chunk."""
        decoder = _base(self.model).get_decoder()
        hidden = decoder(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids,
                         use_cache=False).last_hidden_state
        if mb.position_ids is None:  # a context-parallel shard is aligned to its targets already
            hidden = hidden[:, :-1]
        shape = mb.target_ids.shape
        logprobs, entropy = self._chunked(hidden.reshape(-1, hidden.shape[-1]), mb.target_ids.reshape(-1))
        return logprobs.view(shape), (entropy.view(shape) if entropy is not None else None)

    def _chunked(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return chunked_logprobs(_base(self.model).get_output_embeddings(), hidden, targets,
                                chunk_tokens=self.loss_chunk_tokens, temperature=self.temperature,
                                compute_entropy=self.compute_entropy)

    def _at_targets(self, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return logprobs_from_logits(logits, targets, temperature=self.temperature,
                                    compute_entropy=self.compute_entropy)


__all__ = ["PolicyForward"]
