"""``torch.distributed`` data parallel that runs the same on CPU (gloo) and on GPUs (nccl).

* :func:`launch` spawns ``world_size`` processes on this machine, each running
  ``fn(rank, world_size, *args)`` inside an initialised process group, and returns what each
  returned (so tests and the local loop get results back).
* In the cloud, ``torchrun`` (or Modal's clustered functions) sets ``RANK``, ``WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT``; :func:`init_from_env` joins that group. The Trainer only asks
  :func:`rank_world` and calls :func:`all_reduce_`, so its code is identical in both cases.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    import torch


def rank_world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) without an initialised process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_backend() -> str:
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_from_env(backend: str | None = None) -> tuple[int, int]:
    """Join the process group ``torchrun`` describes in the environment (no-op without one)."""
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend or default_backend(), rank=int(os.environ["RANK"]), world_size=world)
    return rank_world()


def all_reduce_(tensors: Sequence[torch.Tensor], op: str = "sum") -> None:
    """All-reduce ``tensors`` in place in one collective (flattened into one buffer per dtype and
    device); nothing happens with one process."""
    import torch
    import torch.distributed as dist

    if rank_world()[1] == 1 or not tensors:
        return
    red = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op]
    groups: dict[tuple[Any, Any], list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault((t.dtype, t.device), []).append(t)
    nccl = dist.get_backend() == "nccl"  # nccl reduces CUDA tensors only: CPU scalars (flags, counts) go via the GPU
    for ts in groups.values():
        flat = torch.cat([t.reshape(-1) for t in ts])
        if nccl and flat.device.type != "cuda":
            flat = flat.cuda()
        dist.all_reduce(flat, op=red)
        off = 0
        for t in ts:
            n = t.numel()
            t.copy_(flat[off: off + n].view_as(t).to(t.device))
            off += n


def _entry(rank: int, fn: Callable[..., Any], world_size: int, backend: str, port: int, out: str,
           threads: int, args: tuple[Any, ...]) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    result = fn(rank, world_size, *args)  # a failing rank leaves without the collective teardown
    torch.save(result, Path(out) / f"rank{rank}.pt")
    leave_group()
    exit_now(0)


def leave_group() -> None:
    """Leave the process group together with every other rank: a rank that tears its connections down
    while a peer is still working makes gloo's transport abort on the other side."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def exit_now(code: int) -> NoReturn:
    """End a rank without the interpreter's finalization. ``destroy_process_group`` drops the group from
    ``torch.distributed``'s tables, but FSDP's device mesh still holds it, so its gloo worker threads would
    be destroyed during finalization, after the interpreter stopped taking the GIL they need, and the rank
    would abort (SIGABRT) after finishing its work. Everything a rank leaves behind is on disk by then; its
    log handlers and standard streams are flushed here."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str | None = None,
           threads_per_rank: int | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned processes joined in a process
    group (gloo on CPU, nccl on GPUs); return each rank's return value (it must be picklable by
    ``torch.save``), in rank order. ``fn`` must be importable (a module-level function)."""
    import torch.multiprocessing as mp

    backend = backend or default_backend()
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    with tempfile.TemporaryDirectory(prefix="wb-dist-") as out:
        mp.spawn(_entry, args=(fn, world_size, backend, free_port(), out, threads, args), nprocs=world_size,
                 join=True)
        import torch

        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


__all__ = ["all_reduce_", "broadcast_object", "default_backend", "exit_now", "free_port", "init_from_env", "launch",
           "leave_group", "rank_world"]


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` from rank ``src`` on every rank (pickled); the object itself outside a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]
