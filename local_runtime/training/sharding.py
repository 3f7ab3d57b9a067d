"""FSDP2 full sharding of the policy (``[trainer] sharding = "fsdp"``): parameters, gradients and
optimizer state split over every trainer rank, with PyTorch's own ``fully_shard``.

How the policy is cut into units::

    PolicyForward (root unit: embedding, final norm, output head — tied embeddings stay together)
      └─ causal LM (or its peft wrapper)
           └─ decoder.layers[i]   (one unit each: all-gathered just before it runs, freed after)

* Each unit all-gathers its parameters before its forward and reduce-scatters its gradients after its
  backward. Those are collectives: every rank must run the same number of forward and backward passes
  (the trainer pads a rank that has fewer micro-batches with zero-weight passes).
* Gradients are *summed* over ranks (divide factor 1): the trainer's losses are already normalised by
  step-wide counts, so N ranks take exactly the step one process takes.
* On CUDA the parameters are kept in float32 and computed in bfloat16, gradients reduced in float32
  (``MixedPrecisionPolicy``); on CPU everything is float32.
* Activation checkpointing stays the model's own (``gradient_checkpointing_enable``): the decoder
  layers checkpoint their ``forward``, so FSDP's hooks on the layer run outside the recomputation.

:func:`state_bytes` measures what one rank holds of the training state, from the local shards of the
sharded tensors themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from workbench.errors import ConfigError


def process_group_ready() -> bool:
    """Whether a ``torch.distributed`` process group is initialised (FSDP needs one, even of size 1)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def decoder_layers(model: Any) -> nn.ModuleList | None:
    """The causal LM's list of decoder layers (under a peft wrapper too): ``get_decoder().layers``,
    else the first non-empty ``ModuleList`` whose entries are all of one class; ``None`` if none."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if isinstance(layers, nn.ModuleList) and len(layers) > 0:
        return layers
    for module in base.modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0 and len({type(m) for m in module}) == 1:
            return module
    return None


def check_shardable(model: Any, name: str) -> nn.ModuleList:
    """The decoder layers FSDP shards one by one; one clear line when the model has none."""
    layers = decoder_layers(model)
    if layers is None:
        kind = type(model.get_base_model() if hasattr(model, "get_base_model") else model).__name__
        raise ConfigError(f'trainer.sharding = "fsdp" cannot shard model {name} ({kind}): it has no list of decoder '
                          f'layers to shard one by one; use sharding = "ddp"')
    return layers


def mixed_precision(device: str, dtype_setting: str) -> bool:
    """bf16 compute over float32 sharded parameters: on CUDA when the dtype is left to ``auto``."""
    return device.startswith("cuda") and dtype_setting == "auto"


def shard_policy(policy: nn.Module, layers: nn.ModuleList, *, device: str, mixed: bool,
                 keep_root_gathered: bool = True) -> nn.Module:
    """Apply ``fully_shard`` to every decoder layer, then to ``policy`` (the root), in place, over all
    ranks of the default process group; gradients are summed over ranks, not averaged. A frozen module
    (the reference model) passes ``keep_root_gathered=False`` so nothing stays gathered between steps."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh("cuda" if device.startswith("cuda") else "cpu", (dist.get_world_size(),))
    layer_mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed
                else MixedPrecisionPolicy())
    # the root's input is a MicroBatch of ids and masks: nothing of it is cast
    root_mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                    cast_forward_inputs=False) if mixed
               else MixedPrecisionPolicy(cast_forward_inputs=False))
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=layer_mp, reshard_after_forward=True)
    fully_shard(policy, mesh=mesh, mp_policy=root_mp, reshard_after_forward=None if keep_root_gathered else True)
    for module in policy.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # a plain SUM: every backend has it (gloo too)
    return policy


def _local_bytes(t: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def state_bytes(params: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """This rank's training-state bytes: its shard of every parameter (frozen ones too), of every
    gradient present, and of the optimizer state (Adam's moments), with ``total`` their sum."""
    seen: set[int] = set()
    p_bytes = g_bytes = 0
    for p in params:
        if id(p) in seen:
            continue
        seen.add(id(p))
        p_bytes += _local_bytes(p)
        if p.grad is not None:
            g_bytes += _local_bytes(p.grad)
    o_bytes = 0
    if optimizer is not None:
        for st in optimizer.state.values():
            o_bytes += sum(_local_bytes(v) for v in st.values() if isinstance(v, torch.Tensor))
    return {"params": p_bytes, "grads": g_bytes, "optimizer": o_bytes, "total": p_bytes + g_bytes + o_bytes}


def grad_norm_and_clip(params: list[torch.Tensor], max_norm: float) -> float:
    """The total gradient norm over every rank (a sharded norm made whole), then clip by it."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return float(total)


__all__ = ["check_shardable", "decoder_layers", "grad_norm_and_clip", "mixed_precision", "process_group_ready",
           "shard_policy", "state_bytes"]
