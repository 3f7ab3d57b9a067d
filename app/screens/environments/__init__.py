"""The Environments screen (:mod:`.screen`) and its controllers, one module per concern."""

from workbench_app.screens.environments.screen import EnvironmentsScreen

__all__ = ["EnvironmentsScreen"]
