"""Sharded checkpoints through ``torch.distributed.checkpoint`` (DCP): every rank writes its own
shards, and a later run reads them back on any number of ranks (DCP reshards on load).

Layout (``DIR``)::

    DIR/dcp/               DCP: .metadata + one __R_0.distcp per rank (model + optimizer, sharded)
    DIR/trainer_state.pt   scheduler state, step, skipped steps, RNG states (rank 0 writes it)
    DIR/trainer.json       step, world size, sharding, the trainer config and the model's identity

The model and optimizer go through ``get_state_dict`` / ``set_state_dict``
(``torch.distributed.checkpoint.state_dict``): under FSDP2 the state dicts hold DTensor shards,
with a whole model on every rank (data parallel, one process) plain tensors, which DCP writes once.
Either kind of trainer reads either kind of checkpoint. Frozen weights (a LoRA base model) are not
saved: the run rebuilds them from the model it names.

Atomic like :func:`~workbench_local.training.checkpoint.write_atomic`: rank 0 makes a hidden
temporary sibling of ``DIR`` and tells every rank its name, every rank writes into it, and after
all of them report success rank 0 moves it into place. A failure on any rank raises
:class:`~workbench_local.training.checkpoint.CheckpointError` on every rank and leaves the previous
checkpoint as it was. Every rank must see the same file system (one machine, or a shared volume).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from workbench_local.training import checkpoint as ckpt
from workbench_local.training.distributed import all_reduce_, broadcast_object, rank_world

from workbench.errors import ConfigError

DCP_DIR = "dcp"
#: parts of a parameter name that wrappers add (activation checkpointing, torch.compile, FSDP1)
_WRAPPER_PARTS = ("_checkpoint_wrapped_module.", "_orig_mod.", "_fsdp_wrapped_module.")


def is_sharded(src: Path) -> bool:
    """Whether the checkpoint directory ``src`` holds DCP shards (else whole weights)."""
    return (src / DCP_DIR / ".metadata").is_file()


# -- the model's identity ---------------------------------------------------------------------
def model_identity(model: Any) -> dict[str, Any]:
    """What the checkpoint's weights fit: the architecture, its sizes, and a digest of every
    parameter's name and (global, unsharded) shape."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    digest = hashlib.sha256()
    for name, p in model.named_parameters():
        digest.update(f"{_fqn(name)}:{tuple(p.shape)};".encode())
    return {"architecture": type(base).__name__,
            "hidden_size": getattr(config, "hidden_size", None),
            "num_hidden_layers": getattr(config, "num_hidden_layers", None),
            "vocab_size": getattr(config, "vocab_size", None),
            "parameters": sum(p.numel() for p in model.parameters()),
            "shapes_sha256": digest.hexdigest()[:16]}


def check_model(saved: dict[str, Any] | None, model: Any, src: Path) -> None:
    """ConfigError naming both models when the checkpoint at ``src`` is of another model than
    ``model`` (a checkpoint that records no identity passes)."""
    if not saved:
        return
    mine = model_identity(model)
    if all(saved.get(k) == mine[k] for k in ("architecture", "hidden_size", "num_hidden_layers", "vocab_size",
                                             "shapes_sha256")):
        return
    raise ConfigError(f"the checkpoint at {src} is of another model ({_describe(saved)}) than this trainer's "
                      f"({_describe(mine)}); resume with trainer.model set to the model it was trained from")


def _describe(identity: dict[str, Any]) -> str:
    return (f"{identity.get('architecture')}, hidden size {identity.get('hidden_size')}, "
            f"{identity.get('num_hidden_layers')} layers, vocabulary {identity.get('vocab_size')}, "
            f"{identity.get('parameters')} parameters, shapes {identity.get('shapes_sha256')}")


def _fqn(name: str) -> str:
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


# -- save and load ----------------------------------------------------------------------------
def _options(*, strict: bool = True) -> Any:
    """Trainable weights only; loading leaves the frozen ones (not in the checkpoint) as they are."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=True, strict=strict)


def save(target: Path | str, model: Any, optimizer: Any, state: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``model`` and ``optimizer`` (every rank its shards), ``state`` (``trainer_state.pt``)
    and ``meta`` (``trainer.json``) to ``target``, atomically. Every rank calls it."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict

    target = Path(target).expanduser().resolve()
    rank, _ = rank_world()
    made: Path | str = ""
    if rank == 0:
        try:
            made = ckpt.temp_dir(target)
        except ckpt.CheckpointError as e:
            made = f"!{e}"
    made = broadcast_object(str(made))
    if str(made).startswith("!"):
        raise ckpt.CheckpointError(str(made)[1:])
    tmp = Path(made)
    error: str | None = None
    try:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=tmp / DCP_DIR)
        if rank == 0:
            torch.save(state, tmp / "trainer_state.pt")
            (tmp / "trainer.json").write_text(json.dumps({**meta, "format": "dcp"}, indent=2, default=str))
    except OSError as e:
        error = str(ckpt.write_error(target, e))
    except CheckpointException as e:  # raised on every rank when any rank failed to write
        error = _failure(target, e)
    except Exception as e:
        error = f"cannot write the checkpoint {target}: {_line(e)}"
    error = _first_error(error)
    if error is None and rank == 0:
        try:
            ckpt.commit(tmp, target)
        except OSError as e:
            error = str(ckpt.write_error(target, e))
    error = _first_error(error)
    if error is not None:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise ckpt.CheckpointError(error)
    return target


def load(src: Path, model: Any, optimizer: Any) -> dict[str, Any]:
    """Read the model and optimizer shards at ``src`` into ``model`` and ``optimizer`` (resharded
    to this run's ranks, or whole without sharding) and return ``trainer_state.pt``. Every rank
    calls it."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    try:
        dcp.load({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=src / DCP_DIR)
    except (CheckpointException, OSError) as e:
        raise ckpt.CheckpointError(f"cannot read the checkpoint {src}: {_line(_cause(e))}") from None
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=_options(strict=False))
    return dict(torch.load(src / "trainer_state.pt", map_location="cpu", weights_only=False))


def _failure(target: Path, e: BaseException) -> str:
    """One line for a DCP failure: the full-disk sentence when a rank ran out of space."""
    cause = _cause(e)
    if isinstance(cause, OSError) and cause.errno is not None:
        return str(ckpt.write_error(target, cause))
    return f"cannot write the checkpoint {target}: {_line(cause)}"


def _cause(e: BaseException) -> BaseException:
    """The first rank's own exception inside DCP's ``CheckpointException``."""
    failures = getattr(e, "failures", None) or {}
    for rank in sorted(failures):
        exc = failures[rank][0] if isinstance(failures[rank], tuple) else failures[rank]
        if isinstance(exc, BaseException):
            return exc
    return e


def _line(e: BaseException) -> str:
    """The first line of ``e``'s message (DCP's own messages run over several)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _first_error(error: str | None) -> str | None:
    """The first rank's error (with its rank) on every rank, or None when every rank succeeded."""
    import torch
    import torch.distributed as dist

    _, world = rank_world()
    if world == 1:
        return error
    flag = torch.tensor([1.0 if error else 0.0])
    all_reduce_([flag], op="max")
    if flag.item() == 0:
        return None
    errors: list[Any] = [None] * world
    dist.all_gather_object(errors, error)
    rank, first = next((r, m) for r, m in enumerate(errors) if m)
    return first if rank == 0 else f"on rank {rank}: {first}"


__all__ = ["DCP_DIR", "check_model", "is_sharded", "load", "model_identity", "save"]


def load_whole(src: Path, model: Any, optimizer: Any, optimizer_state: dict[str, Any]) -> None:
    """Read a checkpoint of whole weights (``adapter/`` or ``model/`` safetensors, as a data
    parallel run saves it) and its optimizer state (``optimizer.state_dict()``: parameters by
    position among the trainable ones) into ``model`` and ``optimizer``, sharded or not."""
    from safetensors.torch import load_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    trainable = [_fqn(n) for n, p in model.named_parameters() if p.requires_grad]
    weights: dict[str, Any] = {}
    folder = src / "adapter" if (src / "adapter").is_dir() else src / "model"
    for f in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    by_saved_name = {_peft_saved_name(n): n for n in trainable}
    unknown = [k for k in weights if k not in by_saved_name]
    if unknown:
        raise ConfigError(f"the checkpoint's weights at {src} do not fit this model (unexpected {unknown[0]}); "
                          "resume with the same model and LoRA settings")
    model_sd = {by_saved_name[k]: v for k, v in weights.items()}
    optim_sd: dict[str, Any] = {"state": {trainable[i]: s for i, s in optimizer_state["state"].items()},
                                "param_groups": [{**g, "params": [trainable[i] for i in g["params"]]}
                                                 for g in optimizer_state["param_groups"]]}
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd,
                   options=StateDictOptions(full_state_dict=True, ignore_frozen_params=True, strict=False))


def _peft_saved_name(fqn: str) -> str:
    """A trainable parameter's name in the files peft saves: without the adapter's own name."""
    return fqn.replace(".default.", ".")
