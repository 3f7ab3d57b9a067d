"""The Environments screen's quick eval (``e``; escape stops it): a few rollouts of the selected environment
against the model chosen for it in Settings (``[models] quick_eval``; else the ``model`` / ``base_url``
settings, else the embedded model), run by ``workbench eval``'s own use case (``workbench.usecases.evaluation.run_eval``,
with its summary and its every-rollout-failed error) in a thread worker.

The eval's callbacks (on its own loop, in the worker's thread) only store its counters here; a UI timer
draws them in the eval bar. Its end comes back as :class:`QuickEval.Finished`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.widgets import Label, ProgressBar
from workbench_app.env_state import EnvState, env_spec
from workbench_app.format import fnum, for_app
from workbench_app.workers import CancellableRun, post_ui

from workbench.errors import WorkbenchError

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost

#: What a quick eval's options are called here: they come from the settings file.
QUICK_EVAL_LABELS = {"EvalOptions.base_url": "base_url in {settings}", "EvalOptions.model": "model in {settings}",
                     "EvalOptions.api_key": "the API key", "EvalOptions.n": "quick_eval_n in {settings}"}


class QuickEval:
    class Finished(Message):
        """A quick eval has ended: its summary (None when it failed: ``error`` says why; else ``error`` is
        "interrupted" or empty)."""

        def __init__(self, name: str, summary: dict[str, Any] | None, error: str, model: str = "") -> None:
            super().__init__()
            self.name, self.summary, self.error, self.model = name, summary, error, model

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self.runner: CancellableRun | None = None
        self.env = ""
        self._run = ""
        self._total: int | None = None
        self._counts: tuple[int, int, float, int] = (0, 0, 0.0, 0)
        self._status: tuple[str, int | None, int | None] | None = None

    @property
    def running(self) -> bool:
        return self.runner is not None

    def start(self, st: EnvState) -> None:
        screen = self.screen
        if self.runner is not None:
            screen.notify(f"an eval of {self.env} is running; escape stops it", severity="warning")
            return
        if st.status == "error":
            screen.notify(f"{st.name} does not load; fix it first", severity="error")
            return
        if not screen.workbench_app.require_writable("a quick eval"):
            return
        runner = self.runner = CancellableRun()
        self.env, self._run, self._total = st.name, "", None
        self._counts = (0, 0, 0.0, 0)
        self._status = None
        screen.query_one("#eval-bar").display = True
        screen.query_one("#eval-label", Label).update(f"eval {st.name}: starting…")
        screen.query_one(ProgressBar).update(total=None, progress=0)
        name, spec = st.name, env_spec(st.ref)
        screen.run_worker(lambda: self._eval(runner, name, spec), thread=True, exit_on_error=False,
                          group="env-eval")

    def stop(self) -> None:
        if self.runner is not None:
            self.runner.cancel()
            self.screen.notify(f"stopping the eval of {self.env}…", timeout=2)

    def cancel(self) -> None:
        """Stop the eval without a word (the screen is going)."""
        if self.runner is not None:
            self.runner.cancel()

    def _eval(self, runner: CancellableRun, name: str, spec: str) -> None:
        from workbench.runs.evaluate import EvalOptions
        from workbench.usecases.evaluation import run_eval

        app = self.screen.workbench_app
        cfg = app.config
        model, base_url = cfg.endpoint_for("quick_eval")
        opts = EvalOptions(env=spec, n=cfg.quick_eval_n, rollouts_per_task=1, concurrency=4,
                           model=model, base_url=base_url)
        said = model or "the embedded model"  # what the toast names

        def on_start(run_id: str, total: int) -> None:
            self._run, self._total = run_id, total

        def on_counters(c: Any) -> None:
            self._counts = (c.finished, c.errors, c.reward_sum, c.scored)

        def on_status(what: str, done: int | None, total: int | None) -> None:
            self._status = (what, done, total)  # read by tick, on the UI thread

        try:
            store = app.store.get()
            out = runner.run(lambda: run_eval(opts, store, on_start=on_start, counters_cb=on_counters,
                                              on_status=on_status))
            failure = out.failure(f"the Traces screen has the details (run {out.run_id})")
            if failure is not None:
                raise failure
        except WorkbenchError as e:
            post_ui(self.screen, self.Finished(name, None, for_app(e, QUICK_EVAL_LABELS), said))
        except (asyncio.CancelledError, KeyboardInterrupt):
            post_ui(self.screen, self.Finished(name, None, "stopped before it started", said))
        except Exception as e:
            post_ui(self.screen, self.Finished(name, None, f"{type(e).__name__}: {e}", said))
        else:
            summary = dict(out.summary)
            post_ui(self.screen, self.Finished(name, summary, "interrupted" if out.interrupted else "",
                                               model or str(summary.get("model") or said)))

    def tick(self) -> None:
        """The eval bar, from the counters the eval's callbacks left."""
        if self.runner is None:
            return
        screen = self.screen
        finished, failed, reward_sum, scored = self._counts
        bar = screen.query_one(ProgressBar)
        label = screen.query_one("#eval-label", Label)
        if self._total is None and self._status is not None:
            what, done, of = self._status  # the embedded model being built (first use) or started
            bar.update(total=of, progress=done or 0)
            count = f" {done}/{of}" if of else "…"
            label.update(f"eval {self.env}: {what}{count}  (escape stops it)")
            return
        if self._total is not None:
            bar.update(total=self._total, progress=finished)
        mean = fnum(reward_sum / scored) if scored else "-"
        total = "?" if self._total is None else self._total
        label.update(f"eval {self.env} {self._run}: {finished}/{total}  mean reward {mean}  errors {failed}")

    def finish(self, done: Finished) -> None:
        self.runner = None
        self.screen.query_one("#eval-bar").display = False
        name, summary, error = done.name, done.summary, done.error
        with_model = f" with {done.model}" if done.model else ""
        if summary is None:
            self.screen.notify(f"{name}{with_model}: {error}", title="quick eval failed", severity="error",
                               timeout=10)
            return
        note = f" ({error})" if error else ""
        self.screen.notify(f"{name}{with_model} run {summary['run_id']}: mean reward {fnum(summary.get('mean_reward'))} over "
                           f"{summary['rollouts']} rollouts, {summary['errors']} errors{note}",
                           title="quick eval done")
        self.screen.catalog.scan(set())  # refresh the latest-run columns
