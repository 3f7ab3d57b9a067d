"""What the Environments screen's controllers use of the screen that holds them.

Each controller (catalog, editor, launches, quick eval, re-score, validation, hot reload, hand-offs)
is built by :class:`~workbench_app.screens.environments.screen.EnvironmentsScreen` with the screen
itself. They name :class:`EnvironmentsHost`, the part of the screen they use, which the screen satisfies
(mypy checks it where the screen builds them), so no controller imports the screen that imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, overload

from textual.app import App
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import Widget
from textual.worker import Worker, WorkType
from workbench_app.env_state import EnvState
from workbench_app.typed import WorkbenchHost

QueryType = TypeVar("QueryType", bound=Widget)
ResultType = TypeVar("ResultType")


class CatalogApi(Protocol):
    """The listed environments: what one controller asks of the catalog on behalf of another."""

    def scan(self, reload: set[str]) -> None:
        """List the environments again, reloading those named in ``reload``."""
        ...

    def select(self, st: EnvState) -> None:
        """Move the cursor to ``st``."""
        ...


class EnvironmentsHost(Protocol):
    """The Environments screen, as its controllers see it: Textual's node API they call, and its own parts."""

    @property
    def app(self) -> App[object]: ...

    @property
    def workbench_app(self) -> WorkbenchHost: ...

    @property
    def catalog(self) -> CatalogApi: ...

    @property
    def envs(self) -> dict[str, EnvState]: ...

    def _selected(self) -> EnvState | None: ...

    def show_detail(self) -> None: ...

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def call_after_refresh(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> bool: ...

    def run_worker(self, work: WorkType[ResultType], name: str | None = "", group: str = "default",
                   description: str = "", exit_on_error: bool = True, start: bool = True,
                   exclusive: bool = False, thread: bool = False) -> Worker[ResultType]: ...

    @overload
    def query_one(self, selector: str) -> Widget: ...

    @overload
    def query_one(self, selector: type[QueryType]) -> QueryType: ...

    @overload
    def query_one(self, selector: str, expect_type: type[QueryType]) -> QueryType: ...
