"""The one way Workbench writes a file it reads back: whole or not at all.

:func:`atomic_write` writes to a temporary file beside the target (same folder, so the same file
system), flushes and fsyncs it, renames it over the target with ``os.replace`` and fsyncs the folder,
so a reader, a crash or a kill sees the old content or the new one, never half of either; on any
error the temporary file is removed and the target is left as it was, and the temporary file a killed
writer could not remove goes with the next write of the same target. tests/test_atomic_writes.py
fails on a bare ``write_text``/``write_bytes``/``open(..., "w")``/``json.dump``/``os.replace`` in the
product's code that is not on its commented allow-list.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

TMP_SUFFIX = ".tmp"


def _tmp_prefix(name: str) -> str:
    """Temporary names carry the writer's pid, so a later write can tell a dead writer's leftover."""
    return f".{name}.{os.getpid()}."


def _sweep(target: Path) -> None:
    """Remove the temporary files a killed writer left beside ``target`` (its pid no longer runs)."""
    head = f".{target.name}."
    with contextlib.suppress(OSError):
        for p in target.parent.iterdir():
            rest = p.name[len(head):] if p.name.startswith(head) and p.name.endswith(TMP_SUFFIX) else ""
            pid = rest.split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    p.unlink()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but is not ours (PermissionError), or no signals here
        return True
    return True


def atomic_write(path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None,
                 encoding: str = "utf-8", mkdirs: bool = False) -> Path:
    """Replace ``path`` with ``data`` atomically; the path written.

    ``str`` data is encoded with ``encoding`` (no newline translation). ``mode`` sets the file's
    permission bits; without it a new file gets the usual ``0o666 & ~umask`` and an existing one keeps
    its own. ``mkdirs`` creates the missing parent folders first."""
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    with atomic_open(path, mode=mode, mkdirs=mkdirs) as f:
        f.write(raw)
    return Path(path)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], *, mode: int | None = None,
                mkdirs: bool = False) -> Iterator[BinaryIO]:
    """A binary file to stream into that replaces ``path`` when the block ends without an error (as
    :func:`atomic_write` does); an error in the block leaves ``path`` as it was and no temporary file."""
    target = Path(path)
    if mkdirs:
        target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(target.name), suffix=TMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    _sweep(target)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the platform lets a folder be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def staged_folder(path: str | os.PathLike[str], *, over_empty: bool = True) -> Iterator[Path]:
    """A fresh folder beside ``path`` to fill, which becomes ``path`` in one rename when the block ends without
    an error: a reader sees no folder, or the whole one. ``path`` must not exist, or, with ``over_empty``, be an
    empty folder, which the new one replaces. An error in the block or in the rename (``FileExistsError`` where
    ``path`` exists, ``OSError`` where it is not empty) removes the staged folder and leaves ``path`` as it was.
    The folder gets the usual permissions of a new folder (``0o777 & ~umask``), not a temporary one's."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=_tmp_prefix(target.name), suffix=TMP_SUFFIX, dir=target.parent))
    try:
        yield staging
        os.chmod(staging, 0o777 & ~_umask())
        if not over_empty and (target.exists() or target.is_symlink()):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(target))
        staging.rename(target)  # onto an empty folder it replaces it; onto a non-empty one the OS refuses
        _fsync_dir(target.parent)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def leftover_temps(folder: str | os.PathLike[str]) -> list[Path]:
    """Temporary files :func:`atomic_write` left in ``folder`` (none, unless a process died mid-write)."""
    return sorted(p for p in Path(folder).iterdir() if p.name.startswith(".") and p.name.endswith(TMP_SUFFIX))


__all__ = ["atomic_open", "atomic_write", "leftover_temps", "staged_folder"]
