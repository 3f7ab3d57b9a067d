"""Environments written in another format than a Python module: a folder of files (a Harbor task), a
server (an OpenEnv environment), ... Each is a ``workbench.env_formats`` plugin (``workbench/plugins.py``).

Discovery asks each registered format, before it looks for a Python file or package, whether it reads what the
user named (``claims``); the first that does turns it into an :class:`~workbench.authoring.discovery.EnvRef`
whose ``dialect`` is the format's name, and builds the environment from it (``load``). The environment that
comes back is an ordinary ``wb.Environment``: every command (``eval``, ``validate``, ``probe``, ``train``,
``rescore``, the app) runs it as it runs any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, TypeGuard, runtime_checkable

from workbench import plugins
from workbench.authoring.environment import Environment


@runtime_checkable
class EnvFormat(Protocol):
    """What a ``workbench.env_formats`` plugin names."""

    #: The dialect's name, shown beside the environment (``harbor``, ``openenv``).
    name: str

    def claims(self, spec: str) -> Path | str | None:
        """Where the environment ``spec`` names lives (a resolved path, or a URL) if this format reads it;
        None if it does not."""
        ...

    def env_name(self, where: Path | str) -> str:
        """The environment's name for what ``claims`` returned."""
        ...

    def load(self, where: Path | str, env_args: dict[str, Any]) -> Environment:
        """The environment at ``where``; an ``EnvLoadError`` (one line) when it cannot be read."""
        ...


@runtime_checkable
class VersionedEnvFormat(Protocol):
    """A format that gives its environments' versions itself (optional: without ``version``, or where it gives
    an empty text, an environment is versioned by its folder's files, or else by the text that names it)."""

    def version(self, where: Path | str, env: Environment) -> str:
        """The version of the environment ``load`` made from ``where``: it changes when what the environment
        does may have changed (for a server, what it publishes), and only then."""
        ...


def version_of(fmt: EnvFormat, where: Path | str, env: Environment) -> str | None:
    """The version ``fmt`` gives the environment, or None when the format gives none."""
    if not isinstance(fmt, VersionedEnvFormat):
        return None
    version = fmt.version(where, env)
    return version if isinstance(version, str) and version else None


def is_env_format(found: object) -> TypeGuard[EnvFormat]:
    return isinstance(found, EnvFormat)


def formats() -> list[EnvFormat]:
    """The registered formats, by name."""
    return [plugins.load("env_formats", name, is_env_format) for name in plugins.names("env_formats")]


def find(name: str) -> EnvFormat:
    return plugins.load("env_formats", name, is_env_format)


def claim(spec: str) -> tuple[EnvFormat, Path | str] | None:
    """The first format that reads ``spec``, and where it found it."""
    for f in formats():
        where = f.claims(spec)
        if where is not None:
            return f, where
    return None
