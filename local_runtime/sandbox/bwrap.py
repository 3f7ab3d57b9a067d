"""Bubblewrap for ``wb.Local()``: finding out how this machine can isolate a sandbox, and the ``bwrap``
command line (namespaces, a read-only root of system folders, the sandbox's own ``/work`` and ``/tmp``)
plus the limits (``prlimit`` arguments, or a ``preexec_fn`` where ``prlimit`` is missing). Memory is
bounded by the sandbox's memory cgroup (``cgroup.py``), or per process where none can be made."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench_local.sandbox.fs import PATH

from workbench.authoring.sandbox import BRIDGE_DIR, WORKDIR, Limits

SANDBOX_UID = 1000  # the uid processes see inside the sandbox
#: host uids for sandboxes when Workbench runs as root (one per slot, so limits and files are per sandbox)
ROOT_UID_BASE = 1_300_000_000
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
    # /etc holds only the binds below; made searchable by all first (bubblewrap running as root makes the
    # folders it creates 0700, and the command runs as the sandbox's uid).
    args = ["--ro-bind", "/usr", "/usr", "--perms", "0755", "--dir", "/etc"]
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
        argv = bwrap_argv(bwrap, mode, Path(d), Path(d), Path(d), "none", (), {"PATH": PATH}, WORKDIR,
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


_MADE: tuple[str, ...] = ("/usr", "/etc", "/proc", "/dev", "/tmp", WORKDIR)


def _ro_bind(src: str, dst: str) -> list[str]:
    """A read-only bind, its missing parent folders made searchable by all first (bubblewrap running as
    root would make them 0700, and the command runs as the sandbox's uid)."""
    a: list[str] = []
    parent = os.path.dirname(dst)
    chain = []
    # Up to the first folder that exists already: a mount of its own, or inside one the host fills
    # (/usr); inside the sandbox's own /tmp and workdir, the folders up to them are made here.
    own = any(parent == m or parent.startswith(m + "/") for m in ("/tmp", WORKDIR))
    while parent not in ("/", "") and parent not in _MADE and (
            own or not any(parent.startswith(m + "/") for m in _MADE)):
        chain.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(chain):
        a += ["--perms", "0755", "--dir", d]
    return [*a, "--ro-bind", src, dst]


def reachable_by_others(path: str) -> bool:
    """Whether a uid other than the owner's can reach ``path`` (every folder above it searchable by all):
    an unprivileged sandbox uid must, to bind it."""
    p = os.path.abspath(path)
    parts = p.split("/")
    for i in range(2, len(parts) + 1):
        d = "/".join(parts[:i]) or "/"
        try:
            st = os.stat(d)
        except OSError:
            return False
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return False
    return True


def bwrap_argv(bwrap: str, mode: str, work: Path, tmp: Path, etc: Path, network: str,
               binds: Sequence[tuple[str, str]],
                env: Mapping[str, str], cwd: str, argv: list[str], *, as_pid_1: bool = False,
                bridge: Path | None = None) -> list[str]:
    """``as_pid_1``: the command is the namespace's init (the exec agent): a signal from inside the sandbox
    cannot kill or stop it, and the namespace ends with it."""
    if mode == "setpriv":  # root without user namespaces: every other namespace, the uid switch comes later
        a = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if network != "host":
            a.append("--unshare-net")
    else:
        a = [bwrap, "--unshare-all"]
        if network == "host":
            a.append("--share-net")
    a += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if as_pid_1:
        a.append("--as-pid-1")
    if mode == "userns":
        a += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    a += _root_mounts()
    for name in ("passwd", "group", "hosts"):
        if (etc / name).exists():
            a += ["--ro-bind", str(etc / name), f"/etc/{name}"]
    if network == "host":
        a += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf"]
    late = []
    for src, dst in binds:  # (host path, sandbox path)
        if dst == WORKDIR or dst.startswith((WORKDIR + "/", "/tmp/")) or dst == "/tmp":
            late.append((src, dst))  # inside the sandbox's own folders: mounted over them, below
        else:
            a += _ro_bind(src, dst)
    if bridge is not None:
        a += _ro_bind(str(bridge), BRIDGE_DIR)
    a += ["--proc", "/proc", "--dev", "/dev"]
    if as_pid_1:  # a namespace that serves many commands and rollouts: /dev must not keep what one left
        a += ["--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    a += ["--bind", str(tmp), "/tmp", "--bind", str(work), WORKDIR]
    for src, dst in late:
        a += _ro_bind(src, dst)
    a += ["--remount-ro", "/", "--chdir", cwd, "--clearenv"]
    for k, v in env.items():
        a += ["--setenv", k, v]
    if mode == "userns":
        a += ["--cap-drop", "ALL"]
    return [*a, "--", *argv]


def sandbox_python() -> str:
    """A ``python3`` the sandbox sees (under ``/usr``, mounted read-only) to run the exec agent, or ''."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"):
        real = os.path.realpath(cand)
        if os.path.isfile(real) and os.access(real, os.X_OK) and real.startswith("/usr/"):
            return cand
    return ""


def prlimit_args(prlimit: str, lim: Limits, *, nproc: bool, data: bool) -> list[str]:
    """``data``: bound memory per process with ``RLIMIT_DATA`` (where the sandbox has no memory cgroup)."""
    mem, fsize, cpu = lim.memory_mb << 20, lim.file_size_mb << 20, int(lim.cpu_seconds)
    args = [prlimit, f"--cpu={cpu}:{cpu + 5}", f"--fsize={fsize}:{fsize}", "--core=0:0"]
    if data:
        args.append(f"--data={mem}:{mem}")
    if nproc:
        args.append(f"--nproc={lim.pids}:{lim.pids}")
    return [*args, "--"]


def limits_preexec(lim: Limits, uid: int | None, *, rlimits: bool, nproc: bool, data: bool
                   ) -> Callable[[], None]:
    """The fallback when ``prlimit``/``setpriv`` are missing: set limits and switch uid in the child."""
    cpu, mem, fsize, pids = int(lim.cpu_seconds), lim.memory_mb << 20, lim.file_size_mb << 20, lim.pids
    libc = _libc()

    def fn() -> None:
        if rlimits:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
            if data:
                resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
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


