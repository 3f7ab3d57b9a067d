"""Batched generation on torch + transformers: one padded batch, step by step, with a KV cache.

Everything here runs in the server's single worker thread (see :mod:`workbench_local.server.scheduler`); the
event loop only sees :class:`Sequence` objects and the events they emit.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class SamplingParams:
    max_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    prompt_logprobs: int | None = None
    ignore_eos: bool = False
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] = field(default_factory=dict)


class Detokenizer:
    """Incremental decoding: each token's text delta without re-decoding the whole output, holding
    back a partial UTF-8 character until the token that completes it arrives."""

    __slots__ = ("tok", "ids", "prefix", "read", "text")

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0
        self.read = 0
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix: self.read])
        now = self._decode(self.ids[self.prefix:])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            delta = now[len(before):]
            self.prefix, self.read = self.read, len(self.ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        before = self._decode(self.ids[self.prefix: self.read])
        now = self._decode(self.ids[self.prefix:])
        delta = now[len(before):] if now.startswith(before) else ""
        self.prefix = self.read = len(self.ids)
        self.text += delta
        return delta


@dataclass(eq=False)
class Sequence:
    """One choice of one request, from prompt to finish."""

    prompt_ids: list[int]
    params: SamplingParams
    model: str
    index: int = 0
    on_event: Callable[[Sequence], None] | None = None
    out_ids: list[int] = field(default_factory=list)
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)
    prompt_logprobs: list[dict[str, dict[str, Any]] | None] | None = None
    text: str = ""
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    cancelled: bool = False
    error: str | None = None
    policy_version: int = 0
    detok: Detokenizer | None = None
    generator: Any = None
    matcher: Any = None  # an llguidance matcher when the reply is constrained (see constraints.py)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


def make_generator(seed: int | None) -> Any:
    import torch

    g = torch.Generator()
    g.manual_seed(seed if seed is not None else int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    return g


def adjust_logits(row: Any, seq: Sequence) -> Any:
    """A row's logits after what OpenAI's parameters change before sampling, in vLLM's way: the
    frequency penalty (times each token's count in the output so far), the presence penalty (once per
    token that appeared in it) and ``logit_bias``. The row itself when none applies."""
    import torch

    p = seq.params
    if (p.presence_penalty or p.frequency_penalty) and seq.out_ids:
        counts = torch.bincount(torch.tensor(seq.out_ids, device=row.device), minlength=row.shape[-1])
        counts = counts[: row.shape[-1]].to(row.dtype)
        row = row - p.frequency_penalty * counts - p.presence_penalty * (counts > 0).to(row.dtype)
    if p.logit_bias:
        ids = torch.tensor(list(p.logit_bias), device=row.device)
        row = row.index_add(0, ids, torch.tensor(list(p.logit_bias.values()), device=row.device, dtype=row.dtype))
    return row


def sample_rows(logits: Any, seqs: list[Sequence], logprobs_mode: str, allowed: Any = None) -> tuple[list[int], Any]:
    """Pick one token per row; return (tokens, the log-probabilities reported for each row).

    ``allowed`` (bool [rows, vocab], every token allowed in a row without a grammar) is the grammars'
    masks. "raw" logprobs are the model's own distribution; "processed" ones come after every adjustment."""
    import torch

    logits = logits.float()
    raw = torch.log_softmax(logits, dim=-1)
    reported = raw if logprobs_mode == "raw" else raw.clone()
    masked = logits if allowed is None else logits.masked_fill(~allowed, float("-inf"))
    tokens: list[int] = []
    for i, seq in enumerate(seqs):
        p = seq.params
        base = masked[i]
        row = adjust_logits(base, seq)
        if p.temperature <= 1e-5:
            if logprobs_mode != "raw" and (allowed is not None or row is not base):
                reported[i] = torch.log_softmax(row, -1)
            tokens.append(int(row.argmax()))
            continue
        row = row / p.temperature
        if p.top_k and p.top_k > 0 and p.top_k < row.shape[-1]:
            kth = torch.topk(row, p.top_k).values[-1]
            row = row.masked_fill(row < kth, float("-inf"))
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(row, descending=True)
            cum = torch.softmax(sorted_logits, -1).cumsum(-1)
            drop = cum - torch.softmax(sorted_logits, -1) > p.top_p
            row = row.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
        lp = torch.log_softmax(row, -1)
        if logprobs_mode != "raw":
            reported[i] = lp
        tokens.append(int(torch.multinomial(lp.exp(), 1, generator=seq.generator)))
    return tokens, reported


def record_logprobs(seq: Sequence, token: int, row: Any) -> None:
    import torch

    k = seq.params.top_logprobs
    top: list[tuple[int, float]] = []
    if k > 0:
        vals, idx = torch.topk(row, min(k, row.shape[-1]))
        top = list(zip(idx.tolist(), vals.tolist(), strict=True))
    seq.logprobs.append((token, float(row[token]), top))


def prompt_logprob_entries(tokenizer: Any, ids: list[int], logits: Any, k: int) -> list[dict[str, dict[str, Any]] | None]:
    """vLLM's ``prompt_logprobs``: None for the first token, then for each prompt token a dict keyed
    by token id (as a string) with the token's own entry and the top-``k`` alternatives."""
    import torch

    lps = torch.log_softmax(logits.float(), dim=-1)  # [len(ids), V]; row j predicts ids[j + 1]
    out: list[dict[str, dict[str, Any]] | None] = [None]
    for j in range(len(ids) - 1):
        row = lps[j]
        tid = ids[j + 1]
        entries = {tid: float(row[tid])}
        if k > 0:
            vals, idx = torch.topk(row, min(k, row.shape[-1]))
            entries.update(zip(idx.tolist(), vals.tolist(), strict=True))
        out.append({str(t): {"logprob": lp, "rank": int((row > lp).sum()) + 1,
                             "decoded_token": tokenizer.decode([t])} for t, lp in entries.items()})
    return out
