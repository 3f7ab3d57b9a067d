"""Training-state memory per rank, from parameter shapes alone (no torch).

The trainer sizes its shards with these functions, its bench checks them against the sharded tensors
themselves, and the cloud plan sizes a model it only knows from a config with them: one home for the
arithmetic.

Sharding follows FSDP2 (``torch.distributed.fsdp.fully_shard``): every parameter is split on dim 0
with ``torch.chunk`` over the ranks, so a rank holds ``ceil(rows / world)`` rows (the last ranks hold
fewer, or none), and every rank allocates the padded size ``ceil(rows / world) × prod(shape[1:])``
so that the all-gather sees equal chunks. Rank 0 always holds a full chunk, so the padded size is the
memory of the most loaded rank: the number a plan must budget.

``ddp`` keeps the whole model on every rank (no sharding). Adam keeps two moments (``exp_avg``,
``exp_avg_sq``) per trainable element; gradients exist only for trainable parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: ``ddp``: a full replica per rank; ``fsdp``: FSDP2 shards weights, gradients and optimizer state.
SHARDINGS = ("ddp", "fsdp")
#: What ``[trainer] sharding`` may say: one of :data:`SHARDINGS`, or ``auto`` (:func:`effective_sharding`).
SHARDING_SETTINGS = ("auto", *SHARDINGS)


def effective_sharding(setting: str, world_size: int) -> str:
    """The sharding a trainer of ``world_size`` ranks runs for ``[trainer] sharding = setting``:
    ``auto`` shards with FSDP over more than one rank and keeps the one replica of a single process."""
    if setting == "auto":
        return "fsdp" if world_size > 1 else "ddp"
    return setting

#: Adam's two fp32 moments per trainable element.
ADAM_FP32_BYTES = 8

ParamShape = tuple[tuple[int, ...], bool]
"""A parameter's shape and whether it trains."""


def _check(shape: Sequence[int], world: int) -> None:
    if world < 1:
        raise ValueError(f"world size must be at least 1, not {world}")
    if any(d < 0 for d in shape):
        raise ValueError(f"a shape has no negative sizes: {tuple(shape)}")


def shard_rows(rows: int, world: int, rank: int) -> int:
    """Rows of dim 0 that ``rank`` holds when ``torch.chunk`` splits ``rows`` over ``world`` ranks
    (chunks of ``ceil(rows / world)``; the trailing ranks hold the remainder or nothing)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    chunk = -(-rows // world)
    return max(0, min(chunk, rows - rank * chunk))


def shard_numel(shape: Sequence[int], world: int) -> int:
    """Elements one rank allocates for a parameter of ``shape`` under FSDP2 over ``world`` ranks:
    ``ceil(shape[0] / world) × prod(shape[1:])`` (the padded chunk, which rank 0 fills); the whole
    parameter when ``world`` is 1."""
    _check(shape, world)
    if world == 1:
        return math.prod(shape)
    if len(shape) == 0:
        raise ValueError("fully_shard does not shard scalar parameters")
    return -(-shape[0] // world) * math.prod(shape[1:])


def local_shard_numel(shape: Sequence[int], world: int, rank: int) -> int:
    """Elements of ``rank``'s local shard (``DTensor.to_local()``), without the padding: fewer than
    :func:`shard_numel` on the trailing ranks when ``shape[0]`` does not divide by ``world``."""
    _check(shape, world)
    if world == 1:
        return math.prod(shape)
    if len(shape) == 0:
        raise ValueError("fully_shard does not shard scalar parameters")
    return shard_rows(shape[0], world, rank) * math.prod(shape[1:])


@dataclass(frozen=True, slots=True)
class TrainingStateBytes:
    """Bytes of training state one rank holds."""

    params: int
    grads: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer

    def to_dict(self) -> dict[str, int]:
        return {"params": self.params, "grads": self.grads, "optimizer": self.optimizer, "total": self.total}


def state_bytes_per_rank(params: Iterable[tuple[Sequence[int], bool]] | Mapping[str, tuple[Sequence[int], bool]],
                         world: int, *, sharding: str, param_bytes: int, grad_bytes: int,
                         optimizer_bytes: int = ADAM_FP32_BYTES, rank: int | None = None) -> TrainingStateBytes:
    """Parameter, gradient and optimizer bytes on one rank of ``world`` for ``params`` (shape and
    trainable per parameter, or a mapping name → that, as :func:`decoder_param_shapes` returns).

    ``sharding="fsdp"`` counts each rank's FSDP2 shard: the padded chunk (the most loaded rank) when
    ``rank`` is None, else that rank's local shard; ``"ddp"`` counts the whole model on every rank.
    Gradients and optimizer state (``optimizer_bytes`` per element: 8 for Adam's two fp32 moments)
    exist for trainable parameters only."""
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding {sharding!r} is not one of {', '.join(SHARDINGS)}")
    if world < 1:
        raise ValueError(f"world size must be at least 1, not {world}")
    if rank is not None and not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a world of {world}")
    items = params.values() if isinstance(params, Mapping) else params
    held = trainable = 0
    for shape, trains in items:
        if sharding == "ddp":
            n = math.prod(shape)
        elif rank is None:
            n = shard_numel(shape, world)
        else:
            n = local_shard_numel(shape, world, rank)
        held += n
        trainable += n if trains else 0
    return TrainingStateBytes(params=held * param_bytes, grads=trainable * grad_bytes,
                              optimizer=trainable * optimizer_bytes)


#: The linear layers of a decoder layer that LoRA adapts ("all-linear": every linear but the output head).
ATTENTION_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_LINEARS = ("gate_proj", "up_proj", "down_proj")


def decoder_param_shapes(layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, head_dim: int,
                         vocab: int, tied: bool, lora_rank: int | None = None, *, qkv_bias: bool = False,
                         qk_norm: bool = False, experts: int = 0, expert_intermediate: int | None = None,
                         shared_experts: int = 0, dense_layers: int = 0) -> dict[str, ParamShape]:
    """Every parameter of a Llama/Qwen-style decoder, named as Hugging Face names them, with its shape
    and whether it trains.

    Dense layers: attention (``q/k/v/o_proj``, biases on q/k/v when ``qkv_bias`` as in Qwen2, per-head
    ``q_norm``/``k_norm`` when ``qk_norm`` as in Qwen3), a gated MLP of width ``intermediate`` and two
    RMSNorms. With ``experts`` > 0 the layers after the first ``dense_layers`` are mixture-of-experts:
    the experts' gated MLPs of width ``expert_intermediate`` fused into two 3-D parameters
    ``[experts, 2 × width, hidden]`` and ``[experts, hidden, width]`` (so FSDP shards them by expert),
    a router ``[experts, hidden]``, and ``shared_experts`` always-on experts as one MLP (the
    transformers 5 layout of GLM-4.5 and DeepSeek-V3).

    With ``lora_rank`` the names follow peft (``base_model.model.`` prefix, ``base_layer`` for the frozen
    linear, ``lora_A.default`` ``[rank, in]`` and ``lora_B.default`` ``[out, rank]``): every linear of
    every layer is adapted ("all-linear"; experts and routers are not) and only the adapters train."""
    for name, v in (("layers", layers), ("hidden", hidden), ("intermediate", intermediate), ("heads", heads),
                    ("kv_heads", kv_heads), ("head_dim", head_dim), ("vocab", vocab)):
        if v < 1:
            raise ValueError(f"{name} must be at least 1, not {v}")
    if lora_rank is not None and lora_rank < 1:
        raise ValueError(f"lora_rank must be at least 1, not {lora_rank}")
    if experts and not expert_intermediate:
        raise ValueError("a mixture-of-experts decoder needs expert_intermediate")
    lora = lora_rank is not None
    full = not lora
    out: dict[str, ParamShape] = {}
    root = "base_model.model." if lora else ""

    def linear(prefix: str, rows: int, cols: int, bias: bool = False, adapt: bool = True) -> None:
        if lora and adapt:
            out[f"{root}{prefix}.base_layer.weight"] = ((rows, cols), False)
            if bias:
                out[f"{root}{prefix}.base_layer.bias"] = ((rows,), False)
            out[f"{root}{prefix}.lora_A.default.weight"] = ((lora_rank or 0, cols), True)
            out[f"{root}{prefix}.lora_B.default.weight"] = ((rows, lora_rank or 0), True)
            return
        out[f"{root}{prefix}.weight"] = ((rows, cols), full)
        if bias:
            out[f"{root}{prefix}.bias"] = ((rows,), full)

    def mlp(prefix: str, width: int, adapt: bool) -> None:
        linear(f"{prefix}.gate_proj", width, hidden, adapt=adapt)
        linear(f"{prefix}.up_proj", width, hidden, adapt=adapt)
        linear(f"{prefix}.down_proj", hidden, width, adapt=adapt)

    out[f"{root}model.embed_tokens.weight"] = ((vocab, hidden), full)
    for i in range(layers):
        p = f"model.layers.{i}"
        linear(f"{p}.self_attn.q_proj", heads * head_dim, hidden, qkv_bias)
        linear(f"{p}.self_attn.k_proj", kv_heads * head_dim, hidden, qkv_bias)
        linear(f"{p}.self_attn.v_proj", kv_heads * head_dim, hidden, qkv_bias)
        linear(f"{p}.self_attn.o_proj", hidden, heads * head_dim)
        if qk_norm:
            out[f"{root}{p}.self_attn.q_norm.weight"] = ((head_dim,), full)
            out[f"{root}{p}.self_attn.k_norm.weight"] = ((head_dim,), full)
        if experts and i >= dense_layers:
            width = expert_intermediate or 0
            out[f"{root}{p}.mlp.experts.gate_up_proj"] = ((experts, 2 * width, hidden), full)
            out[f"{root}{p}.mlp.experts.down_proj"] = ((experts, hidden, width), full)
            out[f"{root}{p}.mlp.gate.weight"] = ((experts, hidden), full)
            if shared_experts:
                mlp(f"{p}.mlp.shared_experts", shared_experts * (expert_intermediate or 0), adapt=True)
        else:
            mlp(f"{p}.mlp", intermediate, adapt=True)
        out[f"{root}{p}.input_layernorm.weight"] = ((hidden,), full)
        out[f"{root}{p}.post_attention_layernorm.weight"] = ((hidden,), full)
    out[f"{root}model.norm.weight"] = ((hidden,), full)
    if not tied:
        out[f"{root}lm_head.weight"] = ((vocab, hidden), full)
    return out


def param_count(params: Iterable[tuple[Sequence[int], bool]] | Mapping[str, tuple[Sequence[int], bool]],
                trainable_only: bool = False) -> int:
    """Elements of ``params`` (of the trainable ones with ``trainable_only``)."""
    items = params.values() if isinstance(params, Mapping) else params
    return sum(math.prod(shape) for shape, trains in items if trains or not trainable_only)
