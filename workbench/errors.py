"""Errors a user can cause. Each carries one clear sentence for stderr (DESIGN.md conventions)."""

from __future__ import annotations


class WorkbenchError(Exception):
    """Base class for errors that are shown to the user as one line, without a traceback."""

    exit_code = 2


class EnvLoadError(WorkbenchError):
    """An environment could not be found, imported or built."""


class RubricError(EnvLoadError):
    """A reward or metric function is malformed (for example it asks for an unknown argument)."""


class ConfigError(WorkbenchError):
    """A flag, config value or JSON argument is invalid."""


class StoreError(WorkbenchError):
    """The database file is not a usable Workbench store."""


class EndpointError(WorkbenchError):
    """The model endpoint cannot be used at all (unreachable, bad key, unknown model)."""


class NotFoundError(WorkbenchError):
    """A run, rollout or other record that the user named does not exist."""
