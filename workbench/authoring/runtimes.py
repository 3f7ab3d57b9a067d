"""Runtimes: where an environment's tools and programs execute (DESIGN.md "Runtime").

A runtime is a declaration (``wb.Local()``, ``wb.Docker(...)``, ``wb.ModalSandbox(...)``, or a
third party's :class:`Runtime` subclass). The limits every runtime shares are declared once, on
:class:`Runtime`, keyword-only. Opening a pool for a run finds the implementation in the registry
(``workbench.sandbox_pools``, by the runtime's ``kind``), so the domain never imports it; and
``--runtime NAME[:ARG]`` finds the declaration by name (``workbench.runtimes``).

A third-party runtime is a ``Runtime`` subclass registered under ``workbench.runtimes``; it either
overrides :meth:`Runtime.pool` or registers its pool class under ``workbench.sandbox_pools`` with the
same name as its ``kind``. A pool class is called as ``Pool(runtime, run_id=..., size=..., env_dir=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeGuard

from workbench import plugins
from workbench.authoring.sandbox import (
    Limits,
    NetworkPolicy,
    Sandbox,
    SandboxError,
    SandboxPool,
    network_policy,
    parse_memory,
)
from workbench.errors import ConfigError, OptionError

if TYPE_CHECKING:
    from workbench.records.task import Task

#: Fields that describe *which* sandbox, not how much it may use: never carried by ``--runtime``.
RUNTIME = "EvalOptions.runtime"  # the field ``--runtime`` fills
_NOT_CARRIED = frozenset({"image", "dockerfile", "isolation", "binds"})


@dataclass(slots=True)
class Runtime:
    """What every runtime declares: the per-sandbox limits (keyword-only) and the pool constructor.

    ``timeout`` is the default wall time of one ``exec``; ``cpu_seconds`` the CPU time of any one
    process; ``memory`` the resident memory of all of a sandbox's processes together (Local: a memory
    cgroup of its own, or per process where the machine gives none; Docker: the container's), in MB or
    as ``"512m"``/``"2g"`` (address space a program reserves and does not touch is not counted);
    ``pids`` processes and threads; ``file_size_mb`` the largest file written; ``output_bytes`` per stream
    of one exec; ``cpus`` cores (Docker); ``network`` (see :func:`network_policy`); ``pool_size`` caps the
    warm pool (default: the run's concurrency and a quarter more).
    """

    kind: ClassVar[str] = ""
    _: KW_ONLY
    network: NetworkPolicy = False
    timeout: float = 60.0
    cpu_seconds: int = 300
    memory: int | str = "1g"
    pids: int = 256
    file_size_mb: int = 256
    output_bytes: int = 1 << 20
    cpus: float = 1.0
    pool_size: int | None = None

    def __post_init__(self) -> None:
        self.limits()  # validates
        network_policy(self.network)
        if self.pool_size is not None and (not isinstance(self.pool_size, int) or self.pool_size < 0):
            raise ConfigError(f"pool_size={self.pool_size!r} must be a whole number >= 0")

    def limits(self) -> Limits:
        return Limits(timeout=self.timeout, cpu_seconds=self.cpu_seconds, memory_mb=parse_memory(self.memory),
                      pids=self.pids, file_size_mb=self.file_size_mb, output_bytes=self.output_bytes,
                      cpus=self.cpus)

    def pool(self, *, run_id: str = "", size: int = 4, env_dir: str | Path | None = None) -> SandboxPool:
        """The run's pool of sandboxes: the ``workbench.sandbox_pools`` plugin named like ``kind``."""
        if not plugins.available("sandbox_pools", self.kind):
            raise SandboxError(f"no sandbox pool for the {self.kind!r} runtime is installed here; "
                               f"installed: {', '.join(plugins.names('sandbox_pools')) or 'none'}")
        pool_cls = plugins.load("sandbox_pools", self.kind, is_pool_class)
        return pool_cls(self, run_id=run_id, size=self.warm_size(size), env_dir=env_dir)

    def confinement(self, *, read_only: Sequence[str | Path], writable: Sequence[str | Path],
                    tmp: str | Path | None = None) -> list[str]:
        """The command-line prefix that runs one command, which another program starts, confined as this
        runtime confines its own (its pool class's ``confinement``; the caller adds ``--chdir DIR -- ARGV``),
        or [] where the runtime asks for no isolation. ``tmp`` names the host folder that is its ``/tmp``
        (else an empty one). A runtime that cannot confine such a command is refused in one line."""
        found = plugins.load("sandbox_pools", self.kind, is_pool_class) \
            if plugins.available("sandbox_pools", self.kind) else None
        confine = getattr(found, "confinement", None)
        if confine is None:
            raise SandboxError(f"the {self.kind!r} runtime cannot confine a program another framework starts; "
                               "use wb.Local()")
        return list(confine(self, read_only=read_only, writable=writable, tmp=tmp))

    def warm_size(self, concurrency: int) -> int:
        """How many sandboxes to keep warm for ``concurrency`` rollouts at once: a quarter more (at least one),
        so a rollout that starts while another's sandbox is still being reset finds one ready instead of
        waiting for the reset. ``pool_size`` (when set) is the exact cap."""
        if self.pool_size is not None:
            return min(concurrency, self.pool_size)
        return concurrency + max(1, concurrency // 4) if concurrency > 0 else 0

    def sandbox(self, task: Task | None = None, **kw: Any) -> _OneSandbox:
        """``async with wb.Local().sandbox() as sb:`` — one sandbox outside a run (tests, debugging)."""
        return _OneSandbox(self, task, kw)

    @property
    def spec(self) -> str:
        """How ``--runtime`` names this runtime."""
        return self.kind


class _OneSandbox:
    def __init__(self, runtime: Runtime, task: Task | None, kw: dict[str, Any]) -> None:
        self.runtime, self.task, self.kw = runtime, task, kw
        self._pool: SandboxPool | None = None

    async def __aenter__(self) -> Sandbox:
        self._pool = self.runtime.pool(size=0, **self.kw)
        await self._pool.start()
        try:
            return await self._pool.acquire("one", self.task)
        except BaseException:
            await self._pool.close()
            raise

    async def __aexit__(self, *exc: object) -> None:
        if self._pool is not None:
            await self._pool.close()


def _check_warm(w: Any) -> None:
    if isinstance(w, bool):
        return
    if isinstance(w, str) or not isinstance(w, Sequence) or not all(
            isinstance(m, str) and m and all(p.isidentifier() for p in m.split(".")) for m in w):
        raise ConfigError(f"warm_python={w!r}: use True, False or a list of module names to import up front")


@dataclass(slots=True)
class Local(Runtime):
    """Tools and programs run as local processes, isolated with bubblewrap.

    No network (by default), a read-only view of the system directories only (``/usr``, the libraries,
    a few files of ``/etc``: never ``$HOME``, ``/tmp`` or the project), a private ``/tmp``, its own
    workdir at ``/work``, a clean environment, rlimits on CPU time, processes and file size, and a memory
    cgroup of its own bounding what its processes hold resident (where none can be made: ``RLIMIT_DATA``
    per process, said once).
    Where bubblewrap or user namespaces are missing, opening a pool refuses with one line saying how to
    install it (model-written commands never run unisolated by default); ``isolation="none"`` opts in
    to plain processes with the same rlimits and a clean environment (they can read your files).
    ``"auto"`` and ``"bwrap"`` both mean: isolate or refuse. ``binds`` adds host paths, read-only: ``"/data"``
    at the same path, ``"/host/path:/path/inside"`` elsewhere.
    ``exec_agent``: commands are forked by one agent process per sandbox (much cheaper than a bubblewrap
    sandbox per command), which is reset between rollouts; ``False`` starts a bubblewrap sandbox for every
    command instead.
    ``warm_python``: ``python3`` commands are forked from a warm interpreter that has already imported
    ``unittest`` (``True``) or the listed modules, instead of starting one each (~50 ms of CPU saved per
    command); only commands that behave the same run that way (see ``local_runtime/sandbox/warm.py``).
    """

    kind: ClassVar[str] = "local"
    isolation: str = "auto"
    binds: Sequence[str] = ()
    _: KW_ONLY
    exec_agent: bool = True
    warm_python: bool | Sequence[str] = False

    def __post_init__(self) -> None:
        _check_warm(self.warm_python)
        if self.isolation not in ("auto", "bwrap", "none"):
            raise ConfigError(f"Local(isolation={self.isolation!r}): use 'bwrap' (the default, 'auto' means the "
                              "same) or 'none'")
        Runtime.__post_init__(self)
        if isinstance(network_policy(self.network), tuple):
            raise ConfigError("Local(network=[...]): network allow lists need the Docker runtime "
                              "(wb.Docker(network=[...]) or --runtime docker); use False or True here")


@dataclass(slots=True)
class Docker(Runtime):
    """Tools and programs run in Docker containers (the docker SDK; a local engine).

    ``image``: a local image name (default: ``workbench-sandbox:2``, built offline by ``workbench sandbox
    image``); or ``dockerfile``: a Dockerfile (relative paths are relative to the environment's folder)
    built locally with no pull (``FROM workbench-sandbox:2`` works offline). Every container is labelled
    with the run id (and renamed after the rollout it serves); commands run as an unprivileged user with no
    capabilities (the container keeps only SETUID and SETGID, for its exec agent), a read-only root, no
    network by default and the given limits.
    ``exec_agent``: commands are forked by one agent process per container (root, with only the right to
    switch to the sandbox user) instead of one ``docker exec`` each; ``False``, or an image without
    ``python3``, uses ``docker exec`` per command. ``warm_python``: as for :class:`Local`. ``binds`` adds
    host paths, read-only, as for :class:`Local` (the default image's Python is this machine's, at the same
    path, so a host virtual environment bound in runs there: sandboxed MCP servers use this).
    ``as_image``: containers run as their image declares them, for images made to be changed (a Harbor
    task's): a writable root, commands as the image's user (root unless its ``USER`` says otherwise) in its
    ``WORKDIR`` with its environment, Docker's default capabilities less ``NET_RAW`` and ``MKNOD``
    (``no-new-privileges`` kept), one ``docker exec`` per command; a container serves one rollout and is
    removed after it (a writable root cannot be wiped), ``/work`` is still bound in for the file methods.
    ``build_timeout``: seconds the ``dockerfile``'s build may take (None: no limit but the engine's silence of
    an hour). ``storage_mb``: the most a container may write to its own root; only storage drivers that can
    limit it take it (overlay2 on xfs with project quotas, btrfs, zfs), and the pool refuses it on others.
    """

    kind: ClassVar[str] = "docker"
    image: str | None = None
    dockerfile: str | Path | None = None
    binds: Sequence[str] = ()
    _: KW_ONLY
    exec_agent: bool = True
    warm_python: bool | Sequence[str] = False
    as_image: bool = False
    build_timeout: float | None = None
    storage_mb: int | None = None

    def __post_init__(self) -> None:
        _check_warm(self.warm_python)
        for name in ("build_timeout", "storage_mb"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not v > 0):
                raise ConfigError(f"wb.Docker({name}={v!r}) must be a positive number")
        if self.image is not None and self.dockerfile is not None:
            raise ConfigError("wb.Docker takes image=... or dockerfile=..., not both")
        Runtime.__post_init__(self)

    @property
    def spec(self) -> str:
        return f"docker:{self.image}" if self.image else "docker"


@dataclass(slots=True)
class ModalSandbox(Runtime):
    """Modal sandboxes: declared here so an environment can name them; they run only in the cloud
    (``workbench launch --backend modal``). Locally, swap with ``--runtime local`` or ``--runtime docker``."""

    kind: ClassVar[str] = "modal"
    image: str | None = None

    def pool(self, *, run_id: str = "", size: int = 4, env_dir: str | Path | None = None) -> SandboxPool:
        if plugins.available("sandbox_pools", self.kind):
            return Runtime.pool(self, run_id=run_id, size=size, env_dir=env_dir)
        raise SandboxError("wb.ModalSandbox runs only in the cloud; on this machine use --runtime local or "
                           "--runtime docker")


class PoolClass(Protocol):
    """What a ``workbench.sandbox_pools`` plugin names: a :class:`SandboxPool` subclass made this way."""

    def __call__(self, runtime: Runtime, *, run_id: str, size: int, env_dir: str | Path | None) -> SandboxPool: ...


def is_pool_class(found: object) -> TypeGuard[PoolClass]:
    return isinstance(found, type) and issubclass(found, SandboxPool)


def runtime_names() -> list[str]:
    """The runtimes ``--runtime`` can name: every ``workbench.runtimes`` plugin."""
    return plugins.names("runtimes")


def runtime_class(name: str) -> type[Runtime]:
    cls = plugins.load("runtimes", name)
    if not (isinstance(cls, type) and issubclass(cls, Runtime)):
        raise ConfigError(f"the runtime plugin {name!r} is a {type(cls).__name__}, not a wb.Runtime subclass")
    return cls


def swap_runtime(spec: str, current: Runtime | None = None) -> Runtime:
    """``--runtime NAME[:ARG]``: a new runtime that keeps the current one's limits. ``ARG`` is the image
    for runtimes that take one (``docker:python:3.12``)."""
    kind, _, arg = spec.partition(":")
    if not plugins.available("runtimes", kind):
        raise OptionError(RUNTIME, spec, f"one of {', '.join(runtime_names())}", "unknown {field} {value!r}; use "
                          "{allowed} (docker takes an image: docker:IMAGE)")
    cls = runtime_class(kind)
    names = {f.name for f in fields(cls)}
    if arg and "image" not in names:
        raise OptionError(RUNTIME, spec, template="{field} {value!r}: {kind} takes no argument", kind=kind)
    if isinstance(current, cls) and not arg and kind == "docker":
        return current  # the env's own image or Dockerfile
    carried: dict[str, Any] = {}
    if isinstance(current, Runtime):
        for f in fields(current):
            if f.name in names and f.name not in _NOT_CARRIED:
                carried[f.name] = getattr(current, f.name)
        if isinstance(network_policy(carried.get("network", False)), tuple) and kind == "local":
            carried["network"] = False  # allow lists are Docker-only; no network is the safe reading
    if arg:
        carried["image"] = arg
    try:
        return cls(**carried)
    except TypeError as e:
        raise OptionError(RUNTIME, spec, template="{field} {value!r}: {why}", why=e) from None
