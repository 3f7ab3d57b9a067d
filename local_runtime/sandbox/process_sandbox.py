"""One sandbox of a ``wb.Local()`` pool (``process_pool.py``): its ``/work`` and ``/tmp``, its commands
(through the exec agent when one runs, else one ``bwrap`` per command), its memory group, and what a
release or reset does to it. The pool makes, hands out, recycles and closes them."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from workbench_local.sandbox.bwrap import (
    Isolation,
    bwrap_argv,
    limits_preexec,
    prlimit_args,
)
from workbench_local.sandbox.cgroup import MemoryGroup, enter_argv, killed_line
from workbench_local.sandbox.channel import AgentChannel, AgentDied, agent_argv
from workbench_local.sandbox.fs import (
    PATH,
    HostDir,
    WorkdirFiles,
    base_env,
    exec_argv,
)
from workbench_local.sandbox.procs import Tail, communicate, killpg, pump, reaped

from workbench.authoring.sandbox import (
    BRIDGE_DIR,
    WORKDIR,
    ExecResult,
    Limits,
    Sandbox,
    SandboxError,
)


class SandboxHost(Protocol):
    """What a sandbox uses of the pool that made it (``process_pool.ProcessPool``): the pool's folder,
    isolation, limits, network and binds; the exec agent's program and state; uids, memory groups and
    the tracking of reaped processes."""

    dir: Path
    bridge_dir: Path | None
    iso: Isolation
    limits: Limits
    network: str | tuple[str, ...]
    binds: tuple[tuple[str, str], ...]
    use_agent: bool
    agent_ok: bool
    agent_python: str
    agent_program: bytes | None

    def slot_uid(self, slot: int) -> int | None: ...
    def per_sandbox_nproc(self, uid: int | None) -> bool: ...
    def memory_group(self) -> MemoryGroup | None: ...
    def agent_config(self, sb: ProcessSandbox) -> dict[str, Any]: ...
    def agent_unavailable(self, reason: str) -> None: ...
    def track(self, coro: Any) -> asyncio.Future[None]: ...


# -- the sandbox -----------------------------------------------------------------------------------
class ProcessSandbox(WorkdirFiles, Sandbox):
    kind = "local"

    def __init__(self, pool: SandboxHost, slot: int) -> None:
        self.pool = pool
        self.slot = slot
        self.id = f"local-{slot}"
        self.limits = pool.limits
        root = pool.dir / f"s{slot}"
        self.host_uid = pool.slot_uid(slot)
        self._own_names: set[str] | None = None
        owner = (self.host_uid, self.host_uid) if self.host_uid is not None else None
        iso = pool.iso.mode != "none"
        self.isolated = iso
        self.bridge_path = BRIDGE_DIR if iso else str(pool.bridge_dir)
        self.work = HostDir(root / "work", WORKDIR if iso else str(root / "work"), owner)
        self.tmp = HostDir(root / "tmp", "/tmp" if iso else str(root / "tmp"), owner)
        self.workdir = self.work.inner
        self.rollout_id = ""
        self.closed = False
        self.held_since = 0.0
        self._running: set[asyncio.subprocess.Process] = set()
        self.agent: AgentChannel | None = None
        self._agent_proc: asyncio.subprocess.Process | None = None
        self._agent_start: asyncio.Future[AgentChannel] | None = None
        self._agent_stderr: asyncio.Future[None] | None = None
        self.memory: MemoryGroup | None = None  # None: memory is bounded per process (RLIMIT_DATA)

    def create(self) -> None:
        self.work.path.parent.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.work.path.parent, 0o711)
        self.work.create(0o755)
        self.tmp.create(0o755)
        self.memory = self.pool.memory_group()

    def remove_memory_group(self) -> None:
        if self.memory is not None:
            self.memory.remove()

    # -- exec ----------------------------------------------------------------------------------
    def _command(self, argv: list[str], cwd: str | None, env: Mapping[str, str] | None, *, agent: bool = False
                 ) -> tuple[list[str], dict[str, Any]]:
        """The full argv and spawn options. Limits and the uid switch are commands (``prlimit``, ``setpriv``)
        where those exist, so the spawn needs no ``preexec_fn`` (which forbids the cheap vfork path).
        For the exec ``agent`` no limits: it applies them to each command it starts (:meth:`agent_config`)."""
        iso, lim, uid = self.pool.iso, self.limits, self.host_uid
        per_sandbox_nproc = self.pool.per_sandbox_nproc(uid)
        data = self.memory is None
        enter = enter_argv(self.memory) if self.memory is not None else []
        limits = prlimit_args(iso.prlimit, lim, nproc=per_sandbox_nproc, data=data) \
            if iso.prlimit and not agent else []
        drop = [iso.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None and iso.setpriv \
            else []
        pre_uid = uid if uid is not None and not drop and iso.mode != "setpriv" else None
        preexec = None if (limits or agent) and pre_uid is None else limits_preexec(
            lim, pre_uid, rlimits=not limits and not agent, nproc=per_sandbox_nproc and not limits and not agent,
            data=data)
        if iso.mode == "none":
            home = str(self.tmp.path)
            run_cwd = str(self.work.path) if cwd is None else cwd if cwd.startswith("/") else str(self.work.path / cwd)
            return [*enter, *([*drop, "--"] if drop else []), *limits, *argv], {"env": base_env(home, env) | {"TMPDIR": home}, "cwd": run_cwd,
                                              "preexec_fn": preexec}
        inner_cwd = WORKDIR if cwd is None else (cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}")
        inner = list(limits)
        outer: list[str] = []
        if iso.mode == "setpriv":  # bwrap runs as root; the command drops to the slot's uid inside
            inner = [*drop, "--inh-caps=-all", "--bounding-set=-all", "--", *inner]
        elif drop:
            outer = [*drop, "--"]
        full = bwrap_argv(iso.bwrap or "bwrap", iso.mode, self.work.path, self.tmp.path, self.pool.dir / "etc",
                           self.pool.network, self.pool.binds, base_env("/tmp", env), inner_cwd,
                           [*inner, *argv], as_pid_1=agent, bridge=self.pool.bridge_dir)
        return [*enter, *outer, *full], {"env": {"PATH": PATH}, "cwd": "/", "preexec_fn": preexec}

    async def own_user_names(self) -> set[str]:
        """Who commands here run as, as they see it (uid, ``uid:gid`` and name), asked once."""
        if self._own_names is None:
            r = await self._exec(["/bin/sh", "-c", "id -u; id -g; id -un 2>/dev/null"], self.limits.timeout,
                                 None, None, None)
            uid, gid, *name = (r.stdout.split() + ["", ""])[:3]
            self._own_names = {x for x in (uid, f"{uid}:{gid}", *name) if x}
        return self._own_names

    async def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: str | bytes | None = None,
                   user: str | None = None) -> ExecResult:
        if self.closed:
            raise RuntimeError(f"sandbox {self.id} is closed")
        if user is not None and user not in await self.own_user_names():
            raise SandboxError(f"the local sandbox runs commands as this machine's user; it cannot run them as "
                               f"{user!r} (use the Docker runtime)")
        argv = exec_argv(cmd)
        timeout = self.limits.timeout if timeout is None else float(timeout)
        kills = self.memory.oom_kills() if self.memory is not None else None
        r = await self._exec(argv, timeout, cwd, env, stdin)
        # The OOM killer took a process of this sandbox while the command ran (the command itself, or a
        # child of it such as the program behind the proxy's bridge) and the command failed: that is why.
        if kills is not None and self.memory is not None and r.exit_code != 0 and not r.timed_out and (
                self.memory.oom_kills() or 0) > kills:
            r = replace(r, stderr=r.stderr + ("" if r.stderr.endswith("\n") or not r.stderr else "\n")
                        + killed_line(self.memory.limit_bytes) + "\n")
        return r

    async def _exec(self, argv: list[str], timeout: float, cwd: str | None, env: Mapping[str, str] | None,
                    stdin: str | bytes | None) -> ExecResult:
        channel = await self._channel()
        if channel is not None:
            inner_cwd = WORKDIR if cwd is None else (cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}")
            return await channel.exec(argv, cwd=inner_cwd, env=base_env("/tmp", env), stdin=stdin, timeout=timeout,
                                      cap=self.limits.output_bytes)
        full, kw = self._command(argv, cwd, env)
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *full, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True, **kw)
        self._running.add(proc)
        try:
            return await communicate(proc, stdin, timeout, self.limits.output_bytes, t0)
        finally:
            self._running.discard(proc)
            if proc.returncode is None:
                killpg(proc)
                self.pool.track(reaped(proc))  # reaped by asyncio, not by a garbage-collected Popen


    def kill_all(self) -> asyncio.Future[None] | None:
        """Kill every process of the sandbox; what to await for the agent's namespace to be gone, if any."""
        for proc in list(self._running):
            killpg(proc)
        return self.stop_agent()

    async def reset(self) -> asyncio.Future[None] | None:
        """Hand back: the per-command processes are killed and the agent resets its namespace (kept for the
        next rollout); an agent that fails that is killed. What to await before wiping the files, if any."""
        for proc in list(self._running):
            killpg(proc)
        agent = self.agent
        if agent is None or not agent.alive or self._agent_start is None or not self._agent_start.done():
            return self.stop_agent()
        agent.abandon("the sandbox was released while the command ran")
        try:
            report = await agent.reset()
        except SandboxError:
            return self.stop_agent()
        if not report["ok"] or report["left"] or report["ipc"] or report["cpu"] > self.limits.cpu_seconds / 2:
            return self.stop_agent()
        return None

    # -- the exec agent ------------------------------------------------------------------------
    async def _channel(self) -> AgentChannel | None:
        """The running agent (started now if needed), or None where commands run one ``bwrap`` each."""
        if not self.pool.use_agent:
            return None
        if self.agent is not None and self.agent.alive:
            return self.agent
        if self._agent_start is None or self._agent_start.done() and (self.agent is None or not self.agent.alive):
            self.start_agent()
        assert self._agent_start is not None
        try:
            return await asyncio.shield(self._agent_start)
        except AgentDied as e:
            if self.pool.agent_ok:
                raise  # it worked before: this sandbox's agent died (killed from outside?); the next exec restarts it
            self.pool.agent_unavailable(str(e))
            return None

    def start_agent(self) -> None:
        """Start the agent in the background (a fresh namespace); the first ``exec`` waits for it."""
        self.stop_agent()
        self._agent_start = asyncio.ensure_future(self._start_agent())
        self._agent_start.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _start_agent(self) -> AgentChannel:
        program = self.pool.agent_program
        full, kw = self._command(agent_argv(self.pool.agent_python, program), None, None, agent=True)
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            *full, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, limit=1 << 20, **kw))
        try:
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:  # stopped while starting: the process may exist all the same
            spawn.add_done_callback(self._kill_orphan)
            raise
        self._agent_proc = proc
        errors = bytearray()
        assert proc.stdout is not None and proc.stdin is not None and proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr

        async def read() -> bytes:
            return await stdout.read(1 << 16)

        channel = AgentChannel(self.id, read, proc.stdin, lambda: errors.decode(errors="replace"))
        self._agent_stderr = asyncio.ensure_future(pump(stderr, Tail(errors)))
        self.agent = channel
        await channel.open(self.pool.agent_config(self), program)
        self.pool.agent_ok = True
        return channel

    def _kill_orphan(self, spawn: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if not spawn.cancelled() and spawn.exception() is None:
            proc = spawn.result()
            killpg(proc)
            self.pool.track(reaped(proc))

    def stop_agent(self) -> asyncio.Future[None] | None:
        """Kill the agent's namespace (every process of this sandbox) and forget the channel. Returns a
        future done when its ``bwrap`` has been reaped (the pool tracks it, so close waits for it too)."""
        if self._agent_start is not None and not self._agent_start.done():
            self._agent_start.cancel()
        self._agent_start = None
        if self.agent is not None:
            self.agent.fail("the sandbox was released")
            self.agent = None
        if self._agent_stderr is not None:
            self._agent_stderr.cancel()
            self._agent_stderr = None
        proc, self._agent_proc = self._agent_proc, None
        if proc is None:
            return None
        if proc.returncode is None:
            killpg(proc)
        return self.pool.track(reaped(proc))
