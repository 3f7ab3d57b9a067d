"""The memory limit of a ``wb.Local()`` sandbox: a memory cgroup of its own, bounding resident memory.

Agent runtimes reserve far more address space than they use (Bun's and Node's heaps, WebAssembly
memories, a 2 GB ``ArrayBuffer`` touched lazily), so an address-space rlimit kills them at start. A
sandbox's processes instead share one memory cgroup whose limit is ``memory``: what they hold resident
(anonymous memory, ``/dev/shm``, page cache the kernel cannot reclaim) is bounded, reservations are not.
Past the limit the kernel's OOM killer takes a command of that sandbox (the exec agent marks commands
as first to go) and the command's result says so.

Where the cgroup comes from: a child of Workbench's own cgroup in the memory hierarchy, cgroup v2
(``memory.max``, when the parent delegates the memory controller) or v1 (``memory.limit_in_bytes``),
named ``workbench-PID-N``; a process enters it by writing its pid to ``cgroup.procs`` before it execs
the sandbox (:func:`enter_argv`). It is removed when its sandbox is; one left by a Workbench that was
killed is removed at the next start. Where none can be made (no memory controller, a cgroup v2
parent that keeps processes of its own, no permission), :func:`detect` says why and the pool falls back
to ``RLIMIT_DATA`` per process: the writable private memory a process maps (heap, ``malloc``'s arenas,
written anonymous mappings), which leaves reservations made without access (how V8 and JavaScriptCore
reserve) alone, but counts a lazily touched allocation whole and bounds each process rather than the
sandbox.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

_PREFIX = "workbench-"
_counter = itertools.count()


@dataclass(frozen=True, slots=True)
class Hierarchy:
    version: int  # 1 or 2
    parent: Path  # Workbench's own cgroup in the memory hierarchy


_found: dict[str, Hierarchy | str] = {}


def _own_cgroups() -> dict[str, str]:
    """Controller list -> path of this process's cgroup (``""`` is the v2 unified hierarchy)."""
    out = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            out[controllers] = path
    return out


def _mounts() -> list[tuple[str, str, str, str]]:
    """(fstype, mount root, mount point, super options) of each cgroup filesystem."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
                out.append((rfields[0], fields[3], fields[4].replace("\\040", " "), rfields[2]))
    return out


def _within(mount_root: str, path: str, point: str) -> Path | None:
    if path == mount_root or path.startswith(mount_root.rstrip("/") + "/") or mount_root == "/":
        rel = path[len(mount_root):] if mount_root != "/" else path
        return Path(point) / rel.lstrip("/")
    return None


def _candidates() -> list[tuple[int, Path]]:
    own = _own_cgroups()
    out: list[tuple[int, Path]] = []
    for fstype, root, point, opts in _mounts():
        if fstype == "cgroup2" and "" in own:
            d = _within(root, own[""], point)
            if d is not None and "memory" in _read(d / "cgroup.controllers").split():
                out.append((2, d))
        elif fstype == "cgroup" and "memory" in opts.split(","):
            path = next((p for c, p in own.items() if "memory" in c.split(",")), None)
            d = _within(root, path, point) if path is not None else None
            if d is not None:
                out.append((1, d))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def detect() -> Hierarchy | str:
    """Where this machine can make memory cgroups for sandboxes (once per process), or why it cannot."""
    if os.environ.get("WORKBENCH_SANDBOX_MEMORY") == "rlimit":  # tests and debugging
        return "WORKBENCH_SANDBOX_MEMORY=rlimit"
    if "" in _found:
        return _found[""]
    reasons = []
    result: Hierarchy | str = ""
    cands = _candidates()
    if not cands:
        reasons.append("no cgroup memory controller is mounted")
    for version, parent in sorted(cands, key=lambda c: -c[0]):
        probe = parent / f"{_PREFIX}{os.getpid()}-probe"
        try:
            if version == 2 and "memory" not in _read(parent / "cgroup.subtree_control").split():
                (parent / "cgroup.subtree_control").write_text("+memory")
            probe.mkdir()
        except OSError as e:
            reasons.append(f"cgroup v{version} at {parent}: {e.strerror or e}")
            continue
        try:
            ok = (probe / ("memory.max" if version == 2 else "memory.limit_in_bytes")).exists()
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
        if ok:
            result = Hierarchy(version, parent)
            sweep(result)
            break
        reasons.append(f"cgroup v{version} at {parent} does not give its children the memory controller")
    _found[""] = result or "; ".join(reasons)
    return _found[""]


def sweep(h: Hierarchy) -> None:
    """Remove the cgroups a Workbench process that no longer runs left behind."""
    with contextlib.suppress(OSError):
        for d in h.parent.iterdir():
            if not d.name.startswith(_PREFIX) or not d.is_dir():
                continue
            pid = d.name[len(_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    d.rmdir()


class MemoryGroup:
    """One sandbox's memory cgroup."""

    def __init__(self, h: Hierarchy, limit_bytes: int) -> None:
        self.h = h
        self.limit_bytes = limit_bytes
        self.path = h.parent / f"{_PREFIX}{os.getpid()}-{next(_counter)}"
        self.path.mkdir()
        try:
            if h.version == 2:
                (self.path / "memory.max").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # no swap past the limit either
                    (self.path / "memory.swap.max").write_text("0")
            else:
                (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
                with contextlib.suppress(OSError):  # absent where swap is not accounted
                    (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
        except OSError:
            self.remove()
            raise

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def oom_kills(self) -> int | None:
        """How many processes the OOM killer has taken in this cgroup so far (None: not counted here)."""
        text = _read(self.path / ("memory.events" if self.h.version == 2 else "memory.oom_control"))
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return None

    def remove(self, wait: float = 2.0) -> bool:
        """Remove the cgroup once its processes are gone (a killed namespace's take a moment to exit)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() >= deadline:
                    return False  # the next start's sweep removes it
                time.sleep(0.02)


def enter_argv(group: MemoryGroup) -> list[str]:
    """A prefix that puts the command in ``group`` before it runs (the shell writes its own pid, then
    execs the command), so no ``preexec_fn`` is needed."""
    return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', group.procs]


def killed_line(limit_bytes: int) -> str:
    return (f"workbench: killed: the sandbox's processes used more than its memory limit of {limit_bytes >> 20} MB "
            "(resident memory); raise wb.Local(memory=...)")
