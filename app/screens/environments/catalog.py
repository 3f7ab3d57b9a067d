"""The Environments screen's catalog: which environments there are, each one's load, and the table of them.

A scan lists the environments, their versions and latest runs in a thread worker, then (re)loads the new
ones and those asked for; each step comes back as a typed message (:class:`Catalog.Listed`,
:class:`Catalog.Loaded`) that the screen hands to :meth:`Catalog.apply_listing` / :meth:`Catalog.apply_load`.
Whoever needs the environments once they are all loaded (the command palette) asks :meth:`Catalog.when_loaded`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable
from workbench_app.env_state import EnvState, LoadResult, load_env, safe_version, watch_dirs
from workbench_app.format import clip, fnum
from workbench_app.workers import notify_ui, post_ui

if TYPE_CHECKING:
    from workbench_app.screens.environments.host import EnvironmentsHost

#: The kinds of run whose reward is an environment's "latest reward": the user's evaluations and training,
#: never a probe, a validation, a debugger or a Play session.
LATEST_RUN_KINDS = ("eval", "train")

#: The origin column names an environment's dialect beside its origin when it is not Workbench's own
#: (``path · harbor``); the detail panel names every environment's.
COLUMNS = [("env", "name"), ("origin", "origin"), ("version", "version"), ("tasks", "tasks"),
           ("latest reward", "reward"), ("latest run", "run"), ("status", "status")]


class Catalog:
    """``envs`` (name -> :class:`EnvState`) and the table that shows them."""

    class Listed(Message):
        """A scan has listed the environments (``states``); ``watch`` are the folders to watch for hot reload
        (None: hot reload is off, or the folders could not be made)."""

        def __init__(self, states: list[EnvState] | None, watch: list[Path] | None) -> None:
            super().__init__()
            self.states, self.watch = states, watch

    class Loaded(Message):
        """One environment has been (re)loaded, or failed to."""

        def __init__(self, result: LoadResult) -> None:
            super().__init__()
            self.result = result

    def __init__(self, screen: EnvironmentsHost) -> None:
        self.screen = screen
        self.envs: dict[str, EnvState] = {}
        self.listed = False  # a first scan has come back
        self._after_load: list[Callable[[], object]] = []

    # -- scanning -------------------------------------------------------------------------------
    def scan(self, reload: set[str]) -> None:
        """List the envs, their versions and latest runs; then (re)load the new ones and ``reload``."""
        self.screen.run_worker(lambda: self._scan(reload, set(self.envs)), thread=True, exit_on_error=False,
                               group="env-scan")

    def _scan(self, reload: set[str], known: set[str]) -> None:
        screen, app = self.screen, self.screen.workbench_app
        try:
            from workbench.store.queries import list_runs

            refs = app.discover_fn()
        except Exception as e:
            notify_ui(screen, f"listing environments failed: {e}", severity="error")
            post_ui(screen, self.Listed(None, None))
            return
        latest: dict[str, dict[str, Any]] = {}
        try:
            for run in list_runs(app.store.get().conn, limit=1000, kinds=LATEST_RUN_KINDS):
                if run["status"] == "interrupted" and not run["rollouts"]:
                    continue  # stopped before anything finished (escape on a quick eval): not a result
                latest.setdefault(run["env_name"], run)
        except Exception as e:
            notify_ui(screen, f"reading runs failed: {e}", severity="error")
        states = [EnvState(r, version=safe_version(r), latest=latest.get(r.name)) for r in refs]
        watch: list[Path] | None = None
        if app.watch_envs:
            try:
                watch = watch_dirs(refs)  # creates a missing user env folder, so its first env is watched
            except OSError as e:
                notify_ui(screen, f"hot reload is off: {e}; press r to reload by hand", severity="warning")
        post_ui(screen, self.Listed(states, watch))
        for st in states:
            if st.name not in known or st.name in reload:
                post_ui(screen, self.Loaded(load_env(st.ref, reload=st.name in known)))

    def apply_listing(self, states: list[EnvState] | None) -> None:
        self.listed = True
        if states is None:
            self._flush_after_load()
            return
        table = self.screen.query_one(DataTable)
        names = {s.name for s in states}
        for gone in [n for n in self.envs if n not in names]:
            del self.envs[gone]
            table.remove_row(gone)
        for st in states:
            old = self.envs.get(st.name)
            if old is not None:
                old.ref, old.version, old.latest = st.ref, st.version, st.latest
                self.update_row(old)
            else:
                self.envs[st.name] = st
                table.add_row(*self._cells(st), key=st.name)
        self.refit()
        self._flush_after_load()

    def apply_load(self, res: LoadResult) -> tuple[EnvState | None, bool]:
        """``res`` into its environment's state and row; returns the state (None when it has gone) and
        whether the load is an edit of it (a reload of another version), whose re-score is worth showing."""
        st = self.envs.get(res.name)
        if st is None:
            return None, False
        was_error, before = st.status == "error", st.loaded_version
        st.version, st.status, st.message, st.tasks = res.version, res.status, res.message, res.tasks
        if res.status == "ok":
            st.loaded_version, st.framework = res.version, res.framework
        st.dialect = res.dialect or st.dialect
        if st.report_files != res.files:  # the validation was of other files: it says nothing now
            st.report, st.report_error, st.report_files = None, "", ""
        if res.status == "error":  # its re-score is of a version that no longer loads
            st.rescore = None
        self.update_row(st)
        self.refit()  # this row's values may have narrowed or widened the others' room
        if res.status == "error":
            self.screen.notify(f"{res.name}: {clip(res.message, 200)}", title="environment failed to load",
                               severity="error", timeout=6)
        elif was_error:
            self.screen.notify(f"{res.name} reloaded (version {res.version})", timeout=3)
        self._flush_after_load()
        return st, res.status == "ok" and res.reloaded and before != res.version

    # -- waiting for the catalog ----------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        """Listed, and no environment still loading."""
        return self.listed and all(st.status != "loading" for st in self.envs.values())

    def when_loaded(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` (on the UI thread) once the environments are listed and loaded: at once if they are."""
        self._after_load.append(callback)
        self._flush_after_load()

    def _flush_after_load(self) -> None:
        if not self.loaded or not self._after_load:
            return
        callbacks, self._after_load = self._after_load, []
        for callback in callbacks:
            self.screen.call_after_refresh(callback)

    # -- the table ------------------------------------------------------------------------------
    def add_columns(self) -> None:
        table = self.screen.query_one(DataTable)
        for label, key in COLUMNS:
            table.add_column(label, key=key)

    def selected(self) -> EnvState | None:
        table = self.screen.query_one(DataTable)
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return None
        return self.envs.get(str(key))

    def select(self, st: EnvState) -> None:
        table = self.screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(st.name))

    @staticmethod
    def _plain_cells(st: EnvState) -> list[str]:
        """Every cell of ``st``'s row but the status."""
        latest = st.latest or {}
        dialect = st.dialect or st.ref.format or "workbench"
        origin = st.ref.origin if dialect == "workbench" else f"{st.ref.origin} · {dialect}"
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
        table = self.screen.query_one(DataTable)
        width = table.scrollable_content_region.width or self.screen.app.size.width
        rows = [self._plain_cells(st) for st in self.envs.values()]
        others = sum(max([len(label), *(len(r[i]) for r in rows)]) + 2 * table.cell_padding
                     for i, (label, _) in enumerate(COLUMNS[:-1]))
        return max(len("error: …") + 2, width - others - 2 * table.cell_padding)

    def update_row(self, st: EnvState) -> None:
        """Every cell of ``st``'s row; the columns widen or narrow to what they hold now."""
        table = self.screen.query_one(DataTable)
        for (_, key), value in zip(COLUMNS, self._cells(st), strict=True):
            table.update_cell(st.name, key, value, update_width=True)

    def refit(self) -> None:
        """The error statuses again, clipped to the room the other columns leave now."""
        table = self.screen.query_one(DataTable)
        for st in self.envs.values():
            if st.status == "error" and st.name in table.rows:
                table.update_cell(st.name, "status", self._cells(st)[-1], update_width=True)
