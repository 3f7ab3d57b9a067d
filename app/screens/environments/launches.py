"""The Environments screen's launch (``L``): the launch dialog, then ``workbench launch ENV --backend NAME``
in a thread worker that blocks until the run ends.

The worker posts :class:`Launches.Started` and :class:`Launches.Finished` (also known as
``EnvironmentsScreen.LaunchStarted`` / ``LaunchFinished``): the screen says so, and they bubble on to the
app, which refreshes the Runs or Costs screen if it is the one shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message
from workbench_app.env_state import EnvState, env_spec
from workbench_app.format import fcost, for_app
from workbench_app.screens.launch import LaunchRequest, LaunchScreen
from workbench_app.workers import notify_ui, post_ui

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost


class Launches:
    class Started(Message):
        """A launch from this screen has started its run (posted by the launch worker)."""

        def __init__(self, env: str, run_id: str) -> None:
            super().__init__()
            self.env, self.run_id = env, run_id

    class Finished(Message):
        """A launch from this screen has ended: its run's final status and what it spent."""

        def __init__(self, env: str, run_id: str, status: str, spent_usd: float) -> None:
            super().__init__()
            self.env, self.run_id, self.status, self.spent_usd = env, run_id, status, spent_usd

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen

    def open_dialog(self, st: EnvState) -> None:
        if not self.screen.workbench_app.require_writable("a launch"):
            return
        self.screen.app.push_screen(LaunchScreen(st.name, env_spec(st.ref)), self._confirmed)

    def _confirmed(self, req: LaunchRequest | None) -> None:
        if req is None:
            return
        budget = "no budget" if req.budget_usd is None else f"budget {fcost(req.budget_usd)}"
        self.screen.notify(f"launching {req.env}: {req.max_steps} steps on the {req.backend} backend, {budget}…",
                           title="launch", timeout=4)
        self.screen.run_worker(lambda: self._launch(req), thread=True, exit_on_error=False, group="env-launch")

    def _launch(self, req: LaunchRequest) -> None:
        """``workbench launch ENV --backend NAME``: blocks this worker thread until the run ends."""
        from workbench.training.backends import backend

        screen = self.screen
        chosen = backend(req.backend)
        app = screen.workbench_app
        launch = (app.modal_launcher if req.backend == "modal" else app.launcher) or chosen.launch

        def on_start(run_id: str) -> None:
            post_ui(screen, self.Started(req.env, run_id))

        try:
            store = app.store.get()
            if chosen.notice:
                notify_ui(screen, chosen.notice, title=f"{req.backend} launch", severity="warning", timeout=10)
            if chosen.takes == "launch":
                out = launch(store, req.run_cfg, req.plan, budget_usd=req.budget_usd, on_start=on_start)
            else:
                out = launch(store, req.run_cfg, budget_usd=req.budget_usd, threads=1, on_start=on_start)
        except WorkbenchError as e:
            notify_ui(screen, f"{req.env}: {for_app(e)}", title="launch failed", severity="error", timeout=10)
        except Exception as e:
            notify_ui(screen, f"{req.env}: {type(e).__name__}: {e}", title="launch failed", severity="error",
                      timeout=10)
        else:
            post_ui(screen, self.Finished(req.env, out.run_id, out.status, out.spent_usd))

    def started(self, event: Started) -> None:
        self.screen.notify(f"{event.env}: run {event.run_id} started; press 3 to follow it, S there stops it",
                           title="launched")

    def finished(self, event: Finished) -> None:
        self.screen.notify(f"{event.env}: run {event.run_id} {event.status}, spent {fcost(event.spent_usd)}",
                           title="launch done", severity="information" if event.status == "completed" else "warning",
                           timeout=10)
        self.screen.catalog.scan(set())
