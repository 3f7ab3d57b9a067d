"""``wb.Local()``: sandboxes as local processes, isolated with bubblewrap where it is available.

A sandbox is a ``bwrap`` namespace (``bwrap.py``): new user, pid, network, ipc, uts and cgroup
namespaces; a root made of read-only system folders (``/usr`` and the library links, a few files of
``/etc``) plus the sandbox's own ``/work`` and ``/tmp`` (host folders, bind-mounted); a clean environment;
rlimits on CPU time, file size and (inside the user namespace, so per sandbox) processes; a memory cgroup
of its own bounding the resident memory of all its processes (``cgroup.py``; where the machine gives
none, ``RLIMIT_DATA`` per process, said once). Everything in it dies with the pid namespace when
Workbench dies.

When the host process is root, sandboxes run as a per-slot unprivileged uid (root-owned host files
stay unreadable and the process limit is exact). Where bubblewrap or user namespaces are missing
(macOS, locked-down kernels), opening a pool refuses with one line; ``isolation="none"`` opts in to plain
subprocesses in the workdir with the same rlimits and a clean environment.

With bubblewrap and user namespaces, commands go through an exec agent (``agent.py``): one
long-lived ``bwrap`` per sandbox runs the agent as the namespace's init, and the agent forks each
command with the limits, so an ``exec`` costs a fork instead of a namespace, ~30 mounts and three
helper execs. It starts with the warm pool (or at a cold sandbox's first command). When a rollout
releases the sandbox the agent kills every other process in the namespace and clears ``/dev/shm``
and System V IPC, the host wipes ``/work`` and ``/tmp``, and the agent serves the next rollout; an
agent that cannot prove itself clean (a process left, its limits or priority changed by a command)
is killed with its namespace and a fresh one started. ``Local(exec_agent=False)``, or a host
``python3`` the sandbox cannot see, keeps one ``bwrap`` (one namespace) per command, killed whole on
timeout and cancellation.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench_local.sandbox.bwrap import (
    ROOT_UID_BASE,
    SANDBOX_UID,
    Isolation,
    detect,
    reachable_by_others,
    sandbox_python,
)
from workbench_local.sandbox.cgroup import Hierarchy, MemoryGroup
from workbench_local.sandbox.cgroup import detect as detect_cgroup
from workbench_local.sandbox.channel import agent_code, warm_config
from workbench_local.sandbox.confine import confinement
from workbench_local.sandbox.fs import (
    parse_bind,
    pool_dir,
    rmtree,
    seed,
    warn_once,
)
from workbench_local.sandbox.process_sandbox import ProcessSandbox

from workbench.authoring.runtimes import Local
from workbench.authoring.sandbox import (
    PoolStats,
    Sandbox,
    SandboxError,
    SandboxPool,
    check_task_needs,
    network_policy,
)
from workbench.records.task import Task


# -- the pool --------------------------------------------------------------------------------------
class ProcessPool(SandboxPool):
    kind = "local"

    def __init__(self, runtime: Local, *, run_id: str = "", size: int = 4, env_dir: str | Path | None = None) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.size = max(0, size)
        self.limits = runtime.limits()
        self.network = network_policy(runtime.network)
        assert isinstance(self.network, str)
        self.binds = tuple(parse_bind(b) for b in runtime.binds)
        self.stats = PoolStats()
        self.idle: list[ProcessSandbox] = []
        self.held: set[ProcessSandbox] = set()
        self._resets: set[asyncio.Future[None]] = set()
        self._next = 0
        self.dir = Path()
        self.iso = Isolation("none", None, None)
        self.closed = False
        self.use_agent = runtime.exec_agent
        self.agent_python = ""
        self.agent_program: bytes | None = None
        self.agent_ok = False  # an agent has started in this pool (later failures are that sandbox's own)
        self.cgroups: Hierarchy | None = None

    @staticmethod
    def confinement(runtime: Local, *, read_only: Sequence[str | Path], writable: Sequence[str | Path],
                    tmp: str | Path | None = None) -> list[str]:
        """One command another program starts, confined as this runtime's sandboxes are (``confine.py``)."""
        return confinement(runtime, read_only=read_only, writable=writable, tmp=tmp)

    def per_sandbox_nproc(self, uid: int | None) -> bool:
        """Whether RLIMIT_NPROC counts one sandbox's processes only: inside its own user namespace, or
        under its own host uid (root)."""
        return self.iso.mode in ("userns", "setpriv") or uid is not None

    def agent_config(self, sb: ProcessSandbox) -> dict[str, Any]:
        """What the exec agent applies to every command: the limits ``prlimit`` would have set."""
        lim = self.limits
        mem, fsize, cpu = lim.memory_mb << 20, lim.file_size_mb << 20, int(lim.cpu_seconds)
        rlimits: dict[str, list[int]] = {"cpu": [cpu, cpu + 5], "fsize": [fsize, fsize], "core": [0, 0]}
        if sb.memory is None:
            rlimits["data"] = [mem, mem]
        if self.per_sandbox_nproc(sb.host_uid):
            rlimits["nproc"] = [lim.pids, lim.pids]
        return {"rlimits": rlimits, "user": None, "grace": 0.1, "warm": warm_config(self.runtime.warm_python)}

    def memory_group(self) -> MemoryGroup | None:
        """A new sandbox's memory cgroup, or None where memory is bounded per process (said once)."""
        if self.cgroups is None:
            return None
        try:
            return MemoryGroup(self.cgroups, self.limits.memory_mb << 20)
        except OSError as e:
            self._no_cgroup(f"{self.cgroups.parent}: {e.strerror or e}")
            return None

    def _no_cgroup(self, reason: str) -> None:
        warn_once("local-memory", f"wb.Local(): no memory cgroup can be made here ({reason}); memory is bounded "
                  "per process with RLIMIT_DATA (writable memory a process maps) instead of the sandbox's resident "
                  "memory: a program that allocates more than it touches may fail")

    def agent_unavailable(self, reason: str) -> None:
        if self.use_agent:
            self.use_agent = False
            warn_once("local-agent", f"wb.Local(): the exec agent does not start here ({reason}); every command "
                      "starts its own bubblewrap sandbox instead (slower, as isolated)")

    def slot_uid(self, slot: int) -> int | None:
        if os.geteuid() != 0:
            return None
        return ROOT_UID_BASE + (os.getpid() % 100_000) * 64 + slot % 64

    async def start(self) -> ProcessPool:
        iso = detect(self.runtime.isolation)
        if iso.mode == "none" and self.runtime.isolation != "none":
            raise SandboxError(f"wb.Local() cannot isolate commands on this machine ({iso.reason}); install "
                               "bubblewrap (apt-get install bubblewrap) and allow user namespaces, use --runtime "
                               "docker, or opt in to unisolated processes with wb.Local(isolation='none')")
        for src, _ in self.binds:
            if not os.path.exists(src):
                raise SandboxError(f"Local(binds=...): {src} does not exist")
        hidden = any(not reachable_by_others(src) for src, _ in self.binds)
        if hidden and iso.mode == "userns" and os.geteuid() == 0 and iso.setpriv:
            # bubblewrap would run as the slot's uid, which cannot reach these (root's 0700 home): it runs as
            # root in every namespace but the user's, and each command drops to the slot's uid inside.
            iso = replace(iso, mode="setpriv")
        self.iso = iso
        found = await asyncio.to_thread(detect_cgroup)
        if isinstance(found, Hierarchy):
            self.cgroups = found
        else:
            self._no_cgroup(found)
        if self.use_agent:
            self.agent_python = sandbox_python() if iso.mode == "userns" else ""
            self.use_agent = bool(self.agent_python)
            if self.use_agent:
                self.agent_program = await asyncio.to_thread(agent_code, self.agent_python) or None
        self.dir = pool_dir("local")
        etc = self.dir / "etc"
        etc.mkdir(mode=0o755)
        (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
                                    "sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n")
        self.bridge_dir = self.dir / "bridge"
        self.bridge_dir.mkdir(mode=0o755)
        for _ in range(self.size):
            self.idle.append(self._new(warm=True))
        return self

    def _new(self, warm: bool = False) -> ProcessSandbox:
        sb = ProcessSandbox(self, self._next)
        self._next += 1
        sb.create()
        self.stats.created += 1
        if warm and self.use_agent:
            sb.start_agent()
        return sb

    async def acquire(self, rollout_id: str = "", task: Task | None = None) -> ProcessSandbox:
        if self.closed:
            raise SandboxError("the sandbox pool is closed")
        t0 = time.perf_counter()
        needs = check_task_needs(task) if task is not None else {}
        if self.idle:
            sb = self.idle.pop()
        else:
            self.stats.cold += 1
            sb = self._new()
        sb.closed = False
        sb.rollout_id = rollout_id
        self.held.add(sb)
        try:
            await seed(sb, needs)
        except BaseException:
            await self.release(sb)
            raise
        self._handed_out(sb, t0)
        return sb

    async def release(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, ProcessSandbox)
        if not self._taken_back(sandbox):
            return
        if self.closed:
            dying = sandbox.kill_all()
            if dying is not None:
                await dying
            await asyncio.to_thread(sandbox.remove_memory_group)
            return
        self.track(self._recycle(sandbox))

    def track(self, coro: Any) -> asyncio.Future[None]:
        """Run ``coro`` in the background; :meth:`close` waits for it."""
        t = asyncio.ensure_future(coro)
        self._resets.add(t)
        t.add_done_callback(self._resets.discard)
        return t

    async def _recycle(self, sb: ProcessSandbox) -> None:
        """Make a released sandbox clean for the next rollout (or remove it when the pool has enough)."""
        dying = await sb.reset()
        keep = not self.closed and len(self.idle) < self.size
        if not keep:
            dying = sb.kill_all() or dying
        if dying is not None:  # the namespace is gone (its processes with it) once its bwrap has exited
            await dying
        await asyncio.to_thread(self._wipe, sb, keep)
        if keep and not self.closed:
            if self.use_agent and (sb.agent is None or not sb.agent.alive):
                sb.start_agent()  # the next rollout finds its agent running
            self.idle.append(sb)
        elif keep:
            sb.kill_all()

    @staticmethod
    def _wipe(sb: ProcessSandbox, keep: bool) -> None:
        if keep:
            sb.work.wipe(0o755)
            sb.tmp.wipe(0o755)
        else:
            rmtree(sb.work.path.parent)
            sb.remove_memory_group()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sb in [*self.held, *self.idle]:
            sb.kill_all()
            sb.closed = True
        while self._resets:  # recycles, and the reaping of every agent killed above
            await asyncio.gather(*self._resets, return_exceptions=True)
        def remove_memory_groups() -> None:
            for sb in [*self.held, *self.idle]:
                sb.remove_memory_group()

        await asyncio.to_thread(remove_memory_groups)
        self.idle.clear()
        self.held.clear()
        if self.dir != Path():
            await asyncio.to_thread(rmtree, self.dir)
