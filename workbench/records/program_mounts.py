"""What an agent program needs to see inside a local sandbox: the program itself and what it needs to
run, plus what the user binds; nothing else its command line happens to name.

A bare command name (``python3``, ``node``) is found on the sandbox's own ``PATH`` (the system folders);
an absolute path is a host path.

``wb.Program(["/path/.venv/bin/python", "/path/agent.py"])`` runs in the rollout's sandbox, which sees
only the system folders. So these are mounted read-only, at the same paths (under ``/host`` where a path
lies inside the sandbox's own ``/work`` or ``/tmp``: ``/tmp/x/agent.py`` is ``/host/tmp/x/agent.py``),
and the command line is rewritten to match:

- the executable ``argv[0]``, as given and as its symlinks resolve (an npm ``node_modules/.bin/claude``
  shim pointing at ``../@anthropic-ai/claude-code/bin/claude.exe``), with its package folder: the
  outermost ``node_modules`` it lies in, the virtual environment it belongs to (and the Python that
  environment was made from), or else its own folder and every ``node_modules`` above it (where Node
  looks for modules);
- the interpreter its ``#!`` line names, where the sandbox cannot find it by itself (a console script's
  virtual-environment Python, a ``node`` outside the system folders): then the command runs as
  ``INTERPRETER SCRIPT ARGS``;
- for an interpreter (``python``, ``node``, ``bash``, ...), the script it runs (its first argument that
  is not an option), with the same package folders;
- the program's ``binds``; an argument naming a path inside one is rewritten to where it appears.

Any other argument is passed as it is, even one that names an existing host path: a filesystem server
given ``/work`` serves the sandbox's own ``/work``, and a host folder is seen only when it is bound. A
runtime that cannot mount host paths (Docker) runs the command line as it is, with paths of its image.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

HOST_PREFIX = "/host"
#: Seen by every sandbox already (read-only system folders).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_OWN = ("/work", "/tmp")  # the sandbox's own folders: host paths there are mounted under /host
#: The sandbox's ``PATH`` (system folders only: what ``#!/usr/bin/env NAME`` finds inside).
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PYTHON = re.compile(r"^(python|pypy)[\d.]*$")
_INTERPRETER = re.compile(r"^(python|pypy)[\d.]*$|^(node|nodejs|bun|deno|ruby|perl|sh|bash|dash|zsh)$")
#: Interpreter options after which no script follows (the program is given inline or by module name).
_INLINE = frozenset({"-c", "-m", "-e", "--eval", "-p", "--print", "-"})


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + "/") for r in roots)


def inside(path: str) -> str:
    """Where the host path ``path`` appears inside a local sandbox."""
    return HOST_PREFIX + path if _under(path, _OWN) else path


def _host_file(arg: str) -> str | None:
    """The absolute host path ``arg`` names, if it is absolute and a file exists there."""
    return os.path.abspath(arg) if os.path.isabs(arg) and os.path.isfile(arg) else None


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


def _venv_of(path: str) -> str | None:
    """The virtual environment a file lies in (a console script in ``bin/``, a module in ``lib/``)."""
    for parent in list(Path(path).parents)[:6]:
        if (parent / "pyvenv.cfg").is_file():
            return str(parent)
    return None


def _package_folders(path: str) -> list[str]:
    """What a program file needs beside itself: its virtual environment, or the outermost
    ``node_modules`` it lies in, or else its folder and every ``node_modules`` above it."""
    venv = _venv_of(path)
    if venv is not None:
        python = next((str(p) for p in sorted((Path(venv) / "bin").glob("python*")) if _PYTHON.match(p.name)),
                      str(Path(venv) / "bin" / "python"))
        return _python_prefixes(python)
    parents = list(Path(path).parents)
    modules = [p for p in parents if p.name == "node_modules"]
    if modules:
        return [str(modules[-1])]
    return [str(Path(path).parent), *(str(p / "node_modules") for p in parents[1:] if (p / "node_modules").is_dir())]


def _needs(path: str) -> list[str]:
    """The host folders that let ``path`` (an executable or a script) run as given: its own folder as the
    path names it, and the package folders of what its symlinks resolve to."""
    given, real = os.path.abspath(path), os.path.realpath(path)
    if _PYTHON.match(Path(given).name):
        return _python_prefixes(given)
    out = _package_folders(given)
    if real != given:
        out += _package_folders(real)
    return out


def _shebang(path: str) -> tuple[str, list[str]] | None:
    """The interpreter and its arguments from a script's ``#!`` line."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    return (words[0], words[1:]) if words else None


def _interpreter(path: str) -> tuple[str, list[str], bool] | None:
    """The host interpreter a script's ``#!`` line names, where the sandbox does not have it already:
    (its path, its arguments, whether the command must name it because the line cannot work as written
    inside); None where the sandbox has it (or where the host does not either)."""
    found = _shebang(path)
    if found is None:
        return None
    interp, args = found
    if Path(interp).name == "env" and _under(interp, _SYSTEM):
        rest = [a for a in args if not a.startswith("-")]
        if not rest or args[0].startswith("-") or shutil.which(rest[0], path=SANDBOX_PATH):
            return None  # the sandbox's PATH finds it (or `env -S ...`: left as written)
        host = shutil.which(rest[0])
        return (os.path.abspath(host), args[1:], True) if host else None
    if _under(interp, _SYSTEM) or not os.path.exists(interp):
        return None
    return interp, args, inside(interp) != interp


@dataclass(slots=True)
class _Launch:
    mounts: list[str] = field(default_factory=list)  # host folders, read-only at inside(path)
    argv: list[str] = field(default_factory=list)  # the command line inside the sandbox


def _launch(argv: list[str], binds: list[str]) -> _Launch:
    plan = _Launch(argv=list(argv))
    head: list[str] = []
    exe = _host_file(argv[0])
    if exe is not None:
        plan.mounts += _needs(exe)
        plan.argv[0] = inside(exe)
        interp = _interpreter(exe)
        if interp is not None:
            plan.mounts += _needs(interp[0])
            if interp[2]:
                head = [inside(interp[0]), *interp[1]]
    if _INTERPRETER.match(Path(argv[0]).name):
        for i, a in enumerate(argv[1:], 1):
            if a in _INLINE:
                break
            if a.startswith("-"):
                continue
            script = _host_file(a)
            if script is not None:
                plan.mounts += _needs(script)
                plan.argv[i] = inside(script)
            break
    plan.mounts = [m for m in plan.mounts if os.path.exists(m)]
    bound = [os.path.abspath(b) for b in binds]
    plan.mounts += bound
    for i, a in enumerate(plan.argv[1:], 1):
        if os.path.isabs(a) and a == argv[i] and any(_under(os.path.abspath(a), (b,)) for b in bound):
            plan.argv[i] = inside(os.path.abspath(a))
    plan.argv = [*head, *plan.argv]
    return plan


def program_mounts(argv: list[str], binds: list[str]) -> list[str]:
    """``HOST`` or ``HOST:SANDBOX`` bind entries (``wb.Local(binds=...)`` syntax) for the program."""
    keep: list[str] = []
    for p in sorted(set(_launch(argv, binds).mounts), key=len):
        if _under(p, _SYSTEM) or p == "/" or any(_under(p, (k,)) for k in keep):
            continue
        keep.append(p)
    return [p if inside(p) == p else f"{p}:{inside(p)}" for p in keep]


def sandbox_argv(argv: list[str], kind: str, binds: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The command line as the sandbox must run it: host paths where the runtime mounts them."""
    if kind != "local":
        return list(argv)
    return _launch(list(argv), list(binds)).argv


__all__ = ["HOST_PREFIX", "SANDBOX_PATH", "inside", "program_mounts", "sandbox_argv"]
