"""Where Workbench keeps the user's data and config (XDG base directories)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "workbench"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "workbench"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "workbench"


def default_db() -> Path:
    env = os.environ.get("WORKBENCH_DB")
    return Path(env) if env else data_dir() / "workbench.db"


def user_env_dirs() -> list[Path]:
    """Directories searched for user environments, besides the bundled ones."""
    dirs = [data_dir() / "envs"]
    extra = os.environ.get("WORKBENCH_ENV_PATH")
    if extra:
        dirs = [Path(p) for p in extra.split(os.pathsep) if p] + dirs
    return dirs


def hub_dir() -> Path:
    """Where pulled environments live (``workbench hub pull``): ``installed/<name>+XXXXXXXX/`` each version's
    files and ``deps/``, ``records/<name>.json`` the version installed and where it came from, ``locks/``.
    Never the user's project environment."""
    return data_dir() / "hub"
