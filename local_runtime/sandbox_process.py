"""``wb.Local()``: sandboxes as local processes, isolated with bubblewrap where it is available.

Every ``exec`` is one ``bwrap`` invocation: new user, pid, network, ipc, uts and cgroup namespaces; a
root made of read-only system folders (``/usr`` and the library links, a few files of ``/etc``)
plus the sandbox's own ``/work`` and ``/tmp`` (host folders, bind-mounted); a clean environment; rlimits
on CPU time, address space, file size and (inside the user namespace, so per sandbox) processes. The
whole process tree dies with the pid namespace on timeout, on cancellation and when Workbench dies.

When the host process is root, sandboxes run as a per-slot unprivileged uid (root-owned host files
stay unreadable and the process limit is exact). Where bubblewrap or user namespaces are missing
(macOS, locked-down kernels), ``isolation="auto"`` falls back to plain subprocesses in the workdir with
the same rlimits and a clean environment, and says so once on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.sandbox import (
    WORKDIR,
    ExecResult,
    Limits,
    Local,
    PoolStats,
    Sandbox,
    SandboxError,
    SandboxPool,
    check_task_needs,
    network_policy,
)
from workbench.tasks import Task

from .sandbox_fs import (
    PATH,
    Capture,
    HostDir,
    WorkdirFiles,
    base_env,
    exec_argv,
    pool_dir,
    rmtree,
    seed,
    warn_once,
)

SANDBOX_UID = 1000  # the uid processes see inside the sandbox
#: host uids for sandboxes when Workbench runs as root (one per slot, so limits and files are per sandbox)
ROOT_UID_BASE = 1_300_000_000
TIMEOUT_EXIT = 124
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "ssl", "ca-certificates",
              "pki", "mime.types", "nsswitch.conf", "protocols", "services", "magic", "inputrc")
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


# -- isolation detection ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Isolation:
    mode: str  # "userns" (bwrap + user namespace) | "setpriv" (root, no user namespaces) | "none"
    bwrap: str | None
    prlimit: str | None
    reason: str = ""
    setpriv: str | None = None


_detected: dict[str, Isolation] = {}


def _root_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), f"/{name}"]
        elif p.is_dir():
            args += ["--ro-bind", str(p), f"/{name}"]
    for name in _ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for p in sorted(Path("/etc").glob("python3*")):
        args += ["--ro-bind-try", str(p), str(p)]
    return args


def _drop_to(uid: int | None) -> Callable[[], None] | None:
    if uid is None:
        return None

    def fn() -> None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return fn


def detect(isolation: str = "auto") -> Isolation:
    """Find out (once per process) how this machine can isolate a sandbox."""
    forced = os.environ.get("WORKBENCH_SANDBOX_ISOLATION")  # tests and debugging: userns | setpriv | none
    key = f"{isolation}:{forced}"
    if key in _detected:
        return _detected[key]
    sysdirs = "/usr/bin:/bin:/usr/sbin:/sbin"
    prlimit, setpriv = shutil.which("prlimit", path=sysdirs), shutil.which("setpriv", path=sysdirs)
    bwrap = shutil.which("bwrap")
    root = os.geteuid() == 0
    reasons: list[str] = []
    mode = "none"
    if isolation == "none":
        reasons.append("isolation='none' was asked for")
    elif forced == "none":
        reasons.append("WORKBENCH_SANDBOX_ISOLATION=none")
    elif not sys.platform.startswith("linux"):
        reasons.append(f"bubblewrap needs Linux (this is {sys.platform})")
    elif not bwrap:
        reasons.append("bubblewrap (bwrap) is not installed")
    else:
        candidates = [forced] if forced in ("userns", "setpriv") else (["userns", "setpriv"] if root else ["userns"])
        for cand in candidates:
            if cand == "setpriv" and not setpriv:
                reasons.append("no setpriv for the root fallback")
                continue
            err = _probe(bwrap, cand, root, setpriv)
            if err is None:
                mode, reasons = cand, []
                break
            reasons.append(err)
    result = Isolation(mode, bwrap if mode != "none" else None, prlimit, "; ".join(reasons), setpriv)
    _detected[key] = result
    return result


def _probe(bwrap: str, mode: str, root: bool, setpriv: str | None) -> str | None:
    with tempfile.TemporaryDirectory(prefix="wb-probe-") as d:
        os.chmod(d, 0o777)
        argv = _bwrap_argv(bwrap, mode, Path(d), Path(d), Path(d), "none", (), {"PATH": PATH}, WORKDIR,
                           ["/bin/sh", "-c", "test -w /work && test ! -e /root/. -o ! -r /root"])
        if root and mode == "userns":
            argv = [setpriv, f"--reuid={ROOT_UID_BASE}", f"--regid={ROOT_UID_BASE}", "--clear-groups", "--", *argv] \
                if setpriv else argv
        pre = _drop_to(ROOT_UID_BASE) if root and mode == "userns" and not setpriv else None
        try:
            p = subprocess.run(argv, capture_output=True, timeout=20, preexec_fn=pre, env={"PATH": PATH},
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            return f"bwrap ({mode}) failed to start: {e}"
        if p.returncode != 0:
            msg = (p.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [f"exit {p.returncode}"]
            return f"bwrap ({mode}) does not work here: {msg[0]}"
    return None


def _bwrap_argv(bwrap: str, mode: str, work: Path, tmp: Path, etc: Path, network: str, binds: Sequence[str],
                env: Mapping[str, str], cwd: str, argv: list[str]) -> list[str]:
    if mode == "setpriv":  # root without user namespaces: every other namespace, the uid switch comes later
        a = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if network != "host":
            a.append("--unshare-net")
    else:
        a = [bwrap, "--unshare-all"]
        if network == "host":
            a.append("--share-net")
    a += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if mode == "userns":
        a += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    a += _root_mounts()
    for name in ("passwd", "group", "hosts"):
        if (etc / name).exists():
            a += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    if network == "host":
        a += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    for b in binds:
        a += ["--ro-bind", b, b]
    a += ["--proc", "/proc", "--dev", "/dev", "--bind", str(tmp), "/tmp", "--bind", str(work), WORKDIR,
          "--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    if mode == "userns":
        a += ["--cap-drop", "ALL"]
    return [*a, "--", *argv]


# -- the sandbox -----------------------------------------------------------------------------------
class ProcessSandbox(WorkdirFiles, Sandbox):
    kind = "local"

    def __init__(self, pool: ProcessPool, slot: int) -> None:
        self.pool = pool
        self.slot = slot
        self.id = f"local-{slot}"
        self.limits = pool.limits
        root = pool.dir / f"s{slot}"
        self.host_uid = pool.slot_uid(slot)
        owner = (self.host_uid, self.host_uid) if self.host_uid is not None else None
        iso = pool.iso.mode != "none"
        self.isolated = iso
        self.work = HostDir(root / "work", WORKDIR if iso else str(root / "work"), owner)
        self.tmp = HostDir(root / "tmp", "/tmp" if iso else str(root / "tmp"), owner)
        self.workdir = self.work.inner
        self.rollout_id = ""
        self.closed = False
        self.held_since = 0.0
        self._running: set[asyncio.subprocess.Process] = set()

    def create(self) -> None:
        self.work.path.parent.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.work.path.parent, 0o711)
        self.work.create(0o755)
        self.tmp.create(0o755)

    # -- exec ----------------------------------------------------------------------------------
    def _command(self, argv: list[str], cwd: str | None, env: Mapping[str, str] | None
                 ) -> tuple[list[str], dict[str, Any]]:
        """The full argv and spawn options. Limits and the uid switch are commands (``prlimit``, ``setpriv``)
        where those exist, so the spawn needs no ``preexec_fn`` (which forbids the cheap vfork path)."""
        iso, lim, uid = self.pool.iso, self.limits, self.host_uid
        # Per-sandbox process counting: inside its own user namespace, or under its own host uid (root).
        per_sandbox_nproc = iso.mode in ("userns", "setpriv") or uid is not None
        limits = _prlimit_args(iso.prlimit, lim, nproc=per_sandbox_nproc) if iso.prlimit else []
        drop = [iso.setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None and iso.setpriv \
            else []
        pre_uid = uid if uid is not None and not drop and iso.mode != "setpriv" else None
        preexec = None if limits and pre_uid is None else _limits_preexec(
            lim, pre_uid, rlimits=not limits, nproc=per_sandbox_nproc and not limits)
        if iso.mode == "none":
            home = str(self.tmp.path)
            run_cwd = str(self.work.path) if cwd is None else cwd if cwd.startswith("/") else str(self.work.path / cwd)
            outer = [*drop, "--"] if drop else []
            return [*outer, *limits, *argv], {"env": base_env(home, env) | {"TMPDIR": home}, "cwd": run_cwd,
                                              "preexec_fn": preexec}
        inner_cwd = WORKDIR if cwd is None else (cwd if cwd.startswith("/") else f"{WORKDIR}/{cwd}")
        inner = list(limits)
        outer: list[str] = []
        if iso.mode == "setpriv":  # bwrap runs as root; the command drops to the slot's uid inside
            inner = [*drop, "--inh-caps=-all", "--bounding-set=-all", "--", *inner]
        elif drop:
            outer = [*drop, "--"]
        full = _bwrap_argv(iso.bwrap or "bwrap", iso.mode, self.work.path, self.tmp.path, self.pool.dir / "etc",
                           self.pool.network, self.pool.binds, base_env("/tmp", env), inner_cwd, [*inner, *argv])
        return [*outer, *full], {"env": {"PATH": PATH}, "cwd": "/", "preexec_fn": preexec}

    async def exec(self, cmd: str | Sequence[str], timeout: float | None = None, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, stdin: str | bytes | None = None) -> ExecResult:
        if self.closed:
            raise RuntimeError(f"sandbox {self.id} is closed")
        argv = exec_argv(cmd)
        timeout = self.limits.timeout if timeout is None else float(timeout)
        full, kw = self._command(argv, cwd, env)
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *full, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True, **kw)
        self._running.add(proc)
        try:
            return await _communicate(proc, stdin, timeout, self.limits.output_bytes, t0)
        finally:
            self._running.discard(proc)
            if proc.returncode is None:
                _killpg(proc)


    def kill_all(self) -> None:
        for proc in list(self._running):
            _killpg(proc)


def _killpg(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _prlimit_args(prlimit: str, lim: Limits, *, nproc: bool) -> list[str]:
    mem, fsize, cpu = lim.memory_mb << 20, lim.file_size_mb << 20, int(lim.cpu_seconds)
    args = [prlimit, f"--cpu={cpu}:{cpu + 5}", f"--as={mem}:{mem}", f"--fsize={fsize}:{fsize}", "--core=0:0"]
    if nproc:
        args.append(f"--nproc={lim.pids}:{lim.pids}")
    return [*args, "--"]


def _limits_preexec(lim: Limits, uid: int | None, *, rlimits: bool, nproc: bool) -> Callable[[], None]:
    """The fallback when ``prlimit``/``setpriv`` are missing: set limits and switch uid in the child."""
    cpu, mem, fsize, pids = int(lim.cpu_seconds), lim.memory_mb << 20, lim.file_size_mb << 20, lim.pids
    libc = _libc()

    def fn() -> None:
        if rlimits:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc:
            resource.setrlimit(resource.RLIMIT_NPROC, (pids, pids))
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if libc is not None:  # the direct child dies with us (bwrap's --die-with-parent does the rest)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG

    return fn


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


async def _pump(stream: asyncio.StreamReader | None, cap: Capture) -> None:
    if stream is None:
        return
    while True:
        chunk = await stream.read(1 << 16)
        if not chunk:
            return
        cap.feed(chunk)


async def _feed(proc: asyncio.subprocess.Process, data: str | bytes | None) -> None:
    if data is None or proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data.encode() if isinstance(data, str) else data)
        await proc.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()


async def _communicate(proc: asyncio.subprocess.Process, stdin: str | bytes | None, timeout: float, cap: int,
                       t0: float) -> ExecResult:
    out, err = Capture.new(cap), Capture.new(cap)
    tasks = [asyncio.ensure_future(_pump(proc.stdout, out)), asyncio.ensure_future(_pump(proc.stderr, err)),
             asyncio.ensure_future(_feed(proc, stdin))]
    waiter = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait([*tasks[:2], waiter], timeout=timeout)
        if len(done) < 3:
            if waiter.done():  # exited, but something it started still holds the pipes
                await asyncio.wait(tasks[:2], timeout=max(0.0, min(1.0, timeout - (time.perf_counter() - t0))))
            if not all(t.done() for t in tasks[:2]) or not waiter.done():
                timed_out = not waiter.done() or time.perf_counter() - t0 >= timeout
                _killpg(proc)
                # The whole tree goes with the pid namespace; keep what it wrote before it died.
                await asyncio.wait([*tasks[:2], waiter], timeout=2.0)
    except BaseException:
        _killpg(proc)
        raise
    finally:
        for t in [*tasks, waiter]:
            if not t.done():
                t.cancel()
        for s in (proc.stdout, proc.stderr):
            if s is not None and hasattr(s, "_transport") and s._transport is not None:  # type: ignore[attr-defined]
                with contextlib.suppress(Exception):
                    s._transport.close()  # type: ignore[attr-defined]
    rc = proc.returncode
    if timed_out:
        code = TIMEOUT_EXIT
    elif rc is None:
        code = -1
    else:
        code = 128 - rc if rc < 0 else rc
    return ExecResult(code, out.text(), err.text(), timed_out, out.truncated or err.truncated,
                      time.perf_counter() - t0)


# -- the pool --------------------------------------------------------------------------------------
class ProcessPool(SandboxPool):
    kind = "local"

    def __init__(self, runtime: Local, *, run_id: str = "", size: int = 4) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.size = max(0, size)
        self.limits = runtime.limits()
        self.network = network_policy(runtime.network)
        assert isinstance(self.network, str)
        self.binds = tuple(str(Path(b).resolve()) for b in runtime.binds)
        self.stats = PoolStats()
        self.idle: list[ProcessSandbox] = []
        self.held: set[ProcessSandbox] = set()
        self._resets: set[asyncio.Task[None]] = set()
        self._next = 0
        self.dir = Path()
        self.iso = Isolation("none", None, None)
        self.closed = False

    def slot_uid(self, slot: int) -> int | None:
        if os.geteuid() != 0:
            return None
        return ROOT_UID_BASE + (os.getpid() % 100_000) * 64 + slot % 64

    async def start(self) -> ProcessPool:
        iso = detect(self.runtime.isolation)
        if iso.mode == "none":
            if self.runtime.isolation == "bwrap":
                raise SandboxError(f"Local(isolation='bwrap'): {iso.reason}; install bubblewrap "
                                   "(apt-get install bubblewrap) and allow user namespaces")
            if self.runtime.isolation == "auto":
                warn_once("local-isolation", f"wb.Local() sandboxes are NOT isolated on this machine ({iso.reason}): "
                          "commands run as plain processes that can read your files and use the network. "
                          "Install bubblewrap (apt-get install bubblewrap) or use --runtime docker.")
        for b in self.binds:
            if not os.path.exists(b):
                raise SandboxError(f"Local(binds=...): {b} does not exist")
        self.iso = iso
        self.dir = pool_dir("local")
        etc = self.dir / "etc"
        etc.mkdir(mode=0o755)
        (etc / "passwd").write_text(f"root:x:0:0:root:/root:/bin/sh\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:"
                                    "sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
        (etc / "group").write_text(f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n")
        for _ in range(self.size):
            self.idle.append(self._new())
        return self

    def _new(self) -> ProcessSandbox:
        sb = ProcessSandbox(self, self._next)
        self._next += 1
        sb.create()
        self.stats.created += 1
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
        sandbox.kill_all()
        if self.closed:
            return
        t = asyncio.ensure_future(asyncio.to_thread(self._reset, sandbox))
        self._resets.add(t)
        t.add_done_callback(self._resets.discard)

    def _reset(self, sb: ProcessSandbox) -> None:
        sb.work.wipe(0o755)
        sb.tmp.wipe(0o755)
        if not self.closed and len(self.idle) < self.size:
            self.idle.append(sb)
        else:
            rmtree(sb.work.path.parent)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sb in list(self.held):
            sb.kill_all()
            sb.closed = True
        if self._resets:
            await asyncio.gather(*self._resets, return_exceptions=True)
        self.idle.clear()
        self.held.clear()
        if self.dir != Path():
            await asyncio.to_thread(rmtree, self.dir)
