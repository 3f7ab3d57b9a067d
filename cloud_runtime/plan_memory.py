"""The plan's memory per trainer GPU: the training state from the model's parameter shapes through
:func:`workbench.training.memory.state_bytes_per_rank` (the arithmetic the trainer's shards are
checked against), plus the gathered layers and the checkpointed activations.

The byte widths follow the trainer: under ``fsdp`` with ``trainer.dtype = "auto"`` it keeps float32
shards and computes in bf16 (``MixedPrecisionPolicy``), so every element of state is 4 bytes; otherwise
the state is in the trainer's dtype (``auto`` on a GPU: ``cloud.dtype_bytes``). Gradients are in the
parameters' dtype and Adam keeps two moments in it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from workbench.errors import ConfigError, nearest
from workbench.training.memory import (
    SHARDING_SETTINGS,
    SHARDINGS,
    ParamShape,
    decoder_param_shapes,
    param_count,
    state_bytes_per_rank,
)
from workbench.training.run_config import env_config_file

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: How far ``cloud.params_b`` may be from the parameters the shapes add up to.
PARAMS_TOLERANCE = 0.1

Book = Callable[..., float]


class CloudConfig(Protocol):
    """What the memory plan reads of the ``[cloud]`` table (``workbench_cloud.plan.CloudConfig``)."""

    params_b: float | None
    layers: int | None
    hidden_size: int | None
    attention_heads: int | None
    kv_heads: int | None
    head_dim: int | None
    experts: int | None
    dtype_bytes: int
    intermediate_size: int | None
    vocab_size: int | None
    tied_embeddings: bool
    qkv_bias: bool
    qk_norm: bool
    moe_intermediate_size: int | None
    shared_experts: int
    dense_layers: int


def planned_sharding(file: str | Path | None, overrides: dict[str, Any] | None, env: str) -> str:
    """``[trainer] sharding`` as the config sets it (a dotted override, then the file, then the run
    config the environment ships); ``auto`` or nothing is ``fsdp``: a cluster run shards unless told not to."""
    import tomllib

    value: Any = (overrides or {}).get("trainer.sharding")
    if value is None:
        for path in (file, env_config_file(env)):
            if path is None:
                continue
            try:
                value = tomllib.loads(Path(path).read_text()).get("trainer", {}).get("sharding")
            except (OSError, tomllib.TOMLDecodeError, AttributeError):
                value = None  # load_tables has read it already and reported what is wrong
            if value is not None:
                break
    if value is None or value == "auto":
        return "fsdp"
    if value not in SHARDINGS:
        raise ConfigError(f"trainer.sharding {value!r}{nearest(str(value), list(SHARDING_SETTINGS))}; use one of "
                          f"{', '.join(SHARDING_SETTINGS)}")
    return str(value)


def state_width(sharding: str, trainer_dtype: str, dtype_bytes: int) -> int:
    """Bytes per element of the trainer's parameters, gradients and Adam moments."""
    if trainer_dtype == "auto":
        return 4 if sharding == "fsdp" else dtype_bytes
    if trainer_dtype not in _DTYPE_BYTES:
        raise ConfigError(f"trainer.dtype {trainer_dtype!r}: use auto, float32, bfloat16 or float16")
    return _DTYPE_BYTES[trainer_dtype]


def model_shapes(c: CloudConfig, lora_rank: int | None) -> tuple[dict[str, ParamShape], str]:
    """The parameters' shapes, and a phrase saying where they come from: the decoder the ``[cloud]``
    architecture keys describe, or (without ``cloud.intermediate_size`` and ``cloud.vocab_size``)
    ``cloud.params_b`` as ``cloud.layers`` equal layers, LoRA adapting 7 hidden × hidden linears each."""
    L, h = c.layers or 1, c.hidden_size or 1
    hd = c.head_dim or 128
    heads = c.attention_heads or max(1, h // hd)
    if c.intermediate_size and c.vocab_size:
        if c.experts and not c.moe_intermediate_size:
            raise ConfigError("cloud.experts with the model's shapes needs cloud.moe_intermediate_size (the width "
                              "of one expert's MLP)")
        shapes = decoder_param_shapes(
            L, h, c.intermediate_size, heads, c.kv_heads or heads, hd, c.vocab_size, bool(c.tied_embeddings),
            lora_rank, qkv_bias=bool(c.qkv_bias), qk_norm=bool(c.qk_norm), experts=c.experts or 0,
            expert_intermediate=c.moe_intermediate_size, shared_experts=c.shared_experts or 0,
            dense_layers=c.dense_layers or 0)
        total = param_count(shapes) - (param_count(shapes, trainable_only=True) if lora_rank else 0)  # the base
        P = (c.params_b or 0) * 1e9
        if abs(total - P) > PARAMS_TOLERANCE * P:
            raise ConfigError(f"cloud.params_b ({c.params_b:g}) is not what the [cloud] architecture adds up to "
                              f"({total / 1e9:.4g}B parameters): correct one of them")
        return shapes, "the decoder's parameter shapes from [cloud]"
    P = round((c.params_b or 0) * 1e9)
    out: dict[str, ParamShape] = {}
    for i in range(L):
        out[f"layers.{i}"] = ((P // L + (1 if i < P % L else 0),), lora_rank is None)
        for j in range(7 if lora_rank else 0):
            out[f"layers.{i}.lora_A.{j}"] = ((lora_rank or 0, h), True)
            out[f"layers.{i}.lora_B.{j}"] = ((h, lora_rank or 0), True)
    return out, (f"cloud.params_b as {L} equal layers (set cloud.intermediate_size and cloud.vocab_size for the "
                 "model's own shapes)")


def _layer_of(name: str) -> str | None:
    """``...layers.12.mlp...`` → ``"12"``; None for a parameter outside the decoder layers."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return parts[i + 1]
    return None


def trainer_memory(c: CloudConfig, trainer: dict[str, Any], sharding: str, gpus: int,
                   book: Book) -> tuple[dict[str, Any], int]:
    """The trainer's memory per GPU (GB), each number recorded in ``book`` with its formula, and the
    number of trainable parameters."""
    lora = bool(trainer.get("lora", False))
    shapes, source = model_shapes(c, int(trainer.get("lora_rank", 8)) if lora else None)
    B = c.dtype_bytes
    width = state_width(sharding, str(trainer.get("dtype", "auto")), B)
    world = gpus if sharding == "fsdp" else 1
    state = state_bytes_per_rank(shapes, world, sharding=sharding, param_bytes=width, grad_bytes=width,
                                 optimizer_bytes=2 * width)
    held = param_count(shapes)
    trainable = param_count(shapes, trainable_only=True)
    gb = 1e9
    how = (f"FSDP2 full shard: ceil(dim 0 / {gpus} GPUs) rows of each parameter" if sharding == "fsdp"
           else "DDP: the whole replica on every GPU")
    m: dict[str, Any] = {}
    m["weights_gb"] = book("trainer weights/GPU", f"{held:,} params ({source}) × {width} B, {how}",
                           state.params / gb, "GB")
    m["grads_gb"] = book("trainer grads/GPU", f"{trainable:,} trainable × {width} B, {how}", state.grads / gb, "GB")
    m["optimizer_gb"] = book("trainer optimizer/GPU", f"{trainable:,} trainable × 2 Adam moments × {width} B, {how}",
                             state.optimizer / gb, "GB")
    if sharding == "fsdp":
        layers: dict[str | None, int] = {}
        for name, (shape, _) in shapes.items():
            layer = _layer_of(name)
            layers[layer] = layers.get(layer, 0) + math.prod(shape)
        root = layers.pop(None, 0)
        largest = max(layers.values(), default=0)
        compute = B if str(trainer.get("dtype", "auto")) == "auto" else width  # auto: bf16 compute
        m["gathered_layers_gb"] = book(
            "trainer gathered layers/GPU", f"(2 layers (current + prefetch) × {largest:,} params of the largest "
            f"layer + {root:,} params outside the layers, kept gathered) × {compute} B compute dtype",
            (2 * largest + root) * compute / gb, "GB")
    else:
        m["gathered_layers_gb"] = book("trainer gathered layers/GPU", "0 (DDP gathers nothing: the replica is whole)",
                                       0.0, "GB")
    return m, trainable
