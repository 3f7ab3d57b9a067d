"""The palette's "Import Harbor ATIF trajectories as a run" (``workbench import PATH --format atif``): the path
asked in a dialog, the import run in a thread worker of the app, and what it imported (or the one line
refusing it: no run is made) as a notification. The Runs screen, when shown, lists the new run at once."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from textual.message import Message
from workbench_app.format import for_app
from workbench_app.screens.format_dialogs import ImportTrajectoriesDialog
from workbench_app.workers import notify_ui, post_ui

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from textual.app import App
    from workbench_app.typed import WorkbenchHost

    from workbench.runs.import_traces import ImportResult


def imported_line(res: ImportResult) -> str:
    """What an import made: the run, its rollouts and rewards, what it skipped."""
    rewarded = f"; {res.rewarded:,} with a reward (mean {res.mean_reward:.3f})" if res.rewarded else "; no rewards"
    line = f"imported {res.rollouts:,} trajectories from {res.file} as run {res.run_id} of {res.env}{rewarded}"
    if res.problems:
        first = res.problems[0]
        line += f"; skipped {len(res.problems):,} (first: {first.where}: {first.reason})"
    return line + "; 3 shows it in Runs"


class TrajectoryImport:
    class Imported(Message):
        """An import made the run ``run_id`` (posted to the app, which refreshes Runs or Costs if shown)."""

        def __init__(self, run_id: str) -> None:
            super().__init__()
            self.run_id = run_id

    def __init__(self, app: App[Any]) -> None:
        """``app``: the Workbench app (its store, and whether it may be written)."""
        self.app = app
        self.host = cast("WorkbenchHost", app)

    def ask(self) -> None:
        if self.host.require_writable("an import"):
            self.app.push_screen(ImportTrajectoriesDialog(Path(os.getcwd())), self._chosen)

    def _chosen(self, path: object) -> None:
        if not isinstance(path, Path):
            return  # cancelled
        self.app.notify(f"importing {path}…", timeout=2)
        self.app.run_worker(lambda: self._import(path), thread=True, exit_on_error=False, group="import-atif")

    def _import(self, path: Path) -> None:
        from workbench.runs.import_traces import import_file

        app = self.app
        try:
            res = import_file(self.host.store.get(), path, "atif")
        except Exception as e:
            line = for_app(e) if isinstance(e, WorkbenchError) else f"{type(e).__name__}: {e}"
            notify_ui(app, line, title="import refused", severity="error", timeout=10)
            return
        notify_ui(app, imported_line(res), title="imported", timeout=12)
        post_ui(app, self.Imported(res.run_id))
