"""uv, the resolver and installer the hub drives: ``uv publish`` uploads, ``uv pip compile`` resolves an
environment's declared requirements into its lock, ``uv pip install --target`` puts a pulled environment's
dependencies into its own folder (never the user's project environment). uv comes with Workbench (the ``uv``
package). Given an index, uv uses that one alone (its configuration files are ignored); without one, uv's own
configuration decides (PyPI unless it says otherwise)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

from workbench.errors import ConfigError, EndpointError
from workbench.packaging.indexes import Index

TIMEOUT_S = 600.0


def uv_command() -> list[str]:
    try:
        from uv import find_uv_bin

        return [find_uv_bin()]
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return [found]
    raise ConfigError("the hub needs uv (`pip install uv`), which resolves and installs environments' dependencies")


def _with_auth(url: str, index: Index | None) -> str:
    if index is None or index.auth is None:
        return url
    p = urlsplit(url)
    user, password = (quote(x, safe="") for x in index.auth)
    return urlunsplit((p.scheme, f"{user}:{password}@{p.netloc}", p.path, p.query, p.fragment))


def _run(args: list[str], index: Index | None, what: str) -> str:
    env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
    if index is not None:  # only that index (in the environment, so a password never shows in a process listing)
        env.update(UV_INDEX_URL=_with_auth(index.url, index), UV_NO_CONFIG="1")
        env.pop("UV_EXTRA_INDEX_URL", None)
    try:
        p = subprocess.run([*uv_command(), *args], env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise EndpointError(f"{what} did not finish in {TIMEOUT_S:.0f} s") from None
    if p.returncode != 0:
        lines = [ln.strip() for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
        why = " ".join(lines[-4:]).replace("×", "").replace("╰─▶", "").strip() or f"uv exited {p.returncode}"
        raise EndpointError(f"{what} failed: {why}")
    return p.stdout


def compile_lock(requirements: list[str], index: Index | None, python: str | None = None) -> list[str]:
    """``requirements`` resolved (transitive ones included) into ``name==version`` pins, sorted."""
    if not requirements:
        return []
    import tempfile

    with tempfile.TemporaryDirectory(prefix="workbench-lock-") as tmp:
        src = Path(tmp) / "requirements.in"
        src.write_text("".join(f"{r}\n" for r in requirements))
        out = _run(["pip", "compile", str(src), "--quiet", "--no-header", "--no-annotate", "--no-strip-markers",
                    "--python-version", python or f"{sys.version_info.major}.{sys.version_info.minor}"],
                   index, "resolving the environment's requirements with uv")
    return sorted(ln.strip() for ln in out.splitlines() if ln.strip() and not ln.lstrip().startswith("#"))


def install_target(lock: list[str], target: Path, index: Index | None) -> None:
    """Install the pinned ``lock`` (no other resolution) into ``target``."""
    if not lock:
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="workbench-install-") as tmp:
        src = Path(tmp) / "requirements.lock"
        src.write_text("".join(f"{pin}\n" for pin in lock))
        _run(["pip", "install", "--quiet", "--no-deps", "--target", str(target), "--python", sys.executable,
              "-r", str(src)], index, f"installing the environment's dependencies into {target}")


__all__ = ["compile_lock", "install_target", "uv_command"]
