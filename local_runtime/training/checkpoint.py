"""Crash- and full-disk-safe checkpoint directories.

A checkpoint is written whole into a hidden temporary sibling (``.NAME.tmp-XXXX``) and only then
renamed into place; a previous checkpoint at the same path is first renamed aside
(``.NAME.old-XXXX``) and removed after the swap. So a failure while writing (a full disk:
``OSError(ENOSPC)``) leaves the previous checkpoint exactly as it was, and a crash between the
two renames leaves it recoverable (:func:`resolve` finds it).

Layout written by ``Trainer.save_checkpoint`` (``workbench_local.training.trainer``) with data
parallel or one process (under FSDP every rank writes shards instead: ``sharded_checkpoint.py``)::

    DIR/adapter/           LoRA: adapter_config.json + adapter_model.safetensors (peft / vLLM load it)
    DIR/model/             full fine-tuning instead: save_pretrained safetensors
    DIR/trainer_state.pt   optimizer + scheduler state, step, skipped steps, RNG states
    DIR/trainer.json       step and the trainer config, for people and for checks on resume
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from workbench.errors import WorkbenchError


class CheckpointError(WorkbenchError):
    """A checkpoint cannot be written or read."""


def write_atomic(target: Path | str, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_dir)`` and move ``tmp_dir`` to ``target``, replacing it only on success."""
    target = Path(target).expanduser().resolve()
    tmp = temp_dir(target)
    try:
        write(tmp)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise write_error(target, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return commit(tmp, target)


def temp_dir(target: Path) -> Path:
    """A fresh hidden sibling of ``target`` to write a checkpoint into (``.NAME.tmp-XXXX``)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".{target.name}.tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as e:
        raise write_error(target, e) from None
    return tmp


def write_error(target: Path, e: OSError) -> CheckpointError:
    """The one-line error for ``e`` raised while writing the checkpoint ``target``."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return CheckpointError(f"no space left on the device while writing the checkpoint {target}; the "
                               f"previous checkpoint there{' is intact' if target.exists() else ' (none)'}; free "
                               "some disk space or point the checkpoint directory elsewhere, then resume")
    return CheckpointError(f"cannot write the checkpoint {target}: {e.strerror or e}")


def commit(tmp: Path, target: Path) -> Path:
    """Move the fully written ``tmp`` to ``target``: the previous checkpoint goes aside first
    (``.NAME.old-XXXX``, which :func:`resolve` finds after a crash between the renames) and is
    removed after the swap."""
    _fsync_dir(tmp)
    old = target.parent / f".{target.name}.old-{tmp.name.rsplit('-', 1)[-1]}"
    if target.exists():
        os.rename(target, old)
    os.rename(tmp, target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)
    return target


def resolve(target: Path | str) -> Path:
    """The checkpoint directory to read: ``target``, or the copy a crash mid-swap left aside."""
    target = Path(target).expanduser().resolve()
    if target.is_dir():
        return target
    aside = sorted(target.parent.glob(f".{target.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if aside:
        return aside[-1]
    raise CheckpointError(f"no checkpoint at {target}; pass the directory a previous run saved")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["CheckpointError", "commit", "resolve", "temp_dir", "write_atomic", "write_error"]
