"""What an agent program needs to see inside a local sandbox: the host paths its command line names.

A bare command name (``python3``) is found on the sandbox's own ``PATH`` (the system folders); an
absolute path is a host path.

``wb.Program(["/path/.venv/bin/python", "/path/agent.py"])`` runs in the rollout's sandbox, which sees
only the system folders. So the interpreter (and, for a virtual environment, the environment and the
Python it was made from), the files its arguments name, and the program's own ``binds`` are mounted
read-only at the same paths, except where a path lies inside the sandbox's own ``/work`` or ``/tmp``:
those appear under ``/host`` (``/tmp/x/agent.py`` is ``/host/tmp/x/agent.py``), and the command line is
rewritten to match. A runtime that cannot mount host paths (Docker) runs the command line as it is,
with paths of its image.
"""

from __future__ import annotations

import os
from pathlib import Path

HOST_PREFIX = "/host"
#: Seen by every sandbox already (read-only system folders).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_OWN = ("/work", "/tmp")  # the sandbox's own folders: host paths there are mounted under /host


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def inside(path: str) -> str:
    """Where the host path ``path`` appears inside a local sandbox."""
    return HOST_PREFIX + path if _under(path, _OWN) else path


def _executable(argv0: str) -> str | None:
    """The host path of an absolute ``argv[0]``; a bare name (``python3``) is the sandbox's own."""
    return os.path.abspath(argv0) if os.path.isabs(argv0) and os.path.exists(argv0) else None


def _python_prefixes(exe: str) -> list[str]:
    """A Python interpreter's folders: its virtual environment and the installation it was made from."""
    out = []
    venv = Path(exe).parent.parent
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        out.append(str(venv))
        for line in cfg.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                out.append(str(Path(value.strip()).parent))
    real = os.path.realpath(exe)
    out.append(str(Path(real).parent.parent) if Path(real).parent.name == "bin" else str(Path(real).parent))
    return out


def program_mounts(argv: list[str], binds: list[str]) -> list[str]:
    """``HOST`` or ``HOST:SANDBOX`` bind entries (``wb.Local(binds=...)`` syntax) for the program."""
    paths: list[str] = []
    exe = _executable(argv[0])
    if exe is not None:
        paths += _python_prefixes(exe) if Path(exe).name.startswith("python") else [str(Path(exe).parent)]
    for a in argv[1:]:
        if os.path.isabs(a) and os.path.exists(a):
            paths.append(a if os.path.isdir(a) else str(Path(a).parent))
    paths += [os.path.abspath(b) for b in binds]
    keep: list[str] = []
    for p in sorted(set(paths), key=len):
        if _under(p, _SYSTEM) or p == "/" or any(_under(p, (k,)) for k in keep):
            continue
        keep.append(p)
    return [p if inside(p) == p else f"{p}:{inside(p)}" for p in keep]


def sandbox_argv(argv: list[str], kind: str) -> list[str]:
    """The command line as the sandbox must run it: host paths where the runtime mounts them."""
    if kind != "local":
        return list(argv)
    exe = _executable(argv[0])
    out = [inside(exe) if exe else argv[0]]
    out += [inside(os.path.abspath(a)) if os.path.isabs(a) and os.path.exists(a) else a for a in argv[1:]]
    return out


__all__ = ["HOST_PREFIX", "inside", "program_mounts", "sandbox_argv"]
