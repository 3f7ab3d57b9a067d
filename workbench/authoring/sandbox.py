"""Sandboxes: the mini world where tools, programs and rewards act (DESIGN.md "Runtime", "Sandbox").

A *runtime* (``wb.Local()``, ``wb.Docker(...)``, ``wb.ModalSandbox(...)``, see ``runtimes``) is a
declaration in the environment; it opens a :class:`SandboxPool` for a run, and the engine acquires one
:class:`Sandbox` per rollout from it. Tools and reward functions receive that sandbox by declaring a ``sandbox``
parameter::

    async def run(cmd: str, sandbox: wb.Sandbox) -> str:
        r = await sandbox.exec(cmd, timeout=30)
        return r.output()

This module is the interface; the pools are plugins (``workbench.sandbox_pools``), found by the runtime's
kind when a pool opens: the bundled ones are ``workbench_local.sandbox.process_pool`` (bubblewrap + rlimits)
and ``workbench_local.sandbox.docker_pool`` (the docker SDK).
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError, WorkbenchError

if TYPE_CHECKING:
    from workbench.records.task import Task

#: Where the rollout's working directory appears inside an isolated sandbox.
WORKDIR = "/work"
#: The image ``workbench sandbox image`` builds locally (no registry) and ``wb.Docker()`` uses by default.
DEFAULT_IMAGE = "workbench-sandbox:2"
#: Where every sandbox of a pool sees the pool's bridge folder (read-only): the host end puts there what a
#: program inside may reach, such as the interception proxy's socket (see ``Program``).
BRIDGE_DIR = "/run/workbench"
#: Keys a task's ``sandbox`` needs may hold.
TASK_SANDBOX_KEYS = frozenset({"files", "dir", "setup", "setup_timeout"})


class SandboxError(WorkbenchError):
    """A sandbox cannot be created or used (engine not running, image missing, bad task needs)."""


class SandboxPathError(PermissionError):
    """A file path leaves the sandbox's working directory (``..``, an absolute path or a symlink)."""


@dataclass(slots=True)
class ExecResult:
    """What one command in a sandbox did. Output is decoded as UTF-8 (invalid bytes replaced)."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False  # stdout or stderr passed the output limit; the rest was dropped
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def output(self, limit: int = 8000) -> str:
        """A compact text for a model: exit status, then stdout and stderr (each cut to ``limit`` chars)."""
        head = f"exit code {self.exit_code}" + (" (timed out)" if self.timed_out else "") + (
            " (output truncated)" if self.truncated else "")
        parts = [head]
        for name, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            if text:
                cut = text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]
                parts.append(f"--- {name}\n{cut.rstrip()}")
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-sandbox limits. ``timeout`` is the default wall time of one ``exec``."""

    timeout: float = 60.0
    cpu_seconds: int = 300  # CPU time of any one process (RLIMIT_CPU); Docker also caps cores with ``cpus``
    memory_mb: int = 1024  # resident memory of the sandbox (Local: its memory cgroup) / the container (Docker)
    pids: int = 256  # processes and threads
    file_size_mb: int = 256  # the largest file a process may write
    output_bytes: int = 1 << 20  # per stream of one exec; the rest is dropped and ``truncated`` set
    cpus: float = 1.0  # Docker only: cores

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"sandbox limit {f.name}={v!r} must be a positive number")


#: ``network``: ``False``/``"none"`` (default: no interface but the sandbox's own loopback),
#: ``True``/``"host"`` (unrestricted), or an allow list of ``"host:port"`` / ``"ip"`` / ``"cidr"``
#: entries (Docker only; enforced with iptables on the sandbox's own bridge network).
NetworkPolicy = bool | str | Sequence[str]


def network_policy(value: NetworkPolicy) -> str | tuple[str, ...]:
    """Normalise a ``network=`` value to ``"none"``, ``"host"`` or a tuple of allow-list entries."""
    if value is False or value is None or value in ("none", "off", "loopback"):
        return "none"
    if value is True or value in ("host", "on", "all"):
        return "host"
    if isinstance(value, str):
        value = [v for v in re.split(r"[,\s]+", value) if v]
    if isinstance(value, Sequence) and value and all(isinstance(v, str) and v for v in value):
        return tuple(value)
    raise ConfigError(f"network={value!r}: use False (no network), True (unrestricted) or a list of 'host:port'")


def parse_memory(value: int | float | str) -> int:
    """``512`` (MB), ``"512m"``, ``"2g"`` -> megabytes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(value).lower())
    if not m:
        raise ConfigError(f"memory={value!r}: use megabytes (512) or a size like '512m' or '2g'")
    n, unit = float(m.group(1)), m.group(2)
    return max(1, int(n * {"k": 1 / 1024, "": 1, "m": 1, "g": 1024, "t": 1024 * 1024}[unit]))


class Sandbox(ABC):
    """One rollout's sandbox. Paths given to the file methods are relative to :attr:`workdir`
    (absolute paths must lie inside it); no path may leave it, through ``..`` or a symlink."""

    #: the runtime kind ("local", "docker")
    kind: str = ""
    #: the working directory as commands inside the sandbox see it
    workdir: str = WORKDIR
    #: False when the runtime could not isolate it (Local without bubblewrap): host files are reachable
    isolated: bool = True
    limits: Limits = Limits()
    id: str = ""
    #: where commands in this sandbox see the pool's bridge folder (None: the runtime has none)
    bridge_path: str | None = None

    @abstractmethod
    async def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: str | bytes | None = None,
                   user: str | None = None) -> ExecResult:
        """Run ``cmd`` (a shell string for ``/bin/sh -c``, or an argv list) in the workdir (or ``cwd``) with a
        clean environment plus ``env``. On timeout the whole process tree is killed and the output so far is
        kept (``timed_out=True``, ``exit_code`` 124); a command killed by signal N exits 128+N. Each of stdout
        and stderr keeps at most ``limits.output_bytes`` (the rest is dropped, ``truncated=True``).
        ``user``: who runs it (a name or uid, optionally ``:group``, as ``docker exec --user`` takes it)
        instead of the sandbox's own user; a runtime that cannot switch users refuses with a
        :class:`SandboxError` of one line."""

    @abstractmethod
    async def read_file(self, path: str, *, binary: bool = False) -> str | bytes:
        """The contents of a file in the workdir (``str`` decoded as UTF-8 unless ``binary``)."""

    @abstractmethod
    async def write_file(self, path: str, content: str | bytes) -> None:
        """Create or replace a file in the workdir (parent directories are created)."""

    @abstractmethod
    async def upload(self, src: str | Path, dest: str = ".") -> None:
        """Copy a host file or directory tree into the workdir at ``dest``."""

    @abstractmethod
    async def download(self, src: str, dest: str | Path) -> None:
        """Copy a file or directory of the workdir to the host path ``dest``."""

    @abstractmethod
    async def close(self) -> None:
        """Give the sandbox back: its processes are killed and its files are gone."""

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.kind}{'' if self.isolated else ' (not isolated)'}>"


@dataclass(slots=True)
class PoolStats:
    acquired: int = 0
    created: int = 0  # sandboxes started (warm-up and cold acquires)
    cold: int = 0  # acquires that found no warm sandbox
    sandbox_seconds: float = 0.0  # acquire -> release, summed
    acquire_s: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))  # the latest acquire latencies


class SandboxPool(ABC):
    """Sandboxes for one run. ``acquire`` takes a warm one (or starts one), seeds its workdir from the
    task and returns it; ``release`` resets it in the background and keeps it warm for the next rollout."""

    kind: str = ""
    stats: PoolStats
    held: set[Any]  # sandboxes handed out and not yet released
    #: A host folder every sandbox of the pool sees at :data:`BRIDGE_DIR`, read-only (None: the runtime
    #: has none, and programs that need the proxy cannot run in it).
    bridge_dir: Path | None = None

    def _handed_out(self, sb: Any, t0: float) -> None:
        """Account a sandbox that ``acquire`` (started at ``t0``) now hands to a rollout."""
        sb.held_since = time.perf_counter()
        self.stats.acquired += 1
        self.stats.acquire_s.append(sb.held_since - t0)

    def _taken_back(self, sb: Any) -> bool:
        """Take a released sandbox back and add its held time to the sandbox-seconds; False when the
        pool did not hand it out (a second release)."""
        if sb not in self.held:
            return False
        self.held.discard(sb)
        sb.closed = True
        if sb.held_since:
            self.stats.sandbox_seconds += time.perf_counter() - sb.held_since
            sb.held_since = 0.0
        return True

    @abstractmethod
    async def start(self) -> SandboxPool:
        """Check the runtime works (one clear :class:`SandboxError` when not) and begin warming up."""

    async def prepare(self, tasks: Sequence[Task]) -> None:
        """Make ready what ``tasks`` need before a run over them is recorded (a pool of per-task images builds
        them here, so one that cannot be built stops the run before it starts); nothing by default."""
        return None

    @abstractmethod
    async def acquire(self, rollout_id: str = "", task: Task | None = None) -> Sandbox: ...

    @abstractmethod
    async def release(self, sandbox: Sandbox) -> None: ...

    @abstractmethod
    async def close(self) -> None:
        """Remove every sandbox of the pool (idle or still held)."""

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def check_task_needs(task: Task) -> dict[str, Any]:
    """A task's sandbox needs, validated: ``files`` {path: text|bytes}, ``dir`` (a host folder copied in),
    ``setup`` (a shell command run after seeding), ``setup_timeout`` (seconds)."""
    needs = task.sandbox or {}
    if not isinstance(needs, Mapping):
        raise SandboxError(f"task {task.id}: sandbox needs must be a dict, not {type(needs).__name__}")
    unknown = set(needs) - TASK_SANDBOX_KEYS
    if unknown:
        raise SandboxError(f"task {task.id}: unknown sandbox needs {sorted(unknown)}; use {sorted(TASK_SANDBOX_KEYS)}")
    files = needs.get("files") or {}
    if not isinstance(files, Mapping) or not all(isinstance(v, str | bytes) for v in files.values()):
        raise SandboxError(f"task {task.id}: sandbox files must map paths to str or bytes")
    return dict(needs)
