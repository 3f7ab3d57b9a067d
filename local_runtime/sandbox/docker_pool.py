"""``wb.Docker(...)``: sandboxes as Docker containers, kept warm in a pool.

Containers are created with the docker SDK: an unprivileged user for every command, all capabilities
dropped, ``no-new-privileges``, a read-only root, no network (by default), memory/CPU/pids limits and
rlimits; ``/work``, ``/tmp`` and a small control folder ``/.wb`` are host folders bind-mounted in (so
seeding, file access and reset need no round trip). Every container carries the labels
``workbench.authoring.sandbox=1``, ``workbench.run=<run id>`` and its owner's pid, and is renamed after the
rollout it serves (``wb-<rollout id>-...``).

Commands go through the container's exec agent (``agent.py``): one ``docker exec`` per
container starts it as root with only the capabilities to switch users (``SETUID``, ``SETGID``); it
forks every command as the sandbox user with the container's limits, kills a command's whole tree on
timeout (output so far kept) and, when a rollout releases the container, kills every process of the
sandbox user and clears its shared memory, so the next rollout starts clean. Commands cannot signal,
trace or impersonate it (another uid; its channel is the exec's stream, which only Workbench holds).
Where the image has no usable ``python3`` (or ``Docker(exec_agent=False)``), each command is its own
``docker exec`` through the Engine API (exec create, a hijacked start stream, exec inspect) over
asyncio; it writes its process-group id to ``/.wb`` first, so a timeout kills exactly its process tree,
and a released container has all its sandbox-user processes killed before it is reused.

Cleanup: containers are removed on close and on Ctrl-C (the run's ``finally``); when Workbench is
killed outright, each container's pid 1 notices that its heartbeat file stopped being renewed and exits
(``auto_remove`` deletes it), and ``workbench sandbox gc`` removes leftovers by label at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workbench_local.sandbox.channel import AgentChannel, AgentDied, agent_argv, docker_stream, warm_config
from workbench_local.sandbox.docker_api import DockerAPIError, EngineAPI, _read_frames, connect, sandbox_user
from workbench_local.sandbox.fs import (
    Capture,
    HostDir,
    WorkdirFiles,
    base_env,
    exec_argv,
    owner_alive,
    parse_bind,
    pool_dir,
    process_start_time,
    rmtree,
    seed,
    stale_pool_dirs,
)

from workbench.authoring.runtimes import Docker
from workbench.authoring.sandbox import (
    BRIDGE_DIR,
    DEFAULT_IMAGE,
    WORKDIR,
    ExecResult,
    PoolStats,
    Sandbox,
    SandboxError,
    SandboxPool,
    check_task_needs,
    network_policy,
)
from workbench.records.task import Task

LABEL = "workbench.sandbox"
TIMEOUT_EXIT = 124
HEARTBEAT_S = float(os.environ.get("WORKBENCH_SANDBOX_HEARTBEAT", "20"))


# -- the sandbox -----------------------------------------------------------------------------------
class DockerSandbox(WorkdirFiles, Sandbox):
    kind = "docker"

    def __init__(self, pool: DockerPool, slot: int) -> None:
        self.pool = pool
        self.slot = slot
        self.bridge_path = BRIDGE_DIR
        self.limits = pool.limits
        root = pool.dir / f"s{slot}"
        uid, gid = pool.user
        owner = (uid, gid) if os.getuid() == 0 else None
        self.work = HostDir(root / "work", WORKDIR, owner)
        self.tmp = HostDir(root / "tmp", "/tmp", owner)
        self.ctl = root / "ctl"
        self.name = f"wb-{pool.token}-{slot}"
        self.id = self.name
        self.container_id = ""
        self.workdir = WORKDIR
        self.closed = False
        self.used = False
        self.dead = False
        self.held_since = 0.0
        self._cgroup: str | None = None
        self.agent: AgentChannel | None = None

    # -- lifecycle (blocking; run in threads) --------------------------------------------------
    def create_blocking(self) -> None:
        from docker.types import Ulimit

        p = self.pool
        lim = self.limits
        self.work.path.parent.mkdir(mode=0o711)
        self.work.create(0o755)
        self.tmp.create(0o755)
        self.ctl.mkdir(mode=0o777)
        os.chmod(self.ctl, 0o777)
        (self.ctl / "hb").touch()
        mem = f"{lim.memory_mb}m"
        loop = (f"trap 'exit 0' TERM INT; while :; do sleep {p.heartbeat_s:g}; "
                "rm /.wb/hb 2>/dev/null || exit 0; done")
        labels = {LABEL: "1", "workbench.run": p.run_id, "workbench.pid": str(os.getpid()),
                  "workbench.pid_start": p.pid_start, "workbench.host": socket.gethostname(),
                  "workbench.pool": p.dir.name}
        kw: dict[str, Any] = {}
        if p.network == "none":
            kw["network_mode"] = "none"
        elif p.network_name:
            kw["network"] = p.network_name
            if p.network_name != "bridge":  # an allow list: names were pinned, no DNS unless listed
                kw["extra_hosts"] = p.extra_hosts
                kw["dns"] = ["127.0.0.1"]
        if p.storage_mb is not None:  # the container's writable layer (check_storage_limit: the driver takes it)
            kw["storage_opt"] = {"size": f"{p.storage_mb}M"}
        if p.use_agent:  # the agent (root) may become the sandbox user; nothing else may change identity
            kw["cap_add"] = ["SETUID", "SETGID"]
        volumes = {str(self.work.path): {"bind": WORKDIR, "mode": "rw"},
                   str(self.tmp.path): {"bind": "/tmp", "mode": "rw"}}
        mode: dict[str, Any] = {"cap_drop": ["ALL"], "read_only": True, "working_dir": WORKDIR,
                                "environment": base_env("/tmp")}
        if p.as_image:  # as the image declares it: its root writable, its own /tmp, WORKDIR and environment
            del volumes[str(self.tmp.path)]
            mode = {"cap_drop": ["NET_RAW", "MKNOD"], "read_only": False, "entrypoint": ["/bin/sh", "-c"]}
        c = p.client.containers.run(
            p.image, command=[loop] if p.as_image else ["/bin/sh", "-c", loop], detach=True, user="0:0",
            name=self.name, labels=labels,
            mem_limit=mem, memswap_limit=mem, nano_cpus=int(lim.cpus * 1e9), pids_limit=lim.pids + 4,
            ulimits=[Ulimit(name="fsize", soft=lim.file_size_mb << 20, hard=lim.file_size_mb << 20),
                     Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="cpu", soft=lim.cpu_seconds, hard=lim.cpu_seconds + 5),
                     Ulimit(name="nofile", soft=4096, hard=4096)],
            security_opt=["no-new-privileges"], hostname="sandbox",
            volumes={**volumes, str(self.ctl): {"bind": "/.wb", "mode": "rw"},
                     str(p.bridge_dir): {"bind": BRIDGE_DIR, "mode": "ro"},
                     **{src: {"bind": dst, "mode": "ro"} for src, dst in p.binds}},
            auto_remove=True, stop_signal="SIGKILL", **mode, **kw)
        self.container_id = c.id

    def remove_blocking(self) -> None:
        import docker.errors

        if self.container_id:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                self.pool.client.api.remove_container(self.container_id, force=True)
        rmtree(self.work.path.parent)

    # -- the exec agent ------------------------------------------------------------------------
    async def start_agent(self) -> AgentChannel:
        """Start the container's agent: one ``docker exec`` (as root) whose stream is the channel."""
        exec_id = await self._exec_create(agent_argv(), None, "/", True, user="0:0")
        status, payload, reader, writer = await self.pool.api.request("POST", f"/exec/{exec_id}/start",
                                                                      {"Detach": False, "Tty": False}, upgrade=True)
        if reader is None or writer is None:
            raise AgentDied(f"sandbox {self.name}: starting the exec agent failed ({status}: "
                            f"{payload.decode(errors='replace')[:200]})")
        errors = bytearray()
        channel = AgentChannel(self.name, docker_stream(reader, errors), writer, lambda: errors.decode(errors="replace"))
        self.agent = channel
        await channel.open({"rlimits": {}, "user": list(self.pool.user), "grace": 0.1,
                                "warm": warm_config(self.pool.runtime.warm_python)})
        return channel

    async def close_agent(self) -> None:
        if self.agent is not None:
            await self.agent.close()

    # -- exec ----------------------------------------------------------------------------------
    async def _exec_create(self, argv: list[str], env: Mapping[str, str] | None, cwd: str | None,
                           stdin: bool, user: str | None = None) -> str:
        uid, gid = self.pool.user
        cfg = {"AttachStdin": stdin, "AttachStdout": True, "AttachStderr": True, "Tty": False, "Cmd": argv,
               "Env": [f"{k}={v}" for k, v in base_env("/tmp", env).items()], "User": user or f"{uid}:{gid}",
               "WorkingDir": WORKDIR if cwd is None else (cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}")}
        if self.pool.as_image:  # the image's environment, user and WORKDIR, unless the command names its own
            home = self.pool.image_workdir
            cfg.update(Env=[f"{k}={v}" for k, v in (env or {}).items()], User=user or self.pool.image_user,
                       WorkingDir=home if cwd is None else cwd if cwd.startswith("/") else f"{home.rstrip('/')}/{cwd}")
        try:
            r = await self.pool.api.call("POST", f"/containers/{self.container_id}/exec", cfg)
        except DockerAPIError as e:
            if e.status in (404, 409):
                self.dead = True
                raise SandboxError(f"sandbox container {self.name} is gone ({e.message})") from None
            raise
        return str(r["Id"])

    async def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: str | bytes | None = None,
                   user: str | None = None) -> ExecResult:
        if self.closed:
            raise RuntimeError(f"sandbox {self.name} is closed")
        argv = exec_argv(cmd)
        timeout = self.limits.timeout if timeout is None else float(timeout)
        self.used = True
        if self.agent is not None and user is None:  # the agent forks as the sandbox user only
            if not self.agent.alive:
                self.dead = True
                raise AgentDied(f"sandbox {self.name}: {self.agent.dead}")
            inner_cwd = WORKDIR if cwd is None else (cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}")
            try:
                return await self.agent.exec(argv, cwd=inner_cwd, env=base_env("/tmp", env), stdin=stdin,
                                             timeout=timeout, cap=self.limits.output_bytes)
            except AgentDied:
                self.dead = True
                raise
        token = secrets.token_hex(6)
        # Record the process group (the exec'd process leads its own session), then become the command.
        wrapped = ["/bin/sh", "-c", f'echo $$ > /.wb/{token}.pid; exec "$@"', "sh", *argv]
        t0 = time.perf_counter()
        exec_id = await self._exec_create(wrapped, env, cwd, stdin is not None, user=user)
        status, payload, reader, writer = await self.pool.api.request("POST", f"/exec/{exec_id}/start",
                                                                      {"Detach": False, "Tty": False}, upgrade=True)
        if reader is None or writer is None:
            raise SandboxError(f"sandbox {self.name}: starting the command failed ({status}: "
                               f"{payload.decode(errors='replace')[:200]})")
        out, err = Capture.new(self.limits.output_bytes), Capture.new(self.limits.output_bytes)
        pump = asyncio.ensure_future(_read_frames(reader, out, err))
        feeder = asyncio.ensure_future(_send_stdin(writer, stdin))
        timed_out = False
        try:
            done, _ = await asyncio.wait([pump], timeout=timeout)
            if not done:
                timed_out = True
                await self._kill(token, user)
                await asyncio.wait([pump], timeout=3.0)
        except BaseException:
            # Cancelled (rollout timeout, Ctrl-C): kill the command without waiting for it.
            t = asyncio.ensure_future(self._kill(token, user))
            self.pool.background.add(t)
            t.add_done_callback(self.pool.background.discard)
            raise
        finally:
            for t in (pump, feeder):
                if not t.done():
                    t.cancel()
            writer.close()
            with contextlib.suppress(OSError):
                (self.ctl / f"{token}.pid").unlink()
        code = TIMEOUT_EXIT if timed_out else await self._exit_code(exec_id)
        return ExecResult(code, out.text(), err.text(), timed_out, out.truncated or err.truncated,
                          time.perf_counter() - t0)

    async def _exit_code(self, exec_id: str) -> int:
        for i in range(50):
            try:
                info = await self.pool.api.call("GET", f"/exec/{exec_id}/json")
            except DockerAPIError:
                return -1
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            await asyncio.sleep(0.002 * (i + 1))
        return -1

    async def _kill(self, token: str, user: str | None = None) -> None:
        """Kill the process group of one exec (or, before it recorded its pid, everything of the sandbox user),
        as the user it ran as (who may always signal its own processes)."""
        try:
            pid = (self.ctl / f"{token}.pid").read_text().strip()
        except OSError:
            pid = ""
        script = f"kill -9 -- -{pid} 2>/dev/null; kill -9 {pid} 2>/dev/null; true" if pid.isdigit() else "kill -9 -1"
        await self._run_quiet(["/bin/sh", "-c", script], user)

    async def _run_quiet(self, argv: list[str], user: str | None = None) -> None:
        with contextlib.suppress(Exception):
            exec_id = await self._exec_create(argv, None, None, False, user=user)
            _, _, reader, writer = await self.pool.api.request("POST", f"/exec/{exec_id}/start",
                                                               {"Detach": False, "Tty": False}, upgrade=True)
            if reader is not None and writer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.read(), 5.0)
                writer.close()

    async def reset(self) -> None:
        """Kill every process of the sandbox user and empty the folders (the agent also clears shared memory
        and System V IPC); a container that cannot be made clean is dead (removed, never reused)."""
        if self.agent is not None:
            self.agent.abandon("the sandbox was released while the command ran")
            report = await self.agent.reset()
            if not report.get("ok") or report.get("left") or report.get("ipc"):
                raise SandboxError(f"sandbox {self.name} could not be reset: {report}")
            if float(report.get("cpu", 0.0)) > self.limits.cpu_seconds / 2:
                raise SandboxError(f"sandbox {self.name}: its agent has used half its CPU-time limit; replacing it")
        elif self.used and self._pids() != 0:
            await self._run_quiet(["/bin/sh", "-c", "kill -9 -1 2>/dev/null; true"])
        self.used = False
        await asyncio.to_thread(self._wipe)

    def _pids(self) -> int | None:
        """Processes left besides pid 1's heartbeat loop, read from the container's pids cgroup when this
        machine runs the engine (None when unknown: the reset then kills unconditionally)."""
        if self._cgroup is None:
            cid = self.container_id
            for p in (f"/sys/fs/cgroup/pids/docker/{cid}", f"/sys/fs/cgroup/pids/system.slice/docker-{cid}.scope",
                      f"/sys/fs/cgroup/system.slice/docker-{cid}.scope", f"/sys/fs/cgroup/docker/{cid}"):
                if os.path.exists(p + "/pids.current"):
                    self._cgroup = p + "/pids.current"
                    break
            else:
                self._cgroup = ""
        if not self._cgroup:
            return None
        try:
            with open(self._cgroup) as fh:
                return max(0, int(fh.read()) - 2)  # pid 1 and its sleep
        except (OSError, ValueError):
            return None

    def _wipe(self) -> None:
        self.work.wipe(0o755)
        self.tmp.wipe(0o755)
        for p in self.ctl.iterdir():  # pid files, and whatever a command left in the writable control folder
            if p.name != "hb":
                rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)



async def _send_stdin(writer: asyncio.StreamWriter, data: str | bytes | None) -> None:
    if data is None:
        return
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(data.encode() if isinstance(data, str) else data)
        await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


#: The storage drivers that can limit a container's writable layer (``--storage-opt size``); overlay2 can
#: only on an xfs backing filesystem mounted with project quotas (the engine says so when it cannot).
_SIZED_DRIVERS = frozenset({"btrfs", "zfs", "devicemapper", "windowsfilter"})


def check_storage_limit(client: Any, storage_mb: int) -> None:
    """Refuse ``storage_mb`` in one line when the engine's storage driver cannot limit a container's disk."""
    info = client.info()
    driver = str(info.get("Driver") or "unknown")
    status = dict(tuple(x) for x in info.get("DriverStatus") or [] if isinstance(x, list | tuple) and len(x) == 2)
    backing = str(status.get("Backing Filesystem") or "")
    if driver in _SIZED_DRIVERS or (driver == "overlay2" and backing == "xfs"):
        return
    on = f"{driver} on {backing}" if backing else driver
    raise SandboxError(f"storage_mb={storage_mb}: this Docker engine's storage driver ({on}) cannot limit a "
                       "container's disk; it needs overlay2 on xfs with project quotas, btrfs or zfs")


# -- the pool --------------------------------------------------------------------------------------
class DockerPool(SandboxPool):
    kind = "docker"

    def __init__(self, runtime: Docker, *, run_id: str = "", size: int = 4, env_dir: str | Path | None = None,
                 heartbeat_s: float | None = None) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.size = max(0, size)
        self.env_dir = Path(env_dir) if env_dir else None
        self.limits = runtime.limits()
        self.network = network_policy(runtime.network)
        self.binds = tuple(parse_bind(b) for b in getattr(runtime, "binds", ()))
        self.network_name = ""
        self.extra_hosts: dict[str, str] = {}
        self.heartbeat_s = heartbeat_s or HEARTBEAT_S
        self.user = sandbox_user()
        self.stats = PoolStats()
        self.token = secrets.token_hex(3)
        self.pid_start = process_start_time(os.getpid())
        self.idle: list[DockerSandbox] = []
        self.held: set[DockerSandbox] = set()
        self.all: set[DockerSandbox] = set()
        self.background: set[asyncio.Future[Any]] = set()
        self.creating = 0
        self.recycling = 0
        self._ready = asyncio.Condition()
        self._slots = 0
        self.closed = False
        self.as_image = bool(getattr(runtime, "as_image", False))
        self.storage_mb: int | None = None  # the most a container may write to its root (Docker(storage_mb=))
        self.image_user = "0:0"  # as_image: who commands run as (the image's USER, read when the pool starts)
        self.image_workdir = "/"  # as_image: where they run (its WORKDIR)
        self.use_agent = runtime.exec_agent and not self.as_image
        self.agent_ok = False  # an agent has started in this pool (later failures are that container's own)
        self.client: Any = None
        self.api: EngineAPI
        self.image = ""
        self.dir = Path()
        self._hb_stop = threading.Event()
        self._hb: threading.Thread | None = None

    async def start(self) -> DockerPool:
        for src, _ in self.binds:
            if not os.path.exists(src):
                raise SandboxError(f"Docker(binds=...): {src} does not exist")
        self.client = await asyncio.to_thread(connect)
        self.api = EngineAPI(self.client)
        self.storage_mb = getattr(self.runtime, "storage_mb", None)
        if self.storage_mb is not None:
            await asyncio.to_thread(check_storage_limit, self.client, self.storage_mb)
        self.image = await asyncio.to_thread(self._resolve_image)
        if self.as_image:
            config = (await asyncio.to_thread(self.client.images.get, self.image)).attrs.get("Config") or {}
            self.image_user = config.get("User") or "0:0"
            self.image_workdir = config.get("WorkingDir") or "/"
        await asyncio.to_thread(gc, self.client, False)
        if isinstance(self.network, tuple):
            from workbench_local.sandbox.network import allow_list_network

            self.network_name, self.extra_hosts = await asyncio.to_thread(allow_list_network, self.client,
                                                                          self.network)
        elif self.network == "host":
            self.network_name = "bridge"
        self.dir = pool_dir("docker")
        self.bridge_dir = self.dir / "bridge"
        self.bridge_dir.mkdir(mode=0o755)
        self._hb = threading.Thread(target=self._heartbeat, name="workbench-sandbox-heartbeat", daemon=True)
        self._hb.start()
        for _ in range(self.size):
            self._spawn_warm()
        return self

    def _resolve_image(self) -> str:
        from workbench_local.sandbox.image import build_default_image, build_dockerfile, image_exists

        rt = self.runtime
        if rt.dockerfile is not None:
            df = Path(rt.dockerfile)
            if not df.is_absolute() and self.env_dir is not None:
                df = self.env_dir / df
            return build_dockerfile(self.client, df, timeout_s=getattr(rt, "build_timeout", None))
        image = rt.image or DEFAULT_IMAGE
        if image == DEFAULT_IMAGE:
            if not image_exists(self.client, image):
                from workbench_local.sandbox.fs import warn_once

                warn_once("docker-image", f"building the sandbox image {image} from this machine's files "
                          "(once; `workbench sandbox image` does it ahead of time)")
                build_default_image(self.client)
            return image
        if not image_exists(self.client, image):
            raise SandboxError(f"Docker image {image!r} is not on this machine (no registry is used): build or load it "
                               f"first, or use the default image ({DEFAULT_IMAGE})")
        return image

    def _heartbeat(self) -> None:
        while not self._hb_stop.wait(max(0.5, self.heartbeat_s / 4)):
            for sb in list(self.all):
                with contextlib.suppress(OSError):
                    (sb.ctl / "hb").touch()

    def _new(self) -> DockerSandbox:
        sb = DockerSandbox(self, self._slots)
        self._slots += 1
        return sb

    async def _create(self) -> DockerSandbox:
        sb = self._new()
        self.all.add(sb)
        try:
            await asyncio.to_thread(sb.create_blocking)
            if self.use_agent:
                await self._start_agent(sb)
        except BaseException as e:
            self.all.discard(sb)
            await sb.close_agent()
            await asyncio.shield(asyncio.to_thread(sb.remove_blocking))
            if isinstance(e, Exception) and not isinstance(e, SandboxError):
                raise SandboxError(f"starting a sandbox container from {self.image} failed: "
                                   f"{getattr(e, 'explanation', None) or e}") from None
            raise
        self.stats.created += 1
        return sb

    async def _start_agent(self, sb: DockerSandbox) -> None:
        try:
            await sb.start_agent()
            self.agent_ok = True
        except AgentDied as e:
            await sb.close_agent()
            sb.agent = None
            if self.agent_ok:
                raise
            if self.use_agent:  # the image cannot run it (no python3?): one docker exec per command instead
                self.use_agent = False
                from workbench_local.sandbox.fs import warn_once

                warn_once("docker-agent", f"wb.Docker(): the exec agent does not start in {self.image} ({e}); every "
                          "command is its own docker exec instead (slower, as isolated)")

    def _spawn_warm(self) -> None:
        async def warm() -> None:
            try:
                sb = await self._create()
            except Exception:
                return
            finally:
                self.creating -= 1
                async with self._ready:
                    self._ready.notify_all()
            if self.closed:
                await sb.close_agent()
                await asyncio.to_thread(sb.remove_blocking)
                return
            self.idle.append(sb)
            async with self._ready:
                self._ready.notify_all()

        self.creating += 1
        t = asyncio.ensure_future(warm())
        self.background.add(t)
        t.add_done_callback(self.background.discard)

    async def acquire(self, rollout_id: str = "", task: Task | None = None) -> DockerSandbox:
        if self.closed:
            raise SandboxError("the sandbox pool is closed")
        t0 = time.perf_counter()
        needs = check_task_needs(task) if task is not None else {}
        sb = await self._take()
        sb.closed = False
        self.held.add(sb)
        try:
            if rollout_id:
                self._rename(sb, rollout_id)
            await seed(sb, needs)
        except BaseException:
            await self.release(sb)
            raise
        self._handed_out(sb, t0)
        return sb

    async def _take(self) -> DockerSandbox:
        while True:
            if self.idle:
                return self.idle.pop()
            if self.size == 0 or (self.creating <= 0 and self.recycling <= 0):
                self.stats.cold += 1
                return await self._create()
            async with self._ready:
                # A warm container is on its way (starting, or being reset after its last rollout): resetting
                # takes tens of milliseconds, starting a new one hundreds, so wait for it.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._ready.wait(), 30)

    def _rename(self, sb: DockerSandbox, rollout_id: str) -> None:
        name = "wb-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", rollout_id)[:100] + f"-{self.token}{sb.slot}"

        def rename() -> None:
            with contextlib.suppress(Exception):
                self.client.api.rename(sb.container_id, name)
                sb.name = name

        t = asyncio.ensure_future(asyncio.to_thread(rename))
        self.background.add(t)
        t.add_done_callback(self.background.discard)

    async def release(self, sandbox: Sandbox) -> None:
        assert isinstance(sandbox, DockerSandbox)
        if not self._taken_back(sandbox):
            return
        if self.as_image:  # its root was written to: never handed out again
            sandbox.dead = True
        self.recycling += 1
        t = asyncio.ensure_future(self._recycle(sandbox))
        self.background.add(t)
        t.add_done_callback(self.background.discard)

    async def _recycle(self, sb: DockerSandbox) -> None:
        try:
            try:
                if not self.closed and not sb.dead and len(self.idle) < self.size:
                    await sb.reset()
            except Exception:
                sb.dead = True
            if self.closed or sb.dead or len(self.idle) >= self.size:
                self.all.discard(sb)
                await sb.close_agent()
                await asyncio.to_thread(sb.remove_blocking)
                if not self.closed and sb.dead and len(self.idle) + self.creating < self.size:
                    self._spawn_warm()
                return
            self.idle.append(sb)
        finally:
            self.recycling -= 1
            async with self._ready:
                self._ready.notify_all()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._hb_stop.set()
        pending = [t for t in self.background if not t.done()]
        if pending:
            await asyncio.wait(pending, timeout=10)
        doomed = list(self.all)
        self.all.clear()
        self.idle.clear()
        self.held.clear()
        for sb in doomed:
            await sb.close_agent()
        if doomed:
            await asyncio.gather(*(asyncio.to_thread(sb.remove_blocking) for sb in doomed), return_exceptions=True)
        if self.dir != Path():
            await asyncio.to_thread(rmtree, self.dir)
        if self.network_name and isinstance(self.network, tuple):
            from workbench_local.sandbox.network import drop_network

            await asyncio.to_thread(drop_network, self.client, self.network_name)


def gc(client: Any = None, everything: bool = False) -> dict[str, int]:
    """Remove sandbox containers whose owner process is gone (all of them with ``everything``) and
    stale host folders. Returns counts."""
    import docker.errors

    client = client or connect()
    host = socket.gethostname()
    removed = kept = 0
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
        labels = c.labels or {}
        mine = labels.get("workbench.host") == host
        pid = int(labels.get("workbench.pid", "0") or 0)
        alive = mine and pid > 0 and owner_alive(pid, labels.get("workbench.pid_start", ""))
        if everything or (mine and not alive) or (not alive and c.status in ("exited", "dead")):
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                c.remove(force=True)
                removed += 1
        else:
            kept += 1
    dirs = 0
    for d in stale_pool_dirs():
        rmtree(d)
        dirs += 1
    nets = 0
    with contextlib.suppress(Exception):
        from workbench_local.sandbox.network import gc_networks

        nets = gc_networks(client, everything)
    return {"containers_removed": removed, "containers_kept": kept, "dirs_removed": dirs, "networks_removed": nets}
