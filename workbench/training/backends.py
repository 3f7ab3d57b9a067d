"""Launch backends: where ``workbench launch`` (and the app's launch dialog) runs the pipeline.

A backend is a ``workbench.backends`` plugin (the bundled ``local`` and ``modal`` live in
``cloud_runtime``). ``takes`` says what it launches: ``"run"``, a resolved ``RunConfig`` (the local
backend, on this machine's CPU), or ``"launch"``, a ``LaunchConfig`` with its cloud ``plan``.
``notice`` is said before launching (empty for none); ``label`` is how a chooser (the app's launch
dialog) names it. ``preflight`` answers what a launch of it would cost and whether the budgets, the
memory fit and its credentials allow it, before anything starts (``workbench.usecases.launch``).
A backend that runs a trainer of several nodes (``workbench launch --nodes N``) says how many at most in
an ``int`` attribute ``max_trainer_nodes``; one without it runs a one-node trainer only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, runtime_checkable

if TYPE_CHECKING:
    import sqlite3

    from workbench.store import Store


class Forecast(Protocol):
    """A backend's forecast of a launch. Backends add ``budget_problem`` (the budgets' part of the refusal),
    ``plan`` (the cluster plan, or None) and ``launch`` (the config ``launch`` takes, where planned)."""

    @property
    def refusal(self) -> str | None:
        """The sentence a launch is refused with; None: it may start."""
        ...


class Launched(Protocol):
    """What a launch ran."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def bundle_hash(self) -> str: ...
    @property
    def spent_usd(self) -> float: ...
    @property
    def summary(self) -> dict[str, Any]: ...


@runtime_checkable
class LaunchBackend(Protocol):
    """What a ``workbench.backends`` plugin names."""

    name: str
    takes: str  # "run" | "launch"
    notice: str
    label: str

    def preflight(self, conn: sqlite3.Connection, *, env: str | None, config_file: str | None = None,
                  max_steps: int | None = None, budget_usd: float | None = None,
                  overrides: dict[str, Any] | None = None) -> Forecast:
        """The forecast of a launch with these inputs, as the backend judges it. Reads the store through
        ``conn``; starts nothing."""
        ...

    def check_credentials(self) -> None:
        """Raise a ``WorkbenchError`` naming the login command when what the backend needs is missing."""
        ...

    def launch(self, store: Store, run: object, plan: object = None, *, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
               on_start: Callable[[str], None] | None = None) -> Launched:
        """Run the pipeline to its end, streaming into ``store``. ``run`` is what ``takes`` names (a resolved
        ``RunConfig``, or the backend's own launch config with its ``plan``, both from its forecast)."""
        ...


def is_launch_backend(found: object) -> TypeGuard[LaunchBackend]:
    return isinstance(found, LaunchBackend)


def backend(name: str) -> LaunchBackend:
    from workbench import plugins

    return plugins.load("backends", name, is_launch_backend)


def backend_names() -> list[str]:
    from workbench import plugins

    return plugins.names("backends")


__all__ = ["Forecast", "LaunchBackend", "Launched", "backend", "backend_names", "is_launch_backend"]
