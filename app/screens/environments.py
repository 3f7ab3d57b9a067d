"""Environments: bundled and user environments, validate, quick eval, edit, hot reload, live re-scoring.

When a reload (hot reload on save, ``r``, or back from the editor) brings a new version of an env
that has stored rollouts, every stored rollout is re-scored with the edited rubric in a worker
thread (``workbench rescore``) and the reward distribution before and after is shown beside the
detail panel; ``R`` re-scores on demand.

A launch (``L``) runs in a worker, which posts :class:`EnvironmentsScreen.LaunchStarted` and
:class:`EnvironmentsScreen.LaunchFinished`: this screen says so, and the app refreshes the Runs or Costs
screen if it is the one shown."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, ProgressBar, Static
from workbench_app.env_state import (
    EnvState,
    LoadResult,
    affected,
    env_spec,
    load_env,
    safe_version,
    source_file,
    watch_dirs,
)
from workbench_app.format import clip, fcost, fnum, for_app, fpath
from workbench_app.screens.env_rescore import RescoreActions
from workbench_app.screens.launch import LaunchRequest, LaunchScreen
from workbench_app.screens.new_env import NewEnvScreen
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.reward_compare import RewardCompare
from workbench_app.widgets.tables import RowTable
from workbench_app.workers import CancellableRun as AsyncRunner
from workbench_app.workers import call_ui, post_ui

from workbench.errors import WorkbenchError

#: What a quick eval's options are called here: they come from the settings file.
QUICK_EVAL_LABELS = {"EvalOptions.base_url": "base_url in {settings}", "EvalOptions.model": "model in {settings}",
                     "EvalOptions.api_key": "the API key", "EvalOptions.n": "quick_eval_n in {settings}"}

COLUMNS = [("env", "name"), ("origin", "origin"), ("version", "version"), ("tasks", "tasks"),
           ("latest reward", "reward"), ("latest run", "run"), ("status", "status")]


class EnvironmentsScreen(RescoreActions, Screen[None]):
    TITLE = "Environments"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("v", "validate", "Validate", id="env.validate"),
        Binding("e", "quick_eval", "Eval", id="env.eval"),
        Binding("o", "open_editor", "Edit", id="env.edit"),
        Binding("n", "new_env", "New", id="env.new"),
        Binding("d", "debug", "Debug", id="env.debug"),
        Binding("p", "play", "Play", id="env.play"),
        Binding("L", "launch", "Launch", id="env.launch"),
        Binding("H", "hub", "Hub", id="env.hub"),
        Binding("P", "probe", "Probe", id="env.probe", show=False),
        # Both also happen by themselves when a saved file reloads; listed under `?`.
        Binding("r", "reload", "Reload", id="env.reload", show=False),
        Binding("R", "rescore", "Re-score", id="env.rescore", show=False),
        Binding("escape", "stop_eval", "Stop eval", id="env.stop", show=False),
    ]

    class LaunchStarted(Message):
        """A launch from this screen has started its run (posted by the launch worker)."""

        def __init__(self, env: str, run_id: str) -> None:
            super().__init__()
            self.env, self.run_id = env, run_id

    class LaunchFinished(Message):
        """A launch from this screen has ended: its run's final status and what it spent."""

        def __init__(self, env: str, run_id: str, status: str, spent_usd: float) -> None:
            super().__init__()
            self.env, self.run_id, self.status, self.spent_usd = env, run_id, status, spent_usd

    def __init__(self) -> None:
        super().__init__()
        self.envs: dict[str, EnvState] = {}
        self._runner: AsyncRunner | None = None
        self._eval_env = ""
        self._eval_run = ""
        self._eval_total: int | None = None
        self._eval_counts: tuple[int, int, float, int] = (0, 0, 0.0, 0)
        self._eval_status: tuple[str, int | None, int | None] | None = None
        self._stop_watch: asyncio.Event | None = None
        self._watching: list[Path] | None = None  # the folders the watcher watches
        self._open_after_scan: Path | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield RowTable(id="env-table", cursor_type="row", zebra_stripes=True)
        with Horizontal(id="eval-bar"):
            yield Label("", id="eval-label")
            yield ProgressBar(id="eval-progress", show_eta=False)
        with Horizontal(id="env-bottom"):
            with VerticalScroll(id="env-detail-box"):
                yield Static("loading environments…", id="env-detail")
            yield RewardCompare(id="env-rescore")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        self.query_one("#eval-bar").display = False
        self.set_interval(0.2, self._tick_eval)
        self._scan(set())

    def on_unmount(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
        if self._stop_watch is not None:
            self._stop_watch.set()
        self.cancel_rescores()

    # -- discovery and loading ------------------------------------------------------------------
    def _ui(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        call_ui(self.app, fn, *args, **kwargs)

    def _scan(self, reload: set[str]) -> None:
        """List the envs, their versions and latest runs; then (re)load the new ones and ``reload``."""
        self._scan_worker(reload, set(self.envs))

    @work(thread=True, exit_on_error=False, group="env-scan")
    def _scan_worker(self, reload: set[str], known: set[str]) -> None:
        try:
            from workbench.store.queries import list_runs

            refs = self.workbench_app.discover_fn()
        except Exception as e:
            self._ui(self.notify, f"listing environments failed: {e}", severity="error")
            return
        latest: dict[str, dict[str, Any]] = {}
        try:
            for run in list_runs(self.workbench_app.store.get().conn, limit=1000):
                if run["status"] == "interrupted" and not run["rollouts"]:
                    continue  # stopped before anything finished (escape on a quick eval): not a result
                latest.setdefault(run["env_name"], run)
        except Exception as e:
            self._ui(self.notify, f"reading runs failed: {e}", severity="error")
        states = [EnvState(r, version=safe_version(r), latest=latest.get(r.name)) for r in refs]
        self._ui(self._apply_scan, states)
        if self.workbench_app.watch_envs:
            try:
                dirs = watch_dirs(refs)  # creates a missing user env folder, so its first env is watched
            except OSError as e:
                self._ui(self.notify, f"hot reload is off: {e}; press r to reload by hand", severity="warning")
            else:
                if dirs != self._watching:  # a new env outside the folders watched joins the watch
                    self._ui(self._watch, dirs)
        for st in states:
            if st.name not in known or st.name in reload:
                self._ui(self._apply_load, load_env(st.ref, reload=st.name in known))

    def _apply_scan(self, states: list[EnvState]) -> None:
        table = self.query_one(DataTable)
        names = {s.name for s in states}
        for gone in [n for n in self.envs if n not in names]:
            del self.envs[gone]
            table.remove_row(gone)
        for st in states:
            old = self.envs.get(st.name)
            if old is not None:
                old.ref, old.version, old.latest = st.ref, st.version, st.latest
                self._update_row(old)
            else:
                self.envs[st.name] = st
                table.add_row(*self._cells(st), key=st.name)
        self._refit()
        self._show_detail()
        self._open_created()

    def _apply_load(self, res: LoadResult) -> None:
        st = self.envs.get(res.name)
        if st is None:
            return
        was_error, before = st.status == "error", st.loaded_version
        st.version, st.status, st.message, st.tasks = res.version, res.status, res.message, res.tasks
        if res.status == "ok":
            st.loaded_version, st.framework = res.version, res.framework
        if st.report_files != res.files:  # the validation was of other files: it says nothing now
            st.report, st.report_error, st.report_files = None, "", ""
        if res.status == "error":  # its re-score is of a version that no longer loads
            st.rescore = None
            self.cancel_rescore(st)
        self._update_row(st)
        self._refit()  # this row's values may have narrowed or widened the others' room
        self._show_detail()
        if res.status == "error":
            self.notify(f"{res.name}: {clip(res.message, 200)}", title="environment failed to load",
                        severity="error", timeout=6)
        elif was_error:
            self.notify(f"{res.name} reloaded (version {res.version})", timeout=3)
        if res.status == "ok" and res.reloaded and before != res.version:
            self._start_rescore(st, quiet=True)  # an edit: show what it does to the stored rollouts

    @staticmethod
    def _plain_cells(st: EnvState) -> list[str]:
        """Every cell of ``st``'s row but the status."""
        latest = st.latest or {}
        origin = f"{st.ref.origin} · {st.framework}" if st.framework else st.ref.origin
        return [st.name, origin, st.version, "-" if st.tasks is None else str(st.tasks),
                fnum(latest.get("mean_reward")), latest.get("id", "-")]

    def _cells(self, st: EnvState) -> list[Any]:
        if st.status == "ok":
            status = Text("ok", style="green")
        elif st.status == "error":
            message = st.message
            if st.ref.path is not None:  # the full path is in the detail panel; here its name says enough
                message = message.replace(str(st.ref.path), st.ref.path.name)
            status = Text("error: " + clip(message, self._status_room() - len("error: ")), style="bold red")
        else:
            status = Text("loading…", style="dim")
        return [*self._plain_cells(st), status]

    def _status_room(self) -> int:
        """How wide the status column can be beside the others (each as wide as its widest value): the
        rest of the table's width, so a long error is clipped to the screen rather than cut by it."""
        table = self.query_one(DataTable)
        width = table.scrollable_content_region.width or self.app.size.width
        rows = [self._plain_cells(st) for st in self.envs.values()]
        others = sum(max([len(label), *(len(r[i]) for r in rows)]) + 2 * table.cell_padding
                     for i, (label, _) in enumerate(COLUMNS[:-1]))
        return max(len("error: …") + 2, width - others - 2 * table.cell_padding)

    def _update_row(self, st: EnvState) -> None:
        """Every cell of ``st``'s row; the columns widen or narrow to what they hold now."""
        table = self.query_one(DataTable)
        for (_, key), value in zip(COLUMNS, self._cells(st), strict=True):
            table.update_cell(st.name, key, value, update_width=True)

    def on_resize(self) -> None:
        """The status column fits the new width: error messages are clipped to it, never cut by it."""
        self.call_after_refresh(self._refit)

    def _refit(self) -> None:
        """The error statuses again, clipped to the room the other columns leave now."""
        table = self.query_one(DataTable)
        for st in self.envs.values():
            if st.status == "error" and st.name in table.rows:
                table.update_cell(st.name, "status", self._cells(st)[-1], update_width=True)

    # -- hot reload -----------------------------------------------------------------------------
    @work(exit_on_error=False, group="env-watch", exclusive=True)
    async def _watch(self, dirs: list[Path]) -> None:
        """Watch ``dirs`` (replacing the watch of other folders) and reload what changes in them."""
        if self._stop_watch is not None:
            self._stop_watch.set()
        stop = self._stop_watch = asyncio.Event()
        self._watching = dirs
        if not dirs:
            return
        try:
            from watchfiles import awatch

            async for changes in awatch(*dirs, debounce=150, step=50, stop_event=stop):
                changed = [Path(p) for _, p in changes if not p.endswith((".pyc", "~"))]
                refs_now = [s.ref for s in self.envs.values()]
                names = affected(refs_now, changed)
                self._scan(names)
        except Exception as e:  # the watcher is a convenience: say so and go on without it
            if not stop.is_set():
                self.notify(f"hot reload stopped: {e}; press r to reload by hand", severity="warning")

    def action_reload(self) -> None:
        st = self._selected()
        self._scan({st.name} if st else set(self.envs))

    # -- selection and detail panel -------------------------------------------------------------
    def _selected(self) -> EnvState | None:
        table = self.query_one(DataTable)
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return None
        return self.envs.get(str(key))

    def _selected_loaded(self) -> EnvState | None:
        """The selected environment if it loads; otherwise None, with a notification saying so."""
        st = self._selected()
        if st is not None and st.status == "error":
            self.notify(f"{st.name} does not load; fix it first", severity="error")
            return None
        return st

    @on(DataTable.RowHighlighted)
    def _on_highlight(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        st = self._selected()
        detail = self.query_one("#env-detail", Static)
        self._show_rescore(st)
        if st is None:
            detail.update("no environments found: add one under the user env folder or WORKBENCH_ENV_PATH")
            return
        out = Text()
        out.append(f"{st.name}", style="bold")
        out.append(f"  ({st.ref.origin})  version {st.version}\n")
        if st.framework:
            out.append(f"a {st.framework.split()[0]} environment ({st.framework}), run by Workbench's adapter\n",
                       style="cyan")
        out.append(f"{fpath(st.ref.path) if st.ref.path else st.ref.module}\n", style="dim")
        if st.status == "error":
            out.append("load error: ", style="bold red")
            out.append(st.message + "\n", style="red")
        elif st.status == "ok":
            out.append("loaded", style="green")
            out.append(f" — {st.tasks if st.tasks is not None else '?'} tasks")
            out.append(f" — {st.message}\n" if st.message else "\n")
        if st.latest:
            r = st.latest
            out.append(f"latest run {r['id']} ({r.get('status', '')}): mean reward {fnum(r.get('mean_reward'))}"
                       f" over {r.get('rollouts', 0)} rollouts, {r.get('errors', 0)} errors\n")
        if st.report_error:
            out.append("validate: ", style="bold")
            out.append(st.report_error + "\n", style="red")
        elif st.report is not None:
            rep = st.report
            out.append("validate: ", style="bold")
            out.append("ok" if rep.ok else "problems", style="green" if rep.ok else "bold red")
            out.append(f" ({rep.tasks_checked} tasks checked)\n")
            for p in rep.problems:
                out.append(f"  ✗ {p}\n", style="red")
            for w in rep.warnings:
                out.append(f"  ! {w}\n", style="yellow")
            if rep.gold:
                out.append("  gold: " + ", ".join(f"{k}={v:.3f}" for k, v in rep.gold.items()) + "\n")
            if rep.empty:
                out.append("  empty: " + ", ".join(f"{k}={v:.3f}" for k, v in rep.empty.items()) + "\n")
        detail.update(out)

    # -- validate -------------------------------------------------------------------------------
    def action_validate(self) -> None:
        st = self._selected()
        if st is None:
            return
        self.notify(f"validating {st.name}…", timeout=2)
        self._validate(st.name, st.ref)

    @work(thread=True, exit_on_error=False, group="env-validate")
    def _validate(self, name: str, ref: Any) -> None:
        from workbench.runs.validate import validate_env

        files, spec = safe_version(ref), env_spec(ref)  # the hash of the files it validates
        try:
            rep = AsyncRunner().run(lambda: validate_env(spec))
        except WorkbenchError as e:
            self._ui(self._apply_validation, name, files, None, for_app(str(e)))
        except Exception as e:
            self._ui(self._apply_validation, name, files, None, f"{type(e).__name__}: {e}")
        else:
            self._ui(self._apply_validation, name, files, rep, "")

    def _apply_validation(self, name: str, files: str, rep: Any, error: str) -> None:
        st = self.envs.get(name)
        if st is None:
            return
        st.report, st.report_error, st.report_files = rep, error, files
        self._show_detail()
        if error:
            self.notify(f"{name}: {clip(error, 200)}", title="validate failed", severity="error")
        else:
            sev = "information" if rep.ok else "error"
            self.notify(f"{name}: {'ok' if rep.ok else f'{len(rep.problems)} problems'}, "
                        f"{len(rep.warnings)} warnings", title="validate", severity=sev)

    # -- quick eval -----------------------------------------------------------------------------
    def action_quick_eval(self) -> None:
        st = self._selected()
        if st is None:
            return
        if self._runner is not None:
            self.notify(f"an eval of {self._eval_env} is running; escape stops it", severity="warning")
            return
        if st.status == "error":
            self.notify(f"{st.name} does not load; fix it first", severity="error")
            return
        if not self.workbench_app.require_writable("a quick eval"):
            return
        self._runner = AsyncRunner()
        self._eval_env, self._eval_run, self._eval_total = st.name, "", None
        self._eval_counts = (0, 0, 0.0, 0)
        self._eval_status = None
        self.query_one("#eval-bar").display = True
        self.query_one("#eval-label", Label).update(f"eval {st.name}: starting…")
        self.query_one(ProgressBar).update(total=None, progress=0)
        self._eval(self._runner, st.name, env_spec(st.ref))

    def action_stop_eval(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            self.notify(f"stopping the eval of {self._eval_env}…", timeout=2)

    @work(thread=True, exit_on_error=False, group="env-eval")
    def _eval(self, runner: AsyncRunner, name: str, spec: str) -> None:
        from workbench.runs.evaluate import EvalOptions, evaluate

        cfg = self.workbench_app.config
        opts = EvalOptions(env=spec, n=cfg.quick_eval_n, rollouts_per_task=1, concurrency=4,
                           model=cfg.model, base_url=cfg.base_url)

        def on_start(run_id: str, total: int) -> None:
            self._eval_run, self._eval_total = run_id, total

        def on_counters(c: Any) -> None:
            self._eval_counts = (c.finished, c.errors, c.reward_sum, c.scored)

        def on_status(what: str, done: int | None, total: int | None) -> None:
            self._eval_status = (what, done, total)  # read by _tick_eval, on the UI thread

        try:
            store = self.workbench_app.store.get()
            out = runner.run(lambda: evaluate(opts, store, on_start=on_start, counters_cb=on_counters,
                                              on_status=on_status))
        except WorkbenchError as e:
            self._ui(self._eval_done, name, None, for_app(e, QUICK_EVAL_LABELS))
        except (asyncio.CancelledError, KeyboardInterrupt):
            self._ui(self._eval_done, name, None, "stopped before it started")
        except Exception as e:
            self._ui(self._eval_done, name, None, f"{type(e).__name__}: {e}")
        else:
            self._ui(self._eval_done, name, out.summary, "interrupted" if out.interrupted else "")

    def _tick_eval(self) -> None:
        if self._runner is None:
            return
        finished, failed, reward_sum, scored = self._eval_counts
        bar = self.query_one(ProgressBar)
        if self._eval_total is None and self._eval_status is not None:
            what, done, of = self._eval_status  # the embedded model being built (first use) or started
            bar.update(total=of, progress=done or 0)
            count = f" {done}/{of}" if of else "…"
            self.query_one("#eval-label", Label).update(f"eval {self._eval_env}: {what}{count}  (escape stops it)")
            return
        if self._eval_total is not None:
            bar.update(total=self._eval_total, progress=finished)
        mean = fnum(reward_sum / scored) if scored else "-"
        total = "?" if self._eval_total is None else self._eval_total
        self.query_one("#eval-label", Label).update(
            f"eval {self._eval_env} {self._eval_run}: {finished}/{total}  mean reward {mean}  errors {failed}")

    def _eval_done(self, name: str, summary: dict[str, Any] | None, error: str) -> None:
        self._runner = None
        self.query_one("#eval-bar").display = False
        if summary is None:
            self.notify(f"{name}: {error}", title="quick eval failed", severity="error", timeout=10)
            return
        note = f" ({error})" if error else ""
        self.notify(f"{name} run {summary['run_id']}: mean reward {fnum(summary.get('mean_reward'))} over "
                    f"{summary['rollouts']} rollouts, {summary['errors']} errors{note}", title="quick eval done")
        self._scan(set())  # refresh the latest-run columns

    # -- editor ---------------------------------------------------------------------------------
    # -- a new environment from a template; the debugger ----------------------------------------
    def action_new_env(self) -> None:
        self.app.push_screen(NewEnvScreen(), self._env_created)

    def _env_created(self, path: Path | None) -> None:
        """List the new env, select it and open its file in $EDITOR."""
        if path is None:
            return
        self.notify(f"created {path.name} in {fpath(path.parent)}", title="new environment")
        self._open_after_scan = path
        self._scan(set())

    def _open_created(self) -> None:
        path, self._open_after_scan = self._open_after_scan, None
        if path is None:
            return
        st = next((s for s in self.envs.values() if s.ref.path == path), None)
        if st is None:
            self.notify(f"{path} is not on the environment search path; use it by path", severity="warning")
            return
        table = self.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(st.name))
        self.action_open_editor()

    def action_debug(self) -> None:
        st = self._selected_loaded()
        if st is None:
            return
        self.workbench_app.open_debugger(env_spec=env_spec(st.ref))

    def action_play(self) -> None:
        """Play the selected environment's first task yourself (the Debugger's p plays any task)."""
        st = self._selected_loaded()
        if st is None:
            return
        self.workbench_app.open_play(env_spec(st.ref), 0, st.name)

    def action_open_editor(self) -> None:
        st = self._selected()
        path = source_file(st.ref) if st else None
        if st is None or path is None:
            self.notify("this environment has no source file to open", severity="warning")
            return
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
        argv = [*shlex.split(editor), str(path)]
        try:
            with self.app.suspend():
                subprocess.call(argv)
        except FileNotFoundError:
            self.notify(f"editor {argv[0]!r} not found; set $EDITOR", severity="error")
            return
        except Exception as e:  # SuspendNotSupported and friends
            self.notify(f"cannot open an editor here ({e}); the file is {path}", severity="warning")
            return
        self._scan({st.name})

    # -- launch ---------------------------------------------------------------------------------
    def action_probe(self) -> None:
        """The adversarial probe of the selected environment (``workbench probe``), its table when done."""
        st = self._selected_loaded()
        if st is None or not self.workbench_app.require_writable("a probe"):
            return
        from workbench_app.screens.probe import ProbeScreen

        self.app.push_screen(ProbeScreen(env_spec(st.ref), st.name))

    def action_hub(self) -> None:
        """The Hub scope: the environments on a package index; back here, the list is scanned again (a pull
        or a fork adds one)."""
        from workbench_app.screens.hub import HubScreen

        self.app.push_screen(HubScreen(), lambda _: self._scan(set()))

    def action_launch(self) -> None:
        st = self._selected_loaded()
        if st is None or not self.workbench_app.require_writable("a launch"):
            return
        self.app.push_screen(LaunchScreen(st.name, env_spec(st.ref)), self._launch_confirmed)

    def _launch_confirmed(self, req: LaunchRequest | None) -> None:
        if req is None:
            return
        budget = "no budget" if req.budget_usd is None else f"budget {fcost(req.budget_usd)}"
        self.notify(f"launching {req.env}: {req.max_steps} steps on the {req.backend} backend, {budget}…",
                    title="launch", timeout=4)
        self._launch(req)

    @work(thread=True, exit_on_error=False, group="env-launch")
    def _launch(self, req: LaunchRequest) -> None:
        """``workbench launch ENV --backend local|modal``: blocks this worker thread until the run ends."""
        from workbench.training.backends import backend

        chosen = backend(req.backend)
        app = self.workbench_app
        launch = (app.modal_launcher if req.backend == "modal" else app.launcher) or chosen.launch

        def on_start(run_id: str) -> None:
            post_ui(self, self.LaunchStarted(req.env, run_id))

        try:
            store = self.workbench_app.store.get()
            if chosen.notice:
                self._ui(self.notify, chosen.notice, title=f"{req.backend} launch", severity="warning", timeout=10)
            if chosen.takes == "launch":
                out = launch(store, req.run_cfg, req.plan, budget_usd=req.budget_usd, on_start=on_start)
            else:
                out = launch(store, req.run_cfg, budget_usd=req.budget_usd, threads=1, on_start=on_start)
        except WorkbenchError as e:
            self._ui(self.notify, f"{req.env}: {for_app(str(e))}", title="launch failed", severity="error",
                     timeout=10)
        except Exception as e:
            self._ui(self.notify, f"{req.env}: {type(e).__name__}: {e}", title="launch failed", severity="error",
                     timeout=10)
        else:
            post_ui(self, self.LaunchFinished(req.env, out.run_id, out.status, out.spent_usd))

    @on(LaunchStarted)
    def _launch_started(self, event: LaunchStarted) -> None:
        self.notify(f"{event.env}: run {event.run_id} started; press 3 to follow it, S there stops it",
                    title="launched")

    @on(LaunchFinished)
    def _launch_done(self, event: LaunchFinished) -> None:
        sev = "information" if event.status == "completed" else "warning"
        self.notify(f"{event.env}: run {event.run_id} {event.status}, spent {fcost(event.spent_usd)}",
                    title="launch done", severity=sev, timeout=10)
        self._scan(set())
