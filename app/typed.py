"""Typed access to the Workbench app from its screens.

``self.app`` is typed as a plain :class:`textual.app.App`, but the screens read the Workbench's own
attributes: the store handle, the config, ``discover_fn``, ``launcher``, ``debug_request``... Mixed
into a screen, :class:`WorkbenchAppMixin` gives it ``self.workbench_app``, the same object typed as
:class:`~workbench_app.main.WorkbenchApp`, so those reads are checked instead of ``# type: ignore``-d.

``workbench_app.main`` imports the screens, so the type is imported for type checking only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from textual.dom import DOMNode
    from workbench_app.main import WorkbenchApp

    _Base = DOMNode
else:
    _Base = object


class WorkbenchAppMixin(_Base):
    """For screens (and widgets) only ever hosted by :class:`~workbench_app.main.WorkbenchApp`."""

    @property
    def workbench_app(self) -> WorkbenchApp:
        """``self.app``, typed as the :class:`~workbench_app.main.WorkbenchApp` it is (safe from worker threads too)."""
        return cast("WorkbenchApp", self.app)
