"""A lock on one run of a store, held by the process that runs it (an eval or its ``--resume``).

A second process that would run the same run at the same time refuses up front, in one line, instead
of racing the first one to insert the same rollouts. The lock is an ``flock`` on a small file in the
``<store>.locks/`` folder beside the store: the kernel releases it when the holder exits, however it
exits (kill -9 included), so a stale lock cannot exist. The holder removes the file when it is done;
a process that locked a file another had just removed tries again on the new one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from pathlib import Path

from workbench.errors import ConfigError


class RunLockedError(ConfigError):
    """Another process is running (or resuming) this run."""


def lock_path(store_path: Path, run_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return store_path.with_name(store_path.name + ".locks") / f"{safe}.lock"


@contextlib.contextmanager
def run_lock(store_path: Path, run_id: str) -> Iterator[None]:
    """Hold the lock on ``run_id`` for the block; :class:`RunLockedError` when another process holds it."""
    path = lock_path(store_path, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLockedError(f"run {run_id} is being run or resumed by process {holder} right now; wait for "
                                 "it to finish (or stop it), then resume") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the holder removed the file between our open and our lock: lock the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock


__all__ = ["RunLockedError", "lock_path", "run_lock"]
