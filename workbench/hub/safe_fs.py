"""Deleting and overwriting only inside one folder: every path the hub removes or replaces goes through here.

A path is taken as its parent resolved (symlinks and ``..`` followed) plus its own name, so a symlink is
removed as a link, never followed; the result must lie strictly inside the resolved root, else nothing is
touched and the refusal names the path. Writes go through :func:`workbench.fsutil.atomic_write`, so a
reader (or a kill) sees the old content or the new, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from workbench.errors import ConfigError
from workbench.fsutil import atomic_write


def inside(root: Path, path: Path) -> Path:
    """``path`` with its parent resolved, when it lies strictly inside ``root``; ConfigError otherwise."""
    base = root.resolve()
    p = Path(path)
    if p.name in ("", ".", ".."):
        raise ConfigError(f"refusing to touch {str(path)!r}: it does not name a file or folder inside {base}")
    target = p.parent.resolve() / p.name
    if target == base or not target.is_relative_to(base):
        raise ConfigError(f"refusing to touch {str(path)!r}: it is not inside {base}")
    return target


def remove_inside(root: Path, path: Path) -> bool:
    """Delete ``path`` (a folder with everything in it, a file, or a link itself) when it lies inside
    ``root``; whether anything was there."""
    target = inside(root, path)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        target.unlink()
        return True
    if target.is_dir():
        shutil.rmtree(target)
        return True
    return False


def write_inside(root: Path, path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` inside ``root`` atomically (a temporary sibling renamed over it)."""
    target = inside(root, path)
    return atomic_write(target, data, mkdirs=True)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock held on ``path`` (created when missing) for the block; the lock ends with the
    process, so a killed holder never leaves it taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        _flock(fd, blocking=True)
        yield
    finally:
        os.close(fd)


def try_lock_dir(path: Path) -> int | None:
    """An exclusive lock on the folder ``path`` (its open descriptor; closing it releases the lock), or
    None when another live process holds it (or where there are no advisory locks: then none is stale)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:  # pragma: no cover - Windows
        return None
    fd = os.open(path, os.O_RDONLY)
    if _flock(fd, blocking=False):
        return fd
    os.close(fd)
    return None


def _flock(fd: int, *, blocking: bool) -> bool:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows: no advisory locks; one pull at a time is up to the user
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


__all__ = ["inside", "locked", "remove_inside", "try_lock_dir", "write_inside"]
