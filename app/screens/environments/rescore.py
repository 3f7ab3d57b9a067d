"""The Environments screen's live re-scoring (``R``, and after an edit): a worker per environment, its
progress and its result beside the detail panel; after an edit the model-free probe policies play the
edited environment too (:class:`ProbeFollow`), and the status line warns when the edit made it exploitable.

The work is ``workbench rescore ENV`` (:func:`workbench_app.env_state.rescore_stored`) on a private event
loop in a thread worker, so the interface never waits on it; its progress and end come back as
:class:`Rescores.Progress` and :class:`Rescores.Done`, each naming the run it is of, so a newer re-score
of the same environment makes an older one's messages moot.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.message import Message
from workbench_app.env_state import EnvState, env_spec, rescore_stored
from workbench_app.format import clip, fnum, for_app
from workbench_app.widgets.reward_compare import RewardCompare
from workbench_app.workers import CancellableRun, post_ui

from workbench.authoring.discovery import EnvRef
from workbench.errors import WorkbenchError
from workbench.runs.score_age import describe_stale, stale_stored

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost

    from workbench.analysis.rescore import RescoreResult


class Rescores:
    class Progress(Message):
        def __init__(self, name: str, runner: CancellableRun, done: int, total: int) -> None:
            super().__init__()
            self.name, self.runner, self.done, self.total = name, runner, done, total

    class Done(Message):
        """A re-score has ended: its result (None: nothing of the env is stored), or its error."""

        def __init__(self, name: str, runner: CancellableRun, result: RescoreResult | None, error: str,
                     quiet: bool, stale: tuple[int, int] = (0, 0)) -> None:
            super().__init__()
            self.name, self.runner, self.result, self.error, self.quiet = name, runner, result, error, quiet
            self.stale = stale  # (stored rollouts scored with other files than now, all stored)

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self._running: dict[str, CancellableRun] = {}  # env name -> its running re-score
        self.stale: dict[str, str] = {}  # env name -> how many stored scores are older than its rubric, as a line

    def cancel_all(self) -> None:
        for runner in self._running.values():
            runner.cancel()

    def cancel(self, st: EnvState) -> None:
        """Stop ``st``'s running re-score, if any (its result would be of files that changed since)."""
        runner = self._running.pop(st.name, None)
        if runner is not None:
            runner.cancel()
        st.rescoring = None

    def start(self, st: EnvState, *, quiet: bool) -> None:
        """Re-score ``st``'s stored rollouts in a worker; a re-score of it still running is cancelled.
        ``quiet``: an env with nothing stored is not worth a notification (after a reload)."""
        old = self._running.pop(st.name, None)
        if old is not None:
            old.cancel()
        runner = self._running[st.name] = CancellableRun()
        # Asked for: show it starting at once. After a reload its first progress shows it (most envs
        # edited have stored rollouts, but one that has none should not flash a panel).
        st.rescoring = None if quiet else (0, 0)
        self.screen.show_detail()
        name, ref = st.name, st.ref
        self.screen.run_worker(lambda: self._rescore(name, ref, runner, quiet), thread=True, exit_on_error=False,
                               group="env-rescore")

    def _rescore(self, name: str, ref: EnvRef, runner: CancellableRun, quiet: bool) -> None:
        screen = self.screen

        def progress(done: int, total: int) -> None:
            post_ui(screen, self.Progress(name, runner, done, total))

        try:
            store = screen.workbench_app.store.get()
            res = rescore_stored(ref, store, runner, progress)
            stale = stale_stored(store.conn, name, res.env_version) if res is not None else (0, 0)
        except (asyncio.CancelledError, KeyboardInterrupt):
            return  # replaced by a newer re-score, or the screen closed
        except WorkbenchError as e:
            post_ui(screen, self.Done(name, runner, None, str(e), quiet))
        except Exception as e:
            post_ui(screen, self.Done(name, runner, None, f"{type(e).__name__}: {e}", quiet))
        else:
            post_ui(screen, self.Done(name, runner, res, "", quiet, stale))

    def progress(self, event: Progress) -> None:
        st = self.screen.envs.get(event.name)
        if st is not None and self._running.get(event.name) is event.runner:
            st.rescoring = (event.done, event.total)
            if st is self.screen._selected():
                self.show(st)

    def finish(self, event: Done) -> None:
        name, res = event.name, event.result
        st = self.screen.envs.get(name)
        if st is None or self._running.get(name) is not event.runner:
            return  # a newer re-score of this env is on its way
        del self._running[name]
        st.rescoring = None
        if not event.error:
            self.stale[name] = describe_stale(name, *event.stale)
        notify = self.screen.notify
        if event.error:
            notify(f"{name}: {clip(event.error, 200)}", title="re-score failed", severity="error", timeout=8)
        elif res is None:
            if not event.quiet:
                notify(f"{name} has no stored rollouts to re-score; quick eval (e) stores some", severity="warning")
        else:
            st.rescore = res
            notify(f"{name}: mean reward {fnum(res.before.mean)} → {fnum(res.after.mean)}, {res.changed:,} of "
                   f"{res.rescored:,} rollouts changed" + (f", {res.failed:,} with errors" if res.failed else ""),
                   title="re-scored", severity="warning" if res.failed else "information", timeout=5)
        self.screen.show_detail()

    def show(self, st: EnvState | None) -> None:
        """The selected env's re-score beside the detail panel (hidden when it has none)."""
        screen = self.screen
        panel = screen.query_one(RewardCompare)
        visible = st is not None and (st.rescore is not None or st.rescoring is not None)
        panel.display = visible
        screen.query_one("#env-bottom").set_class(visible, "-rescore")  # the detail box as tall as the panel
        if st is None or not visible:
            return
        if st.rescore is not None and panel.result is not st.rescore:
            panel.show_result(st.rescore)
        if st.rescoring is not None:
            done, total = st.rescoring
            panel.show_progress(st.name, done, total or None)


class ProbeFollow:
    """After an edit the model-free probe policies (``workbench probe``'s, those that call no model) play
    the environment as its files are now, in a thread worker on a scratch store (the user's store never
    fills with them); ``warnings`` names each environment an edit left exploitable, by the probe report's own
    verdict. The screen shows them in its status line; ``P`` opens the full probe."""

    class Done(Message):
        """A follow-up probe has ended: its report (None when it could not run: ``error`` says why)."""

        def __init__(self, name: str, runner: CancellableRun, report: dict[str, Any] | None, error: str) -> None:
            super().__init__()
            self.name, self.runner, self.report, self.error = name, runner, report, error

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self._latest: dict[str, CancellableRun] = {}  # env name -> its newest probe
        self.warnings: dict[str, str] = {}  # env name -> what its latest probe found exploitable
        self.probed: dict[str, str] = {}  # env name -> the version (files hash) its latest probe played

    @property
    def running(self) -> bool:
        return bool(self._latest)

    def start(self, st: EnvState) -> None:
        """Probe ``st`` again; a probe of it still running is cancelled (it plays files that changed since)."""
        old = self._latest.get(st.name)
        if old is not None:
            old.cancel()
        runner = self._latest[st.name] = CancellableRun()
        name, spec = st.name, env_spec(st.ref)
        self.screen.run_worker(lambda: self._probe(name, spec, runner), thread=True, exit_on_error=False,
                               group="env-probe-follow")

    def forget(self, st: EnvState) -> None:
        """``st`` no longer loads: its probe's verdict is of files that are gone."""
        old = self._latest.pop(st.name, None)
        if old is not None:
            old.cancel()
        self.warnings.pop(st.name, None)

    def cancel_all(self) -> None:
        for runner in self._latest.values():
            runner.cancel()

    def _probe(self, name: str, spec: str, runner: CancellableRun) -> None:
        from workbench.runs.probe import probe_env
        from workbench.store import Store

        try:
            with tempfile.TemporaryDirectory(prefix="workbench-probe-") as scratch:
                store = Store(Path(scratch) / "probe.db")
                try:
                    report = runner.run(lambda: probe_env(spec, store, model_free_only=True))
                finally:
                    store.close()
        except (asyncio.CancelledError, KeyboardInterrupt):
            return  # replaced by a newer probe, or the screen closed
        except WorkbenchError as e:
            post_ui(self.screen, self.Done(name, runner, None, for_app(e)))
        except Exception as e:
            post_ui(self.screen, self.Done(name, runner, None, f"{type(e).__name__}: {e}"))
        else:
            post_ui(self.screen, self.Done(name, runner, report, ""))

    def finish(self, event: Done) -> bool:
        """Keep ``event``'s verdict if it is of the newest probe of its env; True when the warnings changed."""
        if self._latest.get(event.name) is not event.runner:
            return False
        del self._latest[event.name]
        before = self.warnings.get(event.name)
        if event.report is not None:
            self.probed[event.name] = event.report["env_version"]
        if event.report is not None and event.report["exploitable"]:
            self.warnings[event.name] = exploit_warning(event.report)
        else:
            self.warnings.pop(event.name, None)  # nothing exploitable, or it could not tell (its error is not news)
        return self.warnings.get(event.name) != before


def exploit_warning(report: dict[str, Any]) -> str:
    """One line: which probe policies ``report`` (``probe_env``'s) finds exploitable, and what they earn."""
    bad = [p for p in report["policies"] if p["exploitable"]]
    named = ", ".join(f"{p['name']} earns {fnum(p['mean_reward'])}" for p in bad[:3]) + (", …" if len(bad) > 3 else "")
    return (f"{report['env']}: the edit makes the rubric exploitable ({named}, at least {report['threshold']:g} × the "
            f"{report['basis'].replace('_', ' ')} reward {fnum(report['basis_reward'])}); P shows the probe")
