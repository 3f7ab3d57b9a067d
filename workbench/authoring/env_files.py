"""An environment's files and its content hash: one walk, one hash, for its version and its bundle.

The files are every file under the environment's package directory (or the single file), minus caches
and tool folders, in canonical order (by path components); the hash is sha256 over each file's POSIX
relative path and bytes, then the dependency lock when there is one. ``discovery.env_version`` is the
first 12 hex digits of the hash without a lock; a bundle's hash includes its lock.

The walk never leaves the environment's folder: a symlink whose target resolves outside it (a file or a
folder) refuses the whole walk, naming it, so nothing built on the walk (the version, a bundle, ``hub
push``, MCP's resources) can read or publish what lies outside. A link to a file inside is read as that
file; a link to a folder inside is not descended (its files are walked where they lie); a dangling link
is no file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from workbench.errors import ConfigError

#: Folders never part of an environment (caches, VCS and tool state).
SKIP_DIRS = frozenset({"__pycache__", ".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"})
_SKIP_SUFFIXES = frozenset({".pyc", ".pyo"})
#: The name a dependency lock takes among the hashed files.
LOCK_NAME = "requirements.lock"


class OutsideLinkError(ConfigError):
    """A file of an environment is a link to something outside its folder: it is never read."""


def env_file_paths(root: Path) -> list[tuple[str, Path]]:
    """(POSIX relative path, file) of every file of the environment at ``root``, in canonical order; the
    file is the resolved path, always inside ``root``. OutsideLinkError names links that leave it."""
    if root.is_file():
        return [(root.name, root.resolve())]
    base = root.resolve()
    found: list[tuple[tuple[str, ...], Path]] = []
    outside: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(base).parts
        keep = []
        for d in sorted(dirnames):
            p = here / d
            if d in SKIP_DIRS:
                continue
            if p.is_symlink():
                if not p.resolve().is_relative_to(base):
                    outside.append("/".join((*rel_dir, d)))
                continue
            keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            p = here / name
            rel = (*rel_dir, name)
            if p.suffix in _SKIP_SUFFIXES:
                continue
            real = p.resolve() if p.is_symlink() else p
            if p.is_symlink() and not real.is_relative_to(base):
                outside.append("/".join(rel))
            elif real.is_file():
                found.append((rel, real))
    if outside:
        outside.sort()
        more = f" (and {len(outside) - 3} more)" if len(outside) > 3 else ""
        raise OutsideLinkError(f"{', '.join(outside[:3])}{more} in {root} links outside the environment's folder; "
                               "refusing to read it: copy the file into the folder instead")
    found.sort(key=lambda x: x[0])
    return [("/".join(parts), f) for parts, f in found]


def read_env_files(root: Path) -> list[tuple[str, bytes]]:
    """(POSIX relative path, bytes) of every file of the environment at ``root``, in canonical order."""
    return [(rel, f.read_bytes()) for rel, f in env_file_paths(root)]


def content_hash(files: Iterable[tuple[str, bytes]], lock_text: str = "") -> str:
    """sha256 hex of the files in the given (canonical) order, then the lock when it is not empty."""
    h = hashlib.sha256()
    items = list(files) + ([(LOCK_NAME, lock_text.encode())] if lock_text else [])
    for rel, data in items:
        h.update(rel.encode())
        h.update(b"\x00")
        h.update(data)
        h.update(b"\x00")
    return h.hexdigest()


__all__ = ["LOCK_NAME", "SKIP_DIRS", "OutsideLinkError", "content_hash", "env_file_paths", "read_env_files"]
