"""Environments written for another framework, adopted as ``wb.Environment`` objects.

An adapter is a ``workbench.env_adapters`` plugin (``workbench/plugins.py``): discovery asks each one
registered whether it adopts what a ``load_environment`` returned, and what a failure to import or build
an environment means for it (a missing extra, a download that failed, an API it does not support). None is
bundled: verifiers environments, which cannot share Workbench's interpreter, are ``workbench.env_formats``
plugins run in workers of their own (``workbench/frameworks``).
"""

from __future__ import annotations

from typing import Any, Protocol, TypeGuard, runtime_checkable

from workbench import plugins
from workbench.authoring.environment import Environment


@runtime_checkable
class EnvAdapter(Protocol):
    """What a ``workbench.env_adapters`` plugin names."""

    def adopts(self, obj: Any) -> bool:
        """Whether ``obj`` (what a ``load_environment`` returned) is an environment of this framework."""
        ...

    def wrap(self, obj: Any, name: str) -> Environment:
        """``obj``, which this adapter adopts, as a ``wb.Environment`` named ``name``."""
        ...

    def unsupported(self, obj: Any) -> str | None:
        """Why ``obj`` (a module, or what its ``load_environment`` returned) is of a kind of this framework
        that cannot be adopted, and what to do; None if it is not."""
        ...

    def missing_extra(self, error: BaseException) -> str | None:
        """What to install, if ``error`` is this framework (or a package it needs) not being installed."""
        ...

    def download_error(self, error: BaseException) -> str | None:
        """What went wrong, if ``error`` is this framework failing to download an environment's data."""
        ...


def is_env_adapter(found: object) -> TypeGuard[EnvAdapter]:
    return isinstance(found, EnvAdapter)


def adapters() -> list[EnvAdapter]:
    """The registered adapters, by name."""
    return [plugins.load("env_adapters", name, is_env_adapter) for name in plugins.names("env_adapters")]


def adopt(obj: Any, name: str) -> Environment | None:
    """``obj`` as a ``wb.Environment`` named ``name``, by the first adapter that adopts it; None if none does."""
    adapter = next((a for a in adapters() if a.adopts(obj)), None)
    return adapter.wrap(obj, name) if adapter else None


def unsupported(obj: Any) -> str | None:
    """The first adapter's word on why ``obj`` cannot be adopted, if one has it."""
    return next((why for a in adapters() if (why := a.unsupported(obj)) is not None), None)


def missing_extra(error: BaseException) -> str | None:
    """The first adapter's word on what to install for ``error``, if one has it."""
    return next((msg for a in adapters() if (msg := a.missing_extra(error)) is not None), None)


def download_error(error: BaseException) -> str | None:
    """The first adapter's word on a failed download in ``error``, if one has it."""
    return next((msg for a in adapters() if (msg := a.download_error(error)) is not None), None)
