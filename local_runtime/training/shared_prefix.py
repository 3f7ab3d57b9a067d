"""Shared-prefix packing: the rollouts of one group start with the same prompt, so the trainer runs
that prompt once per row instead of once per rollout, and the output head only where a sampled
token is predicted.

A row holds one group's longest common prefix followed by the rest of each of its samples (their
*suffixes*)::

    [ prompt (shared) | suffix 1 | suffix 2 | ... | suffix k | padding ]

A 4-D attention mask lets a suffix token see the prefix and the earlier tokens of its own suffix,
never another suffix; position ids restart after the prefix for every suffix, so each token sees
exactly the context, and has exactly the position, it has in its own sequence. The logprobs, and so
the loss and every gradient, are those of running each sample alone (up to float rounding); the
gradient reaching a prefix token is the sum of what each suffix sends it, as it is when the prompt
runs once per sample. The prefix also carries sampled tokens when a group's samples begin alike
(each sample keeps its own loss term for them).

With 8 rollouts of a 25-token prompt and 5-token answers a group costs 65 tokens instead of 240.
It needs a decoder that takes ``position_ids`` and a ready 4-D mask and whose logits are the output
embedding of the last hidden state (:func:`supports`); other models train one row per sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench_local.training.packing import MicroBatch, collate, pack

from workbench.training.algorithms import TrainSample

if TYPE_CHECKING:
    import torch

#: Decoders whose logits are ``lm_head(final_norm(hidden))`` and that take a ready 4-D mask.
PLAIN_HEAD_MODELS = frozenset({"llama", "mistral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "olmo2"})

PAD_SEGMENT = -1  # padding columns
PREFIX_SEGMENT = 0  # the row's shared prefix; suffix j (counting from 1) is segment j


@dataclass(slots=True)
class Row:
    prefix: int  # tokens of the shared prefix
    samples: list[int]  # indices into the batch's samples, in suffix order
    width: int  # prefix + every suffix


@dataclass(slots=True)
class SharedRows:
    """The model's input for one micro-batch, and where each sampled token is predicted."""

    input_ids: torch.Tensor  # [R, W]
    position_ids: torch.Tensor  # [R, W]
    segments: torch.Tensor  # [R, W]: PREFIX_SEGMENT, a suffix number, or PAD_SEGMENT
    src_row: torch.Tensor  # [N]: the packed position whose output predicts the n-th sampled token,
    src_col: torch.Tensor  # with sampled tokens in the row-major order of the micro-batch's loss mask
    n_packed: int  # real tokens the model runs (each prefix once)


def supports(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    return (getattr(config, "model_type", None) in PLAIN_HEAD_MODELS
            and not getattr(config, "final_logit_softcapping", None)
            and hasattr(base, "get_decoder") and base.get_output_embeddings() is not None)


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """The length of the longest prefix every sequence starts with."""
    if not seqs:
        return 0
    first, n = seqs[0], min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def plan_rows(samples: Sequence[TrainSample], max_tokens: int) -> list[Row]:
    """One row per group (``group_id``; a sample without one is its own group), split where prefix
    plus suffixes would pass ``max_tokens``. Samples are cut to ``max_tokens`` tokens first."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        groups.setdefault(s.group_id or f"\0{i}", []).append(i)
    rows: list[Row] = []
    for members in groups.values():
        cut = {i: min(samples[i].n_tokens, max_tokens) for i in members}
        prefix = common_prefix([samples[i].token_ids[:cut[i]] for i in members])
        row = Row(prefix, [], prefix)
        for i in members:
            extra = cut[i] - prefix
            if row.samples and row.width + extra > max_tokens:
                rows.append(row)
                row = Row(prefix, [], prefix)
            row.samples.append(i)
            row.width += extra
        rows.append(row)
    return rows


def build(samples: Sequence[TrainSample], rows: Sequence[Row], loss_mask: torch.Tensor, max_tokens: int,
          pad_id: int, device: str | torch.device) -> SharedRows:
    """The packed rows of a micro-batch whose samples are ``samples`` (rows index into it) and whose
    ``[B, T-1]`` loss mask (from ``packing.collate``) says which tokens are predicted."""
    import torch

    width = max(2, max(r.width for r in rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    seg = torch.full((len(rows), width), PAD_SEGMENT, dtype=torch.long)
    src_row = torch.zeros(loss_mask.shape, dtype=torch.long)
    src_col = torch.zeros(loss_mask.shape, dtype=torch.long)
    n_packed = 0
    t = torch.arange(loss_mask.shape[1])  # loss position t: target t + 1, predicted at token t
    for r, row in enumerate(rows):
        p = row.prefix
        lead = samples[row.samples[0]].token_ids[:p]
        ids[r, :p] = torch.tensor(lead, dtype=torch.long)
        pos[r, :p] = torch.arange(p)
        seg[r, :p] = PREFIX_SEGMENT
        col = p
        for j, i in enumerate(row.samples, start=1):
            n = min(samples[i].n_tokens, max_tokens)
            k = n - p
            ids[r, col:col + k] = torch.tensor(samples[i].token_ids[p:n], dtype=torch.long)
            pos[r, col:col + k] = torch.arange(p, n)
            seg[r, col:col + k] = j
            # token t sits in the prefix below p, else in this suffix
            src_row[i] = r
            src_col[i] = torch.where(t < p, t, col + t - p)
            col += k
        n_packed += col
    where = loss_mask.bool()
    return SharedRows(ids.to(device), pos.to(device), seg.to(device), src_row[where].to(device),
                      src_col[where].to(device), n_packed)


def micro_batches(samples: Sequence[TrainSample], max_tokens: int, pad_id: int,
                  device: str | torch.device) -> list[MicroBatch]:
    """The rows of :func:`plan_rows` packed into micro-batches of at most ``max_tokens`` (rows x padded
    width), each with its samples' ``[B, T]`` loss layout (``packing.collate``) and its packed rows."""
    rows = plan_rows(samples, max_tokens)
    out = []
    for b in pack([r.width for r in rows], max_tokens):
        order = [i for r in b for i in rows[r].samples]
        at = {i: n for n, i in enumerate(order)}
        mine = [Row(rows[r].prefix, [at[i] for i in rows[r].samples], rows[r].width) for r in b]
        members = [samples[i] for i in order]
        mb = collate(members, max_tokens, pad_id, device)
        mb.shared = build(members, mine, mb.loss_mask.cpu(), max_tokens, pad_id, device)
        out.append(mb)
    return out


def attention_mask(segments: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive ``[R, 1, W, W]`` mask: a token sees the earlier prefix tokens and the earlier
    tokens of its own suffix; a padding column sees only itself (so no row of the mask is empty)."""
    import torch

    w = segments.shape[1]
    q = segments.unsqueeze(2)
    k = segments.unsqueeze(1)
    causal = torch.ones((w, w), dtype=torch.bool, device=segments.device).tril()
    pad = q == PAD_SEGMENT
    seen = causal & ~pad & (k != PAD_SEGMENT) & ((k == q) | (k == PREFIX_SEGMENT))
    seen |= pad & torch.eye(w, dtype=torch.bool, device=segments.device)
    zero = torch.zeros((), dtype=dtype, device=segments.device)
    return torch.where(seen, zero, torch.finfo(dtype).min).unsqueeze(1)


def sampled_hidden(model: Any, rows: SharedRows) -> torch.Tensor:
    """``[N, hidden]`` last hidden states at the positions that predict the sampled tokens (loss-mask
    order): what the output head turns into their logits."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    mask = attention_mask(rows.segments, base.get_output_embeddings().weight.dtype)
    hidden = base.get_decoder()(input_ids=rows.input_ids, position_ids=rows.position_ids, attention_mask=mask,
                                use_cache=False).last_hidden_state
    return hidden[rows.src_row, rows.src_col]


def sampled_logits(model: Any, rows: SharedRows) -> torch.Tensor:
    """``[N, vocab]`` logits at the positions that predict the sampled tokens (loss-mask order)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_output_embeddings()(sampled_hidden(model, rows))


__all__ = ["PLAIN_HEAD_MODELS", "Row", "SharedRows", "attention_mask", "build", "common_prefix", "micro_batches",
           "plan_rows", "sampled_hidden", "sampled_logits", "supports"]
