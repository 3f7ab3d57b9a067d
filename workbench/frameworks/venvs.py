"""Isolated Python environments for other frameworks, one per framework version.

Two generations of a framework often cannot share one interpreter (verifiers 0.3 needs ``mcp<2``, verifiers
0.4 pins ``mcp==2.0.0``), and neither can live in Workbench's own environment. A :class:`FrameworkEnv` is a
virtual environment that uv builds under the cache directory from a fixed requirement list, once; an
environment of that framework then runs in a worker process of that interpreter (``workbench.frameworks.bridge``).

The folder's name carries a hash of the requirements and the Python version, so a changed requirement is a
new folder; a build goes into a temporary sibling and is renamed into place only when it completed, so a
half-built environment is never used. A file lock keeps two processes from building the same one.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from workbench.config import paths
from workbench.errors import EnvLoadError

BUILD_TIMEOUT_S = 900.0
#: How the environments are laid out (relocatable, built beside and renamed, their modules compiled to bytecode
#: when installed, so that no start compiles them, where ``PYTHONDONTWRITEBYTECODE`` keeps it from caching them):
#: a new layout is a new folder.
LAYOUT = "3"
_DONE = ".workbench-complete"


@dataclass(frozen=True, slots=True)
class FrameworkEnv:
    """A framework's isolated environment: ``name`` (``verifiers``), its requirement pins, its interpreter."""

    name: str
    requirements: tuple[str, ...]
    base_python: str = sys.executable

    @property
    def key(self) -> str:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        digest = hashlib.sha256("\n".join((LAYOUT, version, *sorted(self.requirements))).encode()).hexdigest()[:12]
        return f"{self.name}-{digest}"

    @property
    def root(self) -> Path:
        return frameworks_dir() / self.key

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def ready(self) -> bool:
        return (self.root / _DONE).is_file() and self.python.exists()

    def ensure(self) -> Path:
        """The interpreter of this environment, built first if it is not there yet."""
        if self.ready():
            return self.python
        frameworks_dir().mkdir(parents=True, exist_ok=True)
        with open(frameworks_dir() / f".{self.key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not self.ready():
                self._build()
        return self.python

    def _build(self) -> None:
        from workbench.packaging.uv import uv_command

        tmp = self.root.with_name(f".{self.key}.building-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
        env.pop("VIRTUAL_ENV", None)
        steps = [
            ["venv", "--quiet", "--relocatable", "--python", self.base_python, str(tmp)],
            ["pip", "install", "--quiet", "--compile-bytecode", "--python", str(tmp / "bin" / "python"),
             *self.requirements],
        ]
        try:
            for args in steps:
                try:
                    p = subprocess.run([*uv_command(), *args], env=env, capture_output=True, text=True,
                                       timeout=BUILD_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise EnvLoadError(f"building the {self.name} environment ({' '.join(self.requirements)}) "
                                       f"did not finish in {BUILD_TIMEOUT_S:.0f} s") from None
                if p.returncode != 0:
                    lines = [ln.strip() for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
                    why = " ".join(lines[-3:]).replace("×", "").replace("╰─▶", "").strip() or f"uv exited {p.returncode}"
                    raise EnvLoadError(f"cannot build the {self.name} environment "
                                       f"({' '.join(self.requirements)}): {why}")
            (tmp / _DONE).write_text(self._mark())
            shutil.rmtree(self.root, ignore_errors=True)
            tmp.rename(self.root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._prune_older()

    def _mark(self) -> str:
        """What the completion mark records: the layout, the Python version and the requirements."""
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return "".join(f"{line}\n" for line in (f"layout {LAYOUT}", f"python {version}", *self.requirements))

    def _prune_older(self) -> None:
        """Remove this environment's builds of an older layout (same requirements, another folder): a new
        layout would otherwise leave each old build behind, hundreds of MB each."""
        ours = {ln for ln in self._mark().splitlines() if not ln.startswith("layout ")}
        for other in frameworks_dir().glob(f"{self.name}-*"):
            if other == self.root or not (other / _DONE).is_file():
                continue
            try:
                theirs = {ln for ln in (other / _DONE).read_text().splitlines() if not ln.startswith("layout ")}
            except OSError:
                continue
            # a mark of the first layout lists the requirements alone (built with this same Python)
            if theirs | {ln for ln in ours if ln.startswith("python ")} == ours:
                shutil.rmtree(other, ignore_errors=True)


def frameworks_dir() -> Path:
    """Where the frameworks' environments live (``WORKBENCH_FRAMEWORKS_DIR``, else under the cache directory)."""
    override = os.environ.get("WORKBENCH_FRAMEWORKS_DIR")
    return Path(override).expanduser() if override else paths.cache_dir() / "frameworks"


__all__ = ["FrameworkEnv", "frameworks_dir"]
