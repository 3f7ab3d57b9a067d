"""The bulk half of the batch hand-off: rollout arrays in files, verified when read.

The batch log (``workbench_cloud.handoff``) carries small control records; the per-token arrays of
the rollouts it ships (token ids, logprobs, loss mask, teacher logprobs) travel in one
`safetensors <https://huggingface.co/docs/safetensors>`_ file per shipment in a :class:`BulkDir`
that both sides see: a directory next to the logs for ``workbench launch --backend local``, a
folder of the run's Modal Volume on Modal (the orchestrator commits after writing; the trainer
reloads the volume until a file it does not see yet appears).

A file holds four flat arrays, the branches of all its rollouts one after another: ``ids``
(int32), ``logprobs`` (float32), ``mask`` (uint8) and ``teacher`` (float32, only the branches that
have teacher logprobs). A rollout event names its file by a :data:`FileRef` (path relative to the
directory, byte size, sha256) and each branch by its offset and length. The reader refuses a path
that leaves the directory and a file whose size or checksum differs, each with one
:class:`HandoffError` line.

A file is named after the batch-log sequence numbers of its first and last rollout
(``000000000001-000000000032.safetensors``), so :meth:`BulkDir.release` removes every file whose
rollouts all lie at or below a cursor without reading the log.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from workbench.errors import WorkbenchError
from workbench.fsutil import atomic_write
from workbench.training.algorithms import Branch, TrainRollout

#: A file reference as it travels in a batch-log event: ``{"path": str, "bytes": int, "sha256": str}``.
FileRef = dict[str, Any]
#: How many tokens one shipment file holds at most: the bridge reads that many from the store at a time.
FILE_TOKENS = 4 * 1024 * 1024
SUFFIX = ".safetensors"
_NAME = re.compile(r"^(\d{12})-(\d{12})\.safetensors$")


class HandoffError(WorkbenchError):
    """A bulk file of the hand-off that cannot be trusted or found."""


def file_name(first_seq: int, last_seq: int) -> str:
    return f"{first_seq:012d}-{last_seq:012d}{SUFFIX}"


# -- rollouts <-> arrays -----------------------------------------------------------------------------------
def _array(code: str, values: Sequence[Any], dtype: type) -> np.ndarray:
    """A list as a numpy array through the ``array`` module (several times faster than ``np.asarray``)."""
    return np.frombuffer(array(code, values), dtype=dtype)


def pack(rollouts: Sequence[TrainRollout]) -> tuple[dict[str, np.ndarray], list[list[dict[str, Any]]]]:
    """The arrays of one shipment file, and for each rollout its branches' places in them
    (``at``/``n``, ``teacher_at`` when the branch has teacher logprobs, and ``version``)."""
    ids: list[np.ndarray] = []
    lps: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    teacher: list[np.ndarray] = []
    at = teacher_at = 0
    places: list[list[dict[str, Any]]] = []
    for r in rollouts:
        spots = []
        for b in r.branches:
            n = len(b.token_ids)
            if len(b.logprobs) != n or len(b.mask) != n:
                raise HandoffError(f"rollout {r.id}: a branch has {n} tokens but {len(b.logprobs)} logprobs "
                                   f"and {len(b.mask)} mask values")
            ids.append(_array("i", b.token_ids, np.int32))
            lps.append(_array("f", b.logprobs, np.float32))
            masks.append(np.frombuffer(bytes(b.mask), dtype=np.uint8))
            spot: dict[str, Any] = {"at": at, "n": n, "version": b.policy_version}
            if b.teacher_logprobs is not None:
                teacher.append(_array("f", b.teacher_logprobs, np.float32))
                spot["teacher_at"] = teacher_at
                teacher_at += len(b.teacher_logprobs)
            at += n
            spots.append(spot)
        places.append(spots)

    def flat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)

    return {"ids": flat(ids, np.int32), "logprobs": flat(lps, np.float32), "mask": flat(masks, np.uint8),
            "teacher": flat(teacher, np.float32)}, places


def unpack_branches(arrays: dict[str, np.ndarray], spots: list[dict[str, Any]]) -> list[Branch]:
    """A rollout's branches back from its file's arrays (``spots`` as :func:`pack` gave them)."""
    out = []
    for s in spots:
        at, n = int(s["at"]), int(s["n"])
        end = at + n
        if at < 0 or end > len(arrays["ids"]):
            raise HandoffError(f"a branch at {at}+{n} lies outside its bulk file of {len(arrays['ids'])} tokens")
        teacher = None
        if "teacher_at" in s:
            t = int(s["teacher_at"])
            teacher = arrays["teacher"][t:t + n].tolist()
        out.append(Branch(arrays["ids"][at:end].tolist(), arrays["logprobs"][at:end].tolist(),
                          arrays["mask"][at:end].tolist(), s.get("version"), teacher))
    return out


# -- the directory ----------------------------------------------------------------------------------------
class BulkDir:
    """Shipment files under ``root``. ``commit`` (the writer's) makes a written or removed file
    visible to the other side; ``reload`` (the reader's) fetches what the other side committed —
    a Modal Volume's ``commit``/``reload``; neither is needed when both sides share a disk."""

    def __init__(self, root: Path | str, *, commit: Callable[[], None] | None = None,
                 reload: Callable[[], None] | None = None, visible_wait_s: float = 300.0,
                 reload_interval_s: float = 1.0) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.commit, self.reload = commit, reload
        self.visible_wait_s, self.reload_interval_s = visible_wait_s, reload_interval_s
        self._cached: tuple[str, str, dict[str, np.ndarray]] | None = None  # the last file read: path, sha256

    @classmethod
    def modal(cls, root: str, volume: str) -> BulkDir:
        """A folder of the Modal Volume ``volume`` mounted at a path above ``root``."""
        import modal

        vol = modal.Volume.from_name(volume)
        return cls(root, commit=vol.commit, reload=vol.reload)

    def write(self, name: str, arrays: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> FileRef:
        """Write one shipment file (atomically, fsynced, then committed); its reference."""
        from safetensors.numpy import save

        data = save(arrays, metadata=metadata)
        atomic_write(self.root / name, data)
        if self.commit is not None:
            self.commit()
        return {"path": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    def resolve(self, rel: str) -> Path:
        """``rel`` under the directory; a path that leaves it is refused."""
        root = self.root.resolve()
        if not isinstance(rel, str) or not rel or os.path.isabs(rel) or "\x00" in rel:
            raise HandoffError(f"hand-off: bulk path {rel!r} is not a relative path inside {root}")
        path = (root / rel).resolve()
        if not path.is_relative_to(root) or path == root:
            raise HandoffError(f"hand-off: bulk path {rel!r} leaves the bulk directory {root}")
        return path

    def read(self, ref: FileRef) -> dict[str, np.ndarray]:
        """The arrays of the file ``ref`` names, after checking its size and sha256 (the last file
        read is kept, so the rollouts of one file cost one read)."""
        from safetensors.numpy import load

        rel = ref.get("path") if isinstance(ref, dict) else None
        path = self.resolve(rel)  # type: ignore[arg-type]
        try:
            size, digest = int(ref["bytes"]), str(ref["sha256"])
        except (KeyError, TypeError, ValueError):
            raise HandoffError(f"hand-off: bulk reference {ref!r} lacks its byte size or sha256") from None
        if self._cached is not None and self._cached[:2] == (rel, digest):
            return self._cached[2]
        self._await(path, size)
        data = path.read_bytes()
        if len(data) != size:
            raise HandoffError(f"hand-off: bulk file {rel} has {len(data)} bytes, its event says {size}")
        if hashlib.sha256(data).hexdigest() != digest:
            raise HandoffError(f"hand-off: bulk file {rel} does not match its sha256 {digest[:16]}…")
        arrays = load(data)
        self._cached = (str(rel), digest, arrays)
        return arrays

    def _await(self, path: Path, size: int) -> None:
        """Reload until ``path`` is here at ``size`` bytes (a committed file the other side wrote)."""
        deadline = time.monotonic() + self.visible_wait_s
        while True:
            try:
                if path.stat().st_size == size:
                    return
            except FileNotFoundError:
                pass
            if self.reload is None or time.monotonic() >= deadline:
                break
            try:
                self.reload()
            except Exception:  # a reload conflict (an open file): the next tick retries
                pass
            else:
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_size == size:
                        return
            time.sleep(self.reload_interval_s)
        if not path.exists():
            raise HandoffError(f"hand-off: bulk file {path.name} is not in {self.root} (removed, or never "
                               "committed by the orchestrator)")

    def files(self) -> list[tuple[int, int, Path]]:
        """(first seq, last seq, path) of every shipment file, in order."""
        out = []
        for p in self.root.iterdir():
            if m := _NAME.match(p.name):
                out.append((int(m.group(1)), int(m.group(2)), p))
        return sorted(out)

    def release(self, upto: int | None = None) -> int:
        """Remove the files whose rollouts all lie at or below sequence number ``upto`` (every
        file when None); how many went."""
        gone = 0
        for _first, last, path in self.files():
            if upto is None or last <= upto:
                path.unlink(missing_ok=True)
                gone += 1
        if self._cached is not None and not (self.root / self._cached[0]).exists():
            self._cached = None
        if gone and self.commit is not None:
            self.commit()
        return gone

    def size_bytes(self) -> int:
        return sum(p.stat().st_size for _f, _l, p in self.files())


__all__ = ["FILE_TOKENS", "BulkDir", "FileRef", "HandoffError", "file_name", "pack", "unpack_branches"]
