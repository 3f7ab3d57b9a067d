"""Log-probabilities of the sampled tokens over chunks of positions, so the ``[tokens × vocab]`` logits
never exist at once, in the forward pass or in the backward pass.

The decoder runs once over the whole micro-batch and gives its last hidden states (``[tokens ×
hidden]``, small next to the logits); the output head, the temperature, ``log_softmax`` at the target
and the entropy then run over ``chunk_tokens`` positions at a time. Each chunk runs under
``torch.utils.checkpoint`` (non-reentrant): the forward keeps only the chunk's hidden states and
targets, and the backward recomputes that one chunk's logits, sends its gradient into the head and
the hidden states, and frees them before the next chunk. Peak memory of the head is then
``chunk_tokens × vocab`` whatever the sequence length; values and gradients are those of the
unchunked computation (up to float rounding of the matmul blocking). Positions that fit in one chunk
run without checkpointing: nothing is recomputed for a short micro-batch.

The head is called as a module (``head(hidden)``), never through its ``.weight``, so a sharded
(FSDP) or adapted output layer computes exactly as when the causal LM calls it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.checkpoint import checkpoint


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, *, temperature: float = 1.0,
                         compute_entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_softmax(logits / temperature)`` at ``targets`` (logits ``[..., vocab]``, targets ``[...]``),
    and the detached entropy of the same distribution (``None`` unless asked for)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = logits.logsumexp(-1)
    logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    entropy = None
    if compute_entropy:
        with torch.no_grad():
            lg = logits.detach()
            entropy = lse.detach() - (lg.softmax(-1) * lg).sum(-1)
    return logprobs, entropy


def chunked_logprobs(head: Any, hidden: torch.Tensor, targets: torch.Tensor, *, chunk_tokens: int,
                     temperature: float = 1.0, compute_entropy: bool = True
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token logprobs (``[N]``) of ``targets`` (``[N]``) under ``head(hidden)`` (``hidden`` is
    ``[N, H]``), and their detached entropies, ``chunk_tokens`` positions at a time."""
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be at least 1, not {chunk_tokens!r}")
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros((0,), dtype=torch.float32)
        return empty, (empty if compute_entropy else None)
    # one chunk holds no more logits than the bound: it runs as is, with no recomputation in the backward
    recompute = hidden.shape[0] > chunk_tokens and torch.is_grad_enabled() and (
        hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    logprobs: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    for h, t in zip(hidden.split(chunk_tokens), targets.split(chunk_tokens), strict=True):
        if recompute:
            lp, ent = _checkpointed_chunk(head, h, t, temperature, compute_entropy)
        else:
            lp, ent = logprobs_from_logits(head(h), t, temperature=temperature, compute_entropy=compute_entropy)
        logprobs.append(lp)
        if ent is not None:
            entropies.append(ent)
    return torch.cat(logprobs), (torch.cat(entropies) if compute_entropy else None)


def _checkpointed_chunk(head: Any, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                        compute_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One chunk under non-reentrant activation checkpointing; the backward's recomputation skips the
    entropy (it saves nothing for backward, so the recomputed graph is the same)."""
    calls = [0]

    def run(h: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        calls[0] += 1
        return logprobs_from_logits(head(h), t, temperature=temperature,
                                    compute_entropy=compute_entropy and calls[0] == 1)

    out: tuple[torch.Tensor, torch.Tensor | None] = checkpoint(run, hidden, targets, use_reentrant=False)
    return out


__all__ = ["chunked_logprobs", "logprobs_from_logits"]
