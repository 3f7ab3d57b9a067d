"""The Environments screen's live re-scoring: a worker per environment, its progress and its result.

Mixed into :class:`~workbench_app.screens.environments.EnvironmentsScreen`, which calls :meth:`_start_rescore`
when a reload brings a new version of an environment and binds ``R`` to :meth:`action_rescore`.
The work is ``workbench rescore ENV`` (:func:`workbench_app.env_state.rescore_stored`) on a private event
loop in a worker thread, so the interface never waits on it; failures become notifications.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual import work
from workbench_app.env_state import EnvState, rescore_stored
from workbench_app.format import clip, fnum
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.reward_compare import RewardCompare
from workbench_app.workers import CancellableRun as AsyncRunner

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from textual.screen import Screen

    _Base = Screen[None]
else:
    _Base = object


class RescoreActions(WorkbenchAppMixin, _Base):
    """Needs ``envs``, ``_selected()``, ``_selected_loaded()``, ``_show_detail()`` and ``_ui()`` from the screen."""

    envs: dict[str, EnvState]
    if TYPE_CHECKING:
        def _selected(self) -> EnvState | None: ...
        def _selected_loaded(self) -> EnvState | None: ...
        def _show_detail(self) -> None: ...
        def _ui(self, fn: Any, *args: Any, **kwargs: Any) -> None: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rescores: dict[str, AsyncRunner] = {}  # env name -> its running re-score

    def cancel_rescores(self) -> None:
        for runner in self._rescores.values():
            runner.cancel()

    def cancel_rescore(self, st: EnvState) -> None:
        """Stop ``st``'s running re-score, if any (its result would be of files that changed since)."""
        runner = self._rescores.pop(st.name, None)
        if runner is not None:
            runner.cancel()
        st.rescoring = None

    def action_rescore(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self._start_rescore(st, quiet=False)

    def _start_rescore(self, st: EnvState, *, quiet: bool) -> None:
        """Re-score ``st``'s stored rollouts in a worker; a re-score of it still running is cancelled.
        ``quiet``: an env with nothing stored is not worth a notification (after a reload)."""
        old = self._rescores.pop(st.name, None)
        if old is not None:
            old.cancel()
        runner = self._rescores[st.name] = AsyncRunner()
        # Asked for: show it starting at once. After a reload its first progress shows it (most envs
        # edited have stored rollouts, but one that has none should not flash a panel).
        st.rescoring = None if quiet else (0, 0)
        self._show_detail()
        self._rescore(st.name, st.ref, runner, quiet)

    @work(thread=True, exit_on_error=False, group="env-rescore")
    def _rescore(self, name: str, ref: Any, runner: AsyncRunner, quiet: bool) -> None:
        def progress(done: int, total: int) -> None:
            self._ui(self._rescore_progress, name, runner, done, total)

        try:
            res = rescore_stored(ref, self.workbench_app.store.get(), runner, progress)
        except (asyncio.CancelledError, KeyboardInterrupt):
            return  # replaced by a newer re-score, or the screen closed
        except WorkbenchError as e:
            self._ui(self._rescore_done, name, runner, None, str(e), quiet)
        except Exception as e:
            self._ui(self._rescore_done, name, runner, None, f"{type(e).__name__}: {e}", quiet)
        else:
            self._ui(self._rescore_done, name, runner, res, "", quiet)

    def _rescore_progress(self, name: str, runner: AsyncRunner, done: int, total: int) -> None:
        st = self.envs.get(name)
        if st is not None and self._rescores.get(name) is runner:
            st.rescoring = (done, total)
            if st is self._selected():
                self._show_rescore(st)

    def _rescore_done(self, name: str, runner: AsyncRunner, res: Any, error: str, quiet: bool) -> None:
        st = self.envs.get(name)
        if st is None or self._rescores.get(name) is not runner:
            return  # a newer re-score of this env is on its way
        del self._rescores[name]
        st.rescoring = None
        if error:
            self.notify(f"{name}: {clip(error, 200)}", title="re-score failed", severity="error", timeout=8)
        elif res is None:
            if not quiet:
                self.notify(f"{name} has no stored rollouts to re-score; quick eval (e) stores some",
                            severity="warning")
        else:
            st.rescore = res
            sev = "warning" if res.failed else "information"
            self.notify(f"{name}: mean reward {fnum(res.before.mean)} → {fnum(res.after.mean)}, {res.changed:,} of "
                        f"{res.rescored:,} rollouts changed" + (f", {res.failed:,} with errors" if res.failed else ""),
                        title="re-scored", severity=sev, timeout=5)
        self._show_detail()

    def _show_rescore(self, st: EnvState | None) -> None:
        """The selected env's re-score beside the detail panel (hidden when it has none)."""
        panel = self.query_one(RewardCompare)
        visible = st is not None and (st.rescore is not None or st.rescoring is not None)
        panel.display = visible
        self.query_one("#env-bottom").set_class(visible, "-rescore")  # the detail box as tall as the panel
        if st is None or not visible:
            return
        if st.rescore is not None and panel.result is not st.rescore:
            panel.show_result(st.rescore)
        if st.rescoring is not None:
            done, total = st.rescoring
            panel.show_progress(st.name, done, total or None)

