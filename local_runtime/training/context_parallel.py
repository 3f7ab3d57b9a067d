"""Context parallelism: the ranks of one context-parallel group split one long sequence between them
and run attention as a ring, on PyTorch's own context-parallel engine
(``torch.distributed.tensor.experimental.context_parallel``, torch 2.13).

What each piece is, and where it runs:

* **The sequence split** (any device): torch's head-tail load balancer (``_HeadTailLoadBalancer``,
  the one ``context_parallel`` picks by default) cuts the sequence into ``2 x cp`` equal chunks and
  gives rank ``r`` chunks ``r`` and ``2 x cp - 1 - r``, so every rank does the same share of causal
  attention work. :func:`sharded_sequence` pads the sequence to a multiple of ``2 x cp`` (padding goes
  at the end, so causal attention never lets a real token see it) and shards every per-token tensor
  inside torch's ``context_parallel`` context.
* **Position ids** (any device): a ``position_ids`` buffer is sharded with the tokens, so each rank's
  tokens keep their global positions and rotary embeddings see the same angles as in one process.
* **Ring attention** (CUDA for training): inside ``context_parallel`` torch replaces
  ``F.scaled_dot_product_attention`` by a ring over the group; its DTensor handlers exist for the
  CUDA SDPA kernels only (flash, memory-efficient, cuDNN), forward and backward. A CPU's SDPA kernel
  (``aten._scaled_dot_product_flash_attention_for_cpu``) has no context-parallel handler in torch
  2.13 ("does not have a sharding strategy registered"), so on a CPU :func:`ring_attention` calls
  torch's ring algorithm itself (``_templated_ring_attention``, the function the CUDA handlers call)
  with the CPU kernel: forward only, for checking logprobs; training with ``context_parallel > 1``
  needs CUDA (:func:`require_ring_attention`).
* **The loss** (any device): the per-token weights (``losses.token_weights``) are computed on the
  whole rows before the split (``"sequence"`` divides by a row's token count, which no rank sees
  alone) and sharded with the tokens; every rank computes its tokens' loss terms with them, so the
  group's sum is the whole-sequence loss (:func:`group_sum` for the metric). Each rank
  back-propagates its own share; the parameter gradients are summed by a gradient reduction over
  every rank (FSDP's mesh or the data-parallel all-reduce, SUM), which spans the group, so the sum is
  one process's gradient of the whole batch (each token lies on exactly one rank of its group).
* **Reassembly** of per-token outputs (any device): :func:`unshard` (torch's
  ``context_parallel_unshard``) all-gathers the group's shards and puts them back in sequence order.

The HF model runs with the attention implementation :data:`RING_ATTENTION` (:func:`use_ring_attention`):
HF builds no mask for it (torch's ring takes only ``is_causal``) and does not mistake the
non-contiguous position ids for packed sequences. On CUDA the forward *and* the backward run inside
:func:`sharded_sequence` (torch dispatches the ring's backward there too).

The Trainer routes its micro-batches through these pieces when ``[trainer] context_parallel > 1``
(``cp_step.py``: the ``(dp, cp)`` mesh, the batch sharded over ``dp``, counts once per cp group);
its ``evaluate`` runs on any device, its ``step`` needs CUDA (:func:`require_ring_attention`, called
at the step, and the launcher's machine check before any process starts). ``scripts/gpu_check.py``
(section ``context_parallel``) runs the Trainer's step split over every GPU against one GPU.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

#: The HF attention implementation name the model runs under context parallelism.
RING_ATTENTION = "workbench_ring"
#: The tensor of per-token global positions :func:`sharded_sequence` adds to the shards.
POSITION_IDS = "position_ids"

_active: dict[str, Any] = {}  # {"mesh": DeviceMesh} while a sharded_sequence context is open


def require_ring_attention(context_parallel: int, device: str) -> None:
    """One clear line when ``context_parallel > 1`` cannot train here: torch's ring attention has
    forward and backward handlers for the CUDA SDPA kernels only."""
    import torch

    if context_parallel <= 1:
        return
    if not torch.cuda.is_available():
        raise ConfigError(f"trainer.context_parallel = {context_parallel}: context parallelism needs CUDA ring "
                          "attention; this machine has no GPU")
    if device != "auto" and not device.startswith("cuda"):
        raise ConfigError(f"trainer.context_parallel = {context_parallel}: context parallelism needs CUDA ring "
                          f"attention; trainer.device is {device!r}")


def padded_length(seq_len: int, cp: int) -> int:
    """``seq_len`` rounded up to a multiple of ``2 x cp`` (the head-tail split's chunk count)."""
    step = 2 * cp
    return -(-seq_len // step) * step


def balanced_order(seq_len: int, cp: int) -> torch.Tensor:
    """The global positions in the order torch's head-tail load balancer lays the sequence out
    (rank 0's shard first); ``seq_len`` must be a multiple of ``2 x cp``."""
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    return _HeadTailLoadBalancer(seq_len, cp, "cpu")._generate_indices()[0].long()


def group_mesh(cp: int, device_type: str) -> DeviceMesh:
    """A ``(dp, cp)`` mesh over every rank (``dp = world / cp``) and its ``cp`` dimension: the group
    of ``cp`` consecutive ranks this rank splits sequences with; one clear line when ``cp`` does not
    divide the ranks (one, without a process group)."""
    from torch.distributed.device_mesh import init_device_mesh
    from workbench_local.training.distributed import rank_world

    world = rank_world()[1]
    if world % cp:
        raise ConfigError(f"trainer.context_parallel = {cp} must divide the number of trainer ranks ({world})")
    return init_device_mesh(device_type, (world // cp, cp), mesh_dim_names=("dp", "cp"))["cp"]


@contextlib.contextmanager
def sharded_sequence(mesh: DeviceMesh, tensors: dict[str, torch.Tensor],
                     pad_values: dict[str, float] | None = None) -> Iterator[dict[str, torch.Tensor]]:
    """Inside, ``tensors`` (each ``[batch, seq]``, the same ``seq``) hold only this rank's shard of
    the padded sequence, ``POSITION_IDS`` their global positions, and attention runs as torch's
    ring over ``mesh`` (:func:`ring_attention`). Tensors are padded with ``pad_values[name]`` (0 by
    default; give a loss mask 0 so padding carries no loss). The yielded dict holds new tensors;
    the caller's are left as they were."""
    import torch
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp_attention

    if not tensors:
        raise ValueError("sharded_sequence needs at least one tensor to shard")
    first = next(iter(tensors.values()))
    batch, seq_len = first.shape[0], first.shape[1]
    cp = mesh.size()
    total = padded_length(seq_len, cp)
    pads = pad_values or {}
    local: dict[str, torch.Tensor] = {}
    for name, t in tensors.items():
        if t.shape[:2] != (batch, seq_len):
            raise ValueError(f"{name} is {tuple(t.shape)}; every tensor must start with [{batch}, {seq_len}]")
        fill = t.new_full((batch, total - seq_len, *t.shape[2:]), pads.get(name, 0))
        local[name] = torch.cat([t, fill], dim=1)
    local[POSITION_IDS] = torch.arange(total, device=first.device).expand(batch, total).contiguous()
    buffers = list(local.values())
    cp_attention._cp_options.enable_load_balance = True  # context_parallel then picks the head-tail split
    with context_parallel(mesh, buffers=buffers, buffer_seq_dims=[1] * len(buffers),
                          no_restore_buffers=set(buffers)):
        _active["mesh"] = mesh
        try:
            yield local
        finally:
            _active.pop("mesh", None)


def unshard(mesh: DeviceMesh, local: torch.Tensor, seq_len: int) -> torch.Tensor:
    """This rank's ``[batch, seq/cp, ...]`` shard of a per-token output, gathered over the group and
    put back in sequence order (torch's ``context_parallel_unshard``), cut to ``seq_len``."""
    from torch.distributed.tensor.experimental._context_parallel._attention import context_parallel_unshard
    from torch.distributed.tensor.experimental._context_parallel._load_balancer import _HeadTailLoadBalancer

    total = local.shape[1] * mesh.size()
    balancer = _HeadTailLoadBalancer(total, mesh.size(), local.device)
    return context_parallel_unshard(mesh, [local], [1], balancer)[0][:, :seq_len]


def group_sum(mesh: DeviceMesh, value: torch.Tensor) -> torch.Tensor:
    """``value`` summed over the context-parallel group (detached: a metric such as the loss; the
    gradients are summed by the gradient reduction)."""
    import torch.distributed as dist

    out = value.detach().clone()
    dist.all_reduce(out, group=mesh.get_group())
    return out


def ring_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """An HF attention function: causal attention of this rank's query shard over the whole
    sequence's keys and values, as torch's ring over the active group. ``query``/``key``/``value``
    are ``[batch, heads, seq/cp, dim]``; returns ``[batch, seq/cp, heads, dim]``."""
    import torch
    import torch.nn.functional as F
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp_attention

    mesh = _active.get("mesh")
    if mesh is None:
        raise RuntimeError(f"attention {RING_ATTENTION!r} runs only inside context_parallel.sharded_sequence")
    if attention_mask is not None or dropout:
        raise RuntimeError("ring attention takes no attention mask and no dropout")
    groups = getattr(module, "num_key_value_groups", 1)
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    if query.device.type == "cuda":
        out = F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling)  # torch's ring
    else:
        if torch.is_grad_enabled() and query.requires_grad:
            raise RuntimeError("ring attention's backward needs CUDA; on a CPU it runs under torch.no_grad only")
        saved = cp_attention._cp_options.enable_load_balance
        cp_attention._cp_options.enable_load_balance = True  # sharded_sequence always uses the head-tail split
        try:
            out = cp_attention._templated_ring_attention(
                mesh.get_group(), 2, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu, query, key, value,
                is_causal=True, scale=scaling)[0]
        finally:
            cp_attention._cp_options.enable_load_balance = saved
    return out.transpose(1, 2).contiguous(), None


def use_ring_attention(model: Any) -> None:
    """Register :func:`ring_attention` with HF and switch ``model`` to it."""
    from transformers import AttentionInterface

    AttentionInterface.register(RING_ATTENTION, ring_attention)
    model.set_attn_implementation(RING_ATTENTION)


__all__ = ["POSITION_IDS", "RING_ATTENTION", "balanced_order", "group_mesh", "group_sum", "padded_length",
           "require_ring_attention", "ring_attention", "sharded_sequence", "unshard", "use_ring_attention"]
