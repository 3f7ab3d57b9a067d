"""The trainer's weights as Hugging Face files: what the embedded server, vLLM and
``from_pretrained`` load, written the same way whether the model is whole on one process or
sharded over many by FSDP.

* Full fine-tuning: ``config.json`` (+ ``generation_config.json``) and the weights as safetensors,
  ``model.safetensors`` when they fit one file, else ``model-0000k-of-0000n.safetensors`` with a
  ``model.safetensors.index.json`` (the layout ``save_pretrained`` writes), each file at most
  ``max_shard_bytes`` (a tensor larger than that gets a file of its own).
* LoRA: the peft adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``).

Under FSDP (parameters are ``DTensor``\\ s sharded over the ranks) :func:`write_weights` is a
collective: every rank calls it, each parameter is gathered in turn with ``DTensor.full_tensor``
(state-dict order, the same on every rank) and rank 0 keeps it only until the file it belongs to is
written. So no rank ever holds more than one file's worth of gathered weights, and never the whole
model — unlike ``torch.distributed.checkpoint.state_dict.get_model_state_dict(...,
StateDictOptions(full_state_dict=True, cpu_offload=True))``, which gathers the whole state dict
onto rank 0 before returning it. Without sharding only rank 0 reads and writes; the others return
once rank 0 says how it went.

Tied weights (an output head that shares the embedding) are written once, under the first name
that holds them, as ``save_pretrained`` does; ``from_pretrained`` ties them again.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_local.training import checkpoint as ckpt
from workbench_local.training.distributed import all_reduce_, rank_world

#: The largest safetensors file :func:`write_weights` writes by default (``save_pretrained``'s 5 GB).
MAX_SHARD_BYTES = 5 * 10**9
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
ADAPTER_FILE = "adapter_model.safetensors"


def write_weights(model: Any, path: Path | str, *, lora: bool, max_shard_bytes: int = MAX_SHARD_BYTES,
                  dtype: Any = None) -> Path:
    """Write ``model``'s weights (or its LoRA adapter) to ``path`` atomically (a hidden temporary
    sibling renamed into place, as checkpoints are). A collective in a process group: call it on every
    rank; each returns the resolved path, or each raises (rank 0's CheckpointError, the others one
    that names rank 0). ``dtype`` casts floating-point weights as they are written (e.g. bfloat16
    for vLLM); None keeps the trained dtype."""
    rank, world = rank_world()
    sharded = is_sharded(model)
    error: Exception | None = None
    gathered = False

    def write(tmp: Path) -> None:
        nonlocal gathered
        gathered = True
        write_into(model, tmp, lora=lora, max_shard_bytes=max_shard_bytes, dtype=dtype)

    if rank == 0:
        try:
            ckpt.write_atomic(path, write)
        except Exception as e:  # re-raised below, after the other ranks heard of it
            error = e
            if sharded and not gathered:  # failed before writing: still take part in the others' gathers
                write_into(model, None, lora=lora, max_shard_bytes=max_shard_bytes, dtype=dtype)
    elif sharded:
        write_into(model, None, lora=lora, max_shard_bytes=max_shard_bytes, dtype=dtype)
    if world > 1:
        import torch

        flag = torch.tensor([1.0 if error else 0.0])
        all_reduce_([flag], op="max")
        if error is None and flag.item() > 0:
            raise ckpt.CheckpointError(f"rank 0 could not write the weights {path}")
    if error is not None:
        raise error
    return Path(path).expanduser().resolve()


def write_into(model: Any, out: Path | None, *, lora: bool, max_shard_bytes: int = MAX_SHARD_BYTES,
               dtype: Any = None) -> None:
    """Write the files into the existing directory ``out`` (no atomic swap, no agreement between
    ranks). Sharded parameters are gathered here, so under FSDP every rank calls it, the ranks other
    than 0 with ``out=None`` (they gather and write nothing). A write that fails on rank 0 keeps
    gathering to the end, so the other ranks never wait on it, and then raises."""
    if lora:
        _write_adapter(model, out, dtype)
        return
    tensors = weight_tensors(model)
    plan = plan_files(tensors, max_shard_bytes, dtype)
    sink = _FileSink(out, plan) if out is not None else None
    for name, tensor in tensors.items():
        full = _materialise(tensor, dtype)
        if sink is not None:
            sink.add(name, full)
        del full
    if sink is not None:
        sink.close()
        _write_configs(model, sink.out, dtype)


def is_sharded(model: Any) -> bool:
    """Whether any parameter of ``model`` is a ``DTensor`` (FSDP2 shards them so)."""
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def weight_tensors(model: Any) -> dict[str, Any]:
    """The state dict's tensors as the model holds them (sharded ``DTensor``\\ s stay sharded), a
    tensor shared by several names (tied weights) under the first of them only."""
    seen: set[int] = set()
    out: dict[str, Any] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        out[name] = tensor
    return out


@dataclass(slots=True)
class FilePlan:
    """Which file each tensor goes to, decided from shapes and dtypes before anything is gathered."""

    files: list[list[str]] = field(default_factory=list)  # tensor names per file, in write order
    total_bytes: int = 0

    def file_name(self, index: int) -> str:
        n = len(self.files)
        return SINGLE_FILE if n == 1 else f"model-{index + 1:05d}-of-{n:05d}.safetensors"


def plan_files(tensors: dict[str, Any], max_shard_bytes: int, dtype: Any = None) -> FilePlan:
    """Consecutive tensors fill a file up to ``max_shard_bytes``; a tensor larger than that alone."""
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes must be positive, not {max_shard_bytes}")
    plan = FilePlan()
    size = 0
    for name, tensor in tensors.items():
        nbytes = tensor.numel() * _out_dtype(tensor, dtype).itemsize  # a DTensor's numel is the global one
        if not plan.files or (plan.files[-1] and size + nbytes > max_shard_bytes):
            plan.files.append([])
            size = 0
        plan.files[-1].append(name)
        size += nbytes
        plan.total_bytes += nbytes
    if not plan.files:
        plan.files.append([])
    return plan


class _FileSink:
    """Rank 0's side: holds the gathered tensors of the file being filled and writes it when full."""

    def __init__(self, out: Path, plan: FilePlan) -> None:
        self.out, self.plan = out, plan
        self.file_of = {name: i for i, names in enumerate(plan.files) for name in names}
        self.pending: dict[str, Any] = {}
        self.index = 0
        self.error: Exception | None = None

    def add(self, name: str, tensor: Any) -> None:
        if self.error is not None:
            return  # keep taking part in the gathers; nothing more is written
        self.pending[name] = tensor
        if len(self.pending) == len(self.plan.files[self.index]):
            self._flush()

    def _flush(self) -> None:
        from safetensors.torch import save_file

        try:
            save_file(self.pending, str(self.out / self.plan.file_name(self.index)), metadata={"format": "pt"})
        except Exception as e:
            self.error = e
        self.pending = {}
        self.index += 1

    def close(self) -> None:
        if self.error is None and len(self.plan.files) == 1 and not self.plan.files[0]:
            self._flush()  # a model without tensors still gets its (empty) file
        if self.error is not None:
            raise self.error
        if len(self.plan.files) > 1:
            index = {"metadata": {"total_size": self.plan.total_bytes},
                     "weight_map": {name: self.plan.file_name(i) for name, i in sorted(self.file_of.items())}}
            (self.out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")


def _out_dtype(tensor: Any, dtype: Any) -> Any:
    return dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype


def _materialise(tensor: Any, dtype: Any) -> Any:
    """The whole tensor on the CPU, contiguous, in the written dtype (gathered if it is sharded)."""
    from torch.distributed.tensor import DTensor

    t = tensor.detach()
    if isinstance(t, DTensor):
        t = t.full_tensor()
    return t.to(device="cpu", dtype=_out_dtype(t, dtype)).contiguous()


def _write_configs(model: Any, out: Path, dtype: Any) -> None:
    config = copy.deepcopy(_base(model).config)
    if dtype is not None:
        config.dtype = dtype
    config.save_pretrained(str(out))
    generation = getattr(_base(model), "generation_config", None)
    if generation is not None:
        try:
            generation.save_pretrained(str(out))
        except Exception:  # a generation config that does not validate is left out, as save_pretrained warns
            pass


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _write_adapter(model: Any, out: Path | None, dtype: Any) -> None:
    """The adapter as peft saves it (less the model card), its tensors gathered one by one."""
    import dataclasses

    from workbench_local.models.lora import adapter_state

    state = {name: _materialise(t, dtype) for name, t in adapter_state(model).items()}
    if out is None:
        return
    from safetensors.torch import save_file

    save_file(state, str(out / ADAPTER_FILE), metadata={"format": "pt"})
    dataclasses.replace(model.peft_config["default"], inference_mode=True).save_pretrained(str(out))


__all__ = ["FilePlan", "MAX_SHARD_BYTES", "is_sharded", "plan_files", "weight_tensors", "write_into",
           "write_weights"]
