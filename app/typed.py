"""Typed access to the Workbench app from its screens.

``self.app`` is typed as a plain :class:`textual.app.App`, but the screens read the Workbench's own
attributes: the store handle, the config, ``discover_fn``, ``launcher``, ``debug_request``... Mixed
into a screen, :class:`WorkbenchAppMixin` gives it ``self.workbench_app``, the same object typed as
:class:`WorkbenchHost`: what a screen uses of the app, which :class:`~workbench_app.main.WorkbenchApp`
provides. Those reads are checked instead of ``# type: ignore``-d, and the screens name no app class
(``workbench_app.main`` imports the screens).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from workbench_app.config import TuiConfig
from workbench_app.store_access import StoreHandle

from workbench.authoring.discovery import EnvRef

if TYPE_CHECKING:
    from textual.dom import DOMNode

    _Base = DOMNode
else:
    _Base = object


class WorkbenchHost(Protocol):
    """What the screens use of the app that hosts them (:class:`~workbench_app.main.WorkbenchApp`)."""

    config: TuiConfig
    store: StoreHandle
    discover_fn: Callable[[], list[EnvRef]]
    watch_envs: bool
    launcher: Callable[..., Any] | None
    modal_launcher: Callable[..., Any] | None
    debug_request: tuple[str, Any] | None

    @property
    def db_path(self) -> Path: ...

    def require_writable(self, what: str) -> bool:
        """True if the store can be written; else one clear error saying ``what`` needs it, and False."""
        ...

    def open_debugger(self, *, env_spec: str | None = None, rollout: dict[str, Any] | None = None) -> None:
        """Show the Debugger on an environment spec or on a stored rollout."""
        ...

    def open_play(self, env_spec: str, task_index: int = 0, env_name: str | None = None) -> None:
        """Play task ``task_index`` of an environment yourself."""
        ...


class WorkbenchAppMixin(_Base):
    """For screens (and widgets) only ever hosted by :class:`~workbench_app.main.WorkbenchApp`."""

    @property
    def workbench_app(self) -> WorkbenchHost:
        """``self.app``, typed as the :class:`WorkbenchHost` it is (safe from worker threads too)."""
        return cast("WorkbenchHost", self.app)
