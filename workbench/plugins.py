"""The registry: where the domain finds what lives above it.

Sandbox runtimes, the pools that open their sandboxes, the default model endpoint, the trainer, launch
backends, tokenizers and environment adapters are *plugins*: each kind is an entry-point group (``workbench.runtimes``,
``workbench.sandbox_pools``, ...), and the domain looks a name up here instead of importing the module
that implements it. The bundled implementations (``local_runtime``, ``cloud_runtime``) register
themselves in ``pyproject.toml`` exactly as a third-party package registers its own::

    [project.entry-points."workbench.runtimes"]
    firecracker = "my_package.runtime:Firecracker"     # a wb.Runtime subclass: --runtime firecracker

Environments themselves are found the same way (``workbench.environments``, see ``discovery``).

Each group's objects have a type, declared beside the code that uses them (:class:`~workbench.training.
backends.LaunchBackend`, a ``wb.Runtime`` subclass, ...). :func:`load` takes the test of that type and
returns the plugin as that type, or raises :class:`PluginError` naming what the entry point is instead::

    backend = plugins.load("backends", "modal", is_launch_backend)   # typed LaunchBackend
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from functools import cache
from importlib import metadata
from typing import TypeGuard, TypeVar, overload

from workbench.errors import ConfigError

T = TypeVar("T")

#: Each kind of plugin, with what its entry points name.
KINDS: dict[str, str] = {
    "runtimes": "a wb.Runtime subclass, selected by --runtime NAME[:ARG]",
    "sandbox_pools": "a SandboxPool class opening the sandboxes of the runtime kind of the same name",
    "endpoints": "an object with ensure(model) -> (base_url, model): the model server used with no --base-url",
    "trainers": "a trainer plugin: its config defaults and checks, and the roles `workbench train` runs",
    "backends": "a launch backend for `workbench launch --backend NAME`",
    "tokenizers": "a function loading a model's tokenizer offline, and finding a served model's one",
    "env_adapters": "an adapter adopting another framework's environments as wb.Environments (EnvAdapter)",
    "env_formats": "a reader of environments that are not Python modules (a Harbor task folder, ...) (EnvFormat)",
}


class PluginError(ConfigError):
    """A plugin is not registered, or its entry point cannot be loaded."""


def group(kind: str) -> str:
    if kind not in KINDS:
        raise KeyError(f"unknown plugin kind {kind!r}; kinds: {', '.join(KINDS)}")
    return f"workbench.{kind}"


@cache
def _entry_points(kind: str) -> dict[str, metadata.EntryPoint]:
    found: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=group(kind)):
        found.setdefault(ep.name, ep)  # the first on sys.path wins, as for imports
    return found


def names(kind: str) -> list[str]:
    """The registered names of one kind, sorted."""
    return sorted(_entry_points(kind))


def available(kind: str, name: str) -> bool:
    return name in _entry_points(kind)


@overload
def load(kind: str, name: str) -> object: ...
@overload
def load(kind: str, name: str, conforms: Callable[[object], TypeGuard[T]]) -> T: ...
def load(kind: str, name: str, conforms: Callable[[object], bool] | None = None) -> object:
    """The object a plugin's entry point names, typed by ``conforms`` (the test of its group's type); one
    clear :class:`PluginError` when it cannot be had or is not of that type."""
    found = _load(kind, name)
    if conforms is not None and not conforms(found):
        raise PluginError(f"the {kind[:-1].replace('_', ' ')} {name!r} ({_entry_points(kind)[name].value}) is "
                          f"a {type(found).__name__}, which is not what a workbench.{kind} plugin must be: "
                          f"{KINDS[kind]}")
    return found


@cache
def _load(kind: str, name: str) -> object:
    eps = _entry_points(kind)
    ep = eps.get(name)
    if ep is None:
        close = difflib.get_close_matches(name, list(eps), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        have = ", ".join(sorted(eps)) or "none"
        raise PluginError(f"no {kind[:-1].replace('_', ' ')} named {name!r} is installed{hint}; registered: {have}")
    try:
        found: object = ep.load()
    except ImportError as e:
        raise PluginError(f"the {kind[:-1].replace('_', ' ')} {name!r} ({ep.value}) cannot be imported here "
                          f"({e}); install what it needs (for the bundled ones: pip install 'rl-workbench[local]')"
                          ) from None
    return found


def refresh() -> None:
    """Forget what was found (after installing a plugin into the running interpreter)."""
    _entry_points.cache_clear()
    _load.cache_clear()


__all__ = ["KINDS", "PluginError", "available", "group", "load", "names", "refresh"]
