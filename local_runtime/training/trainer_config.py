"""The ``[trainer]`` table of a run config: :class:`TrainerConfig`, checked field by field (one clear
line naming the key for a wrong type or value)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from workbench_local.training.losses import NORMALIZATIONS

from workbench.errors import ConfigError, nearest
from workbench.training.memory import SHARDING_SETTINGS

_TYPES: dict[str, tuple[type, ...]] = {"str": (str,), "bool": (bool,), "int": (int,), "float": (int, float)}


def _check_type(key: str, value: Any, annotation: str) -> None:
    """``value`` has the field's annotated type (``int``, ``float | None``, ``str | list[str]``...):
    one clear line naming the key otherwise (a bool is never a number)."""
    for alt in (a.strip() for a in annotation.split("|")):
        if alt == "None" and value is None:
            return
        if alt.startswith("list[") and isinstance(value, list):
            inner = _TYPES.get(alt[5:-1], ())
            if all(isinstance(x, inner) and not isinstance(x, bool) for x in value):
                return
        kinds = _TYPES.get(alt)
        if kinds and isinstance(value, kinds) and (alt == "bool" or not isinstance(value, bool)):
            return
    want = {"str": "a string", "bool": "true or false", "int": "a whole number", "float": "a number",
            "None": "unset", "list[str]": "a list of strings"}
    wanted = " or ".join(want.get(a.strip(), a.strip()) for a in annotation.split("|"))
    raise ConfigError(f"{key} must be {wanted}, not {value!r}")


@dataclass(slots=True)
class TrainerConfig:
    """Trainer settings (the ``[trainer]`` table of a run config)."""

    model: str = "tiny"  # a directory written by save_pretrained, "tiny", or a cached Hugging Face id
    lora: bool = True  # False: full fine-tuning
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"
    lr: float = 1e-4
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    max_grad_norm: float = 1.0  # 0 = no clipping
    warmup_steps: int = 0  # linear warm-up, then a constant learning rate
    micro_batch_tokens: int = 4096  # rows * padded width of one micro-batch
    normalization: str = "token"  # token | sequence | constant (see workbench_local.training.losses)
    max_tokens: int | None = None  # the generation budget, for normalization = "constant"
    temperature: float = 1.0
    dtype: str = "auto"  # auto (float32 on CPU, bfloat16 on GPU) | float32 | bfloat16 | float16
    device: str = "auto"
    seed: int = 0
    gradient_checkpointing: bool = False
    compute_entropy: bool = True
    shared_prefix: bool = True  # run each group's common prompt once per row (shared_prefix.py)
    pad_id: int = 0
    allow_download: bool = False
    sharding: str = "auto"  # ddp: a full replica per rank | fsdp: FSDP2 shards weights, gradients, optimizer
    # state | auto: fsdp over more than one rank (workbench.training.memory.effective_sharding)
    ranks: int = 1  # trainer processes per node (N local processes over gloo on a CPU)
    nodes: int = 1  # trainer nodes (torchrun nodes); the world size is nodes x ranks
    loss_chunk_tokens: int = 1024  # logprobs and loss over this many tokens at a time; 0 = the whole sequence
    context_parallel: int = 1  # ranks that split one sequence (ring attention; training needs CUDA); divides nodes x ranks

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainerConfig:
        names = [f.name for f in dataclasses.fields(cls)]
        for k in d:
            if k not in names:
                raise ConfigError(f"unknown trainer option {k!r}{nearest(k, names)}; valid: {', '.join(names)}")
        for f in dataclasses.fields(cls):
            if f.name in d:
                _check_type(f"trainer.{f.name}", d[f.name], str(f.type))
        cfg = cls(**d)
        cfg.validate()
        return cfg

    def validate(self) -> None:
        if self.normalization not in NORMALIZATIONS:
            raise ConfigError(f"trainer.normalization {self.normalization!r}{nearest(self.normalization, NORMALIZATIONS)}"
                              f"; use one of {', '.join(NORMALIZATIONS)}")
        if self.sharding not in SHARDING_SETTINGS:
            raise ConfigError(f"trainer.sharding {self.sharding!r}{nearest(self.sharding, SHARDING_SETTINGS)}; use "
                              f"one of {', '.join(SHARDING_SETTINGS)}")
        for name in ("ranks", "nodes", "context_parallel"):
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name} must be at least 1, not {getattr(self, name)!r}")
        if self.world_size % self.context_parallel:
            raise ConfigError(f"trainer.context_parallel = {self.context_parallel} must divide the trainer's world size "
                              f"(trainer.nodes × trainer.ranks = {self.world_size})")
        if self.loss_chunk_tokens < 0:
            raise ConfigError(f"trainer.loss_chunk_tokens must be 0 (no chunking) or a positive number of tokens, "
                              f"not {self.loss_chunk_tokens!r}")
        if self.micro_batch_tokens < 2:
            raise ConfigError("trainer.micro_batch_tokens must be at least 2")
        for name in ("lr", "temperature", "adam_eps"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"trainer.{name} must be a positive number, not {v!r}")
        for name in ("weight_decay", "lora_dropout", "max_grad_norm", "lora_alpha"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"trainer.{name} must be a non-negative number, not {v!r}")
        for name in ("adam_beta1", "adam_beta2"):
            v = getattr(self, name)
            if not 0 <= v < 1:
                raise ConfigError(f"trainer.{name} must be in [0, 1), not {v!r}")
        if self.lora_rank < 1 or self.warmup_steps < 0 or (self.max_tokens is not None and self.max_tokens < 1):
            raise ConfigError("trainer.lora_rank and trainer.max_tokens must be at least 1, trainer.warmup_steps at "
                              "least 0")

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


__all__ = ["TrainerConfig"]
