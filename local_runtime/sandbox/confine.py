"""Confining processes another program starts: the ``bwrap`` arguments that run one command in a sandbox of
``wb.Local()``'s kind, for a framework whose agents Workbench does not start itself (verifiers v1's local
runtime). The caller adds ``--chdir DIR -- ARGV`` and starts it with the environment the command is to see.

What such a command sees: the read-only system folders of every local sandbox (``/usr``, the library links, a
few files of ``/etc``), the folders it is given read-only and read-write (each at its own path), its own
``/proc``, ``/dev`` and ``/tmp`` (empty, or a host folder the caller names), its own PID, IPC and UTS
namespaces, no capabilities; never
``$HOME``, the project, or another process of the machine. It shares the machine's network: the framework's
agents reach the framework's own servers on loopback (its interception proxy and tool servers) and the package
index (for the programs' dependencies). As root it runs as root of no user namespace with every capability
dropped; otherwise in a user namespace as uid 1000 (the caller's files are that uid's).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from workbench_local.sandbox.bwrap import SANDBOX_UID, _ro_bind, _root_mounts, detect

from workbench.authoring.runtimes import Local
from workbench.authoring.sandbox import SandboxError


def confinement(runtime: Local, *, read_only: Sequence[str | Path], writable: Sequence[str | Path],
                tmp: str | Path | None = None) -> list[str]:
    """The ``bwrap`` arguments up to the command's folder, or [] where ``runtime`` asks for no isolation
    (``isolation="none"``, or ``WORKBENCH_SANDBOX_ISOLATION=none``). ``tmp``: the host folder that is the
    command's ``/tmp`` (shared by the commands given it), else an empty one of its own. A machine that cannot
    isolate is refused in one line."""
    iso = detect(runtime.isolation)
    if iso.mode == "none":
        if runtime.isolation == "none" or os.environ.get("WORKBENCH_SANDBOX_ISOLATION") == "none":
            return []
        raise SandboxError(f"wb.Local() cannot isolate commands on this machine ({iso.reason}); install "
                           "bubblewrap (apt-get install bubblewrap) and allow user namespaces, or set "
                           "WORKBENCH_SANDBOX_ISOLATION=none to run them unconfined")
    for p in [*read_only, *writable, *([tmp] if tmp is not None else [])]:
        if not os.path.exists(p):
            raise SandboxError(f"cannot confine a command with {p}: it does not exist")
    a = [iso.bwrap or "bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
         "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if os.geteuid() != 0:
        a += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    a += _root_mounts()
    a += ["--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf", "--ro-bind-try", "/etc/hosts", "/etc/hosts",
          "--ro-bind-try", "/etc/passwd", "/etc/passwd", "--ro-bind-try", "/etc/group", "/etc/group"]
    own_tmp = ["--bind", str(tmp), "/tmp"] if tmp is not None else ["--tmpfs", "/tmp"]
    a += ["--proc", "/proc", "--dev", "/dev", *own_tmp]
    made: set[str] = set()
    for p in _outermost(read_only):
        a += _ro_bind(p, p)
        made.add(p)
    for p in _outermost(writable):
        a += [*_dirs_above(p, made), "--bind", p, p]
    return [*a, "--remount-ro", "/", "--cap-drop", "ALL"]


def _outermost(paths: Sequence[str | Path]) -> list[str]:
    """The resolved paths, less those inside another of them (a bind of the outer one holds them)."""
    resolved = sorted({str(Path(p).resolve()) for p in paths})
    return [p for p in resolved if not any(p.startswith(q + "/") for q in resolved if q != p)]


def _dirs_above(path: str, made: set[str]) -> list[str]:
    """``--dir`` for the folders above a writable bind that the sandbox's root does not have yet."""
    out = []
    parent = os.path.dirname(path)
    chain = []
    while parent not in ("/", "") and parent not in made and not any(parent.startswith(m + "/") for m in made):
        chain.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(chain):
        if d.split("/")[1] in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev"):
            continue
        made.add(d)
        out += ["--perms", "0755", "--dir", d]
    return out
