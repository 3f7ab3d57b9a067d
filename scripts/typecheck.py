#!/usr/bin/env python3
"""Type-check Workbench with mypy: `scripts/typecheck.py [MYPY ARGS]` (mypy from the project's `.venv`).

The folders install under other names (setup.py: `app/` is `workbench_app`, ...) through setuptools'
editable finder, which mypy cannot follow. This script gives mypy a directory of symlinks named by the
installed names, pointing at the folders, as its `mypy_path`, and checks the installed packages
(`-p workbench -p workbench_app ...`) with the settings of `[tool.mypy]` in pyproject.toml. Paths in
its report are the repository's (`app/...`, not the link's). The incremental cache lives in the
virtual environment (outside the repository), so a second run checks only what changed.

Arguments go to mypy; with none it checks every package. Exit status: mypy's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECKED = ["workbench", "workbench_app", "workbench_local", "workbench_cloud"]


def folders() -> dict[str, str]:
    """Installed name -> folder, as setup.py maps them."""
    sys.path.insert(0, str(ROOT))
    try:
        from setup import FOLDERS
    finally:
        sys.path.pop(0)
    return dict(FOLDERS)


def link_tree(cache_dir: Path) -> Path:
    """A directory holding one symlink per installed name, each pointing at its folder."""
    links = cache_dir / "packages"
    links.mkdir(parents=True, exist_ok=True)
    for name, folder in folders().items():
        link = links / name
        target = ROOT / folder
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return links


def interpreter() -> tuple[str, Path]:
    """(the Python that has mypy, its environment): this one, else the project's virtual environment."""
    if importlib.util.find_spec("mypy") is not None:
        return sys.executable, Path(sys.prefix)
    venv = Path(os.environ.get("WORKBENCH_VENV") or ROOT / ".venv")
    return str(venv / "bin" / "python"), venv


def main(argv: list[str]) -> int:
    python, env_dir = interpreter()
    cache_dir = Path(os.environ.get("WORKBENCH_MYPY_CACHE") or env_dir / "mypy_cache")
    links = link_tree(cache_dir)
    targets = argv or [arg for name in CHECKED for arg in ("-p", name)]
    command = [python, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(cache_dir / "incremental"), *targets]
    env = {**os.environ, "MYPYPATH": str(links)}
    result = subprocess.run(command, cwd=links, env=env, capture_output=True, text=True)
    # mypy names a file by the link it came through (workbench_app/x.py): name the folder instead.
    names = folders()
    pattern = re.compile(r"^(" + "|".join(re.escape(name) for name in names) + r")/", re.MULTILINE)
    for stream, text in ((sys.stdout, result.stdout), (sys.stderr, result.stderr)):
        stream.write(pattern.sub(lambda match: names[match.group(1)] + "/", text))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
