"""An environment's files and its content hash: one walk, one hash, for its version and its bundle.

The files are every file under the environment's package directory (or the single file), minus caches
and tool folders, in canonical order (by path components); the hash is sha256 over each file's POSIX
relative path and bytes, then the dependency lock when there is one. ``discovery.env_version`` is the
first 12 hex digits of the hash without a lock; a bundle's hash includes its lock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

#: Folders never part of an environment (caches, VCS and tool state).
SKIP_DIRS = frozenset({"__pycache__", ".git", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"})
_SKIP_SUFFIXES = frozenset({".pyc", ".pyo"})
#: The name a dependency lock takes among the hashed files.
LOCK_NAME = "requirements.lock"


def env_file_paths(root: Path) -> list[tuple[str, Path]]:
    """(POSIX relative path, file) of every file of the environment at ``root``, in canonical order."""
    if root.is_file():
        return [(root.name, root)]
    found = []
    for f in root.rglob("*"):
        rel = f.relative_to(root)
        if f.is_file() and not any(p in SKIP_DIRS for p in rel.parts) and f.suffix not in _SKIP_SUFFIXES:
            found.append((rel.parts, f))
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


__all__ = ["LOCK_NAME", "SKIP_DIRS", "content_hash", "env_file_paths", "read_env_files"]
