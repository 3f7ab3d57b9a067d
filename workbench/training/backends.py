"""Launch backends: where ``workbench launch`` (and the app's launch dialog) runs the pipeline.

A backend is a ``workbench.backends`` plugin (the bundled ``local`` and ``modal`` live in
``cloud_runtime``). ``takes`` says what it launches: ``"run"``, a resolved ``RunConfig`` (the local
backend, on this machine's CPU), or ``"launch"``, a ``LaunchConfig`` with its cloud ``plan``.
``notice`` is said before launching (empty for none); ``label`` is how a chooser (the app's launch
dialog) names it. ``preflight`` answers what a launch of it would cost and whether the budgets, the
memory fit and its credentials allow it, before anything starts (``workbench.usecases.launch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class LaunchBackend(Protocol):
    name: str
    takes: str  # "run" | "launch"
    notice: str
    label: str

    def preflight(self, conn: Any, *, env: str | None, config_file: str | None = None, max_steps: int | None = None,
                  budget_usd: float | None = None, overrides: dict[str, Any] | None = None) -> Any:
        """The forecast of a launch with these inputs, as the backend judges it: an object with ``refusal``
        (the sentence a launch is refused with, or None), ``budget_problem`` (the budgets' part of it),
        ``plan`` (the cluster plan, or None) and ``launch`` (the config ``launch`` takes, where planned).
        Reads the store through ``conn``; starts nothing."""
        ...

    def check_credentials(self) -> None:
        """Raise a ``WorkbenchError`` naming the login command when what the backend needs is missing."""
        ...

    def launch(self, store: Any, run: Any, plan: Any = None, *, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
               on_start: Callable[[str], None] | None = None) -> Any:
        """Run the pipeline to its end, streaming into ``store``; returns what was launched
        (``run_id``, ``status``, ``bundle_hash``, ``spent_usd``, ``summary``)."""
        ...


def backend(name: str) -> LaunchBackend:
    from workbench import plugins

    return plugins.load("backends", name)


def backend_names() -> list[str]:
    from workbench import plugins

    return plugins.names("backends")


__all__ = ["LaunchBackend", "backend", "backend_names"]
