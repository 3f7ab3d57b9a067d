"""Environments: bundled and user environments, validate, quick eval, edit, hot reload, live re-scoring.

The screen lays out the table, the eval bar and the detail panel, binds the keys and composes one
controller per concern: :class:`Catalog` (listing, loading, the table), :class:`HotReload`,
:class:`Validation`, :class:`QuickEval`, :class:`Rescores`, :class:`Launches`, :class:`Editor` and
:class:`Handoffs` and :class:`Packages` (export as a verifiers package, import an OpenAI eval). Controllers run their work in Textual workers; a thread worker's results come back as
the controller's typed messages, which the screen hands to it here.

When a reload (hot reload on save, ``r``, or back from the editor) brings a new version of an env
that has stored rollouts, every stored rollout is re-scored with the edited rubric (``workbench
rescore``) and the reward distribution before and after is shown beside the detail panel; ``R``
re-scores on demand. The model-free probe policies play the edited environment too, and the status line
above the footer warns while an edit leaves its rubric exploitable (with no run yet, it says what to do first)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, ProgressBar, Static
from workbench_app.env_state import EnvState
from workbench_app.screens.environments.catalog import Catalog
from workbench_app.screens.environments.detail import NONE_FOUND, describe
from workbench_app.screens.environments.editor import Editor
from workbench_app.screens.environments.handoffs import Handoffs
from workbench_app.screens.environments.hot_reload import HotReload
from workbench_app.screens.environments.launches import Launches
from workbench_app.screens.environments.packages import Packages
from workbench_app.screens.environments.quick_eval import QuickEval
from workbench_app.screens.environments.rescore import ProbeFollow, Rescores
from workbench_app.screens.environments.validation import Validation
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.reward_compare import RewardCompare
from workbench_app.widgets.tables import RowTable

#: The status line of a store with no run yet.
FIRST_STEPS = "first: pick an environment, v validates it, e runs a quick eval (its rollouts land in Traces), " \
    "o edits it, n makes a new one"


class EnvironmentsScreen(WorkbenchAppMixin, Screen[None]):
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
        Binding("x", "export_package", "Export", id="env.export", show=False),  # as a verifiers package
        # Pinned by the footer: its second page shows the keys above that the first one has no room for.
        Binding("m", "footer_more", "More", id="env.more"),
    ]

    #: Posted by a launch's worker; they bubble on to the app.
    LaunchStarted = Launches.Started
    LaunchFinished = Launches.Finished

    def __init__(self) -> None:
        super().__init__()
        self.catalog = Catalog(self)
        self.hot_reload = HotReload(self)
        self.validation = Validation(self)
        self.quick_eval = QuickEval(self)
        self.rescores = Rescores(self)
        self.probe_follow = ProbeFollow(self)
        self.launches = Launches(self)
        self.editor = Editor(self)
        self.handoffs = Handoffs(self)
        self.packages = Packages(self)

    @property
    def envs(self) -> dict[str, EnvState]:
        return self.catalog.envs

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
        yield Static("", id="env-status")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.catalog.add_columns()
        self.query_one("#eval-bar").display = False
        self.set_interval(0.2, self.quick_eval.tick)
        self.catalog.scan(set())

    def on_unmount(self) -> None:
        self.quick_eval.cancel()
        self.hot_reload.stop()
        self.rescores.cancel_all()
        self.probe_follow.cancel_all()

    def on_resize(self) -> None:
        """The status column fits the new width: error messages are clipped to it, never cut by it."""
        self.call_after_refresh(self.catalog.refit)

    # -- selection and the detail panel ---------------------------------------------------------
    def _selected(self) -> EnvState | None:
        return self.catalog.selected()

    def _selected_loaded(self) -> EnvState | None:
        """The selected environment if it loads; otherwise None, with a notification saying so."""
        st = self._selected()
        if st is not None and st.status == "error":
            self.notify(f"{st.name} does not load; fix it first", severity="error")
            return None
        return st

    @on(DataTable.RowHighlighted)
    def show_detail(self) -> None:
        st = self._selected()
        self.rescores.show(st)
        self.query_one("#env-detail", Static).update(NONE_FOUND if st is None else describe(st))
        self.show_status()

    def show_status(self) -> None:
        """The status line: what the latest edits made exploitable; else how many of the selected environment's
        stored scores are older than its rubric (known once re-scored); with no run of any environment yet,
        what to do first; hidden when there is none of these."""
        line = self.query_one("#env-status", Static)
        warnings = list(self.probe_follow.warnings.values())
        st = self._selected()
        stale = self.rescores.stale.get(st.name, "") if st is not None else ""
        text = "⚠ " + "; ".join(warnings) if warnings else stale if stale else \
            FIRST_STEPS if self.envs and not any(e.latest for e in self.envs.values()) else ""
        line.set_class(bool(warnings), "-warning")
        line.update(Text(text))
        line.display = bool(text)

    # -- what the workers report ----------------------------------------------------------------
    @on(Catalog.Listed)
    def _listed(self, event: Catalog.Listed) -> None:
        self.catalog.apply_listing(event.states)
        if event.states is None:
            return
        if event.watch is not None:
            self.hot_reload.follow(event.watch)
        self.show_detail()
        self.show_status()
        self.editor.open_created()
        self.packages.select_imported()

    @on(Catalog.Loaded)
    def _loaded(self, event: Catalog.Loaded) -> None:
        st, edited = self.catalog.apply_load(event.result)
        if st is None:
            return
        if st.status == "error":
            self.rescores.cancel(st)
            self.probe_follow.forget(st)
            self.show_status()
        self.show_detail()
        if edited:
            self.rescores.start(st, quiet=True)  # an edit: show what it does to the stored rollouts
            self.probe_follow.start(st)  # and whether the edited rubric pays a policy that should earn nothing

    @on(Validation.Done)
    def _validated(self, event: Validation.Done) -> None:
        self.validation.apply(event)

    @on(QuickEval.Finished)
    def _evaluated(self, event: QuickEval.Finished) -> None:
        self.quick_eval.finish(event)

    @on(Rescores.Progress)
    def _rescore_progress(self, event: Rescores.Progress) -> None:
        self.rescores.progress(event)

    @on(Rescores.Done)
    def _rescored(self, event: Rescores.Done) -> None:
        self.rescores.finish(event)

    @on(ProbeFollow.Done)
    def _probed(self, event: ProbeFollow.Done) -> None:
        if self.probe_follow.finish(event):
            self.show_status()

    @on(Launches.Started)
    def _launch_started(self, event: Launches.Started) -> None:
        self.launches.started(event)

    @on(Launches.Finished)
    def _launch_finished(self, event: Launches.Finished) -> None:
        self.launches.finished(event)

    @on(Packages.Imported)
    def _imported(self, event: Packages.Imported) -> None:
        self.packages.imported(event)

    # -- the keys -------------------------------------------------------------------------------
    def action_reload(self) -> None:
        st = self._selected()
        self.catalog.scan({st.name} if st else set(self.envs))

    def action_validate(self) -> None:
        st = self._selected()
        if st is not None:
            self.validation.start(st)

    def action_quick_eval(self) -> None:
        st = self._selected()
        if st is not None:
            self.quick_eval.start(st)

    def action_stop_eval(self) -> None:
        self.quick_eval.stop()

    def action_rescore(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.rescores.start(st, quiet=False)

    def action_open_editor(self) -> None:
        self.editor.open(self._selected())

    def action_new_env(self) -> None:
        self.editor.new_env()

    def action_launch(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.launches.open_dialog(st)

    def action_debug(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.handoffs.debug(st)

    def action_play(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.handoffs.play(st)

    def action_probe(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.handoffs.probe(st)

    def action_export_package(self) -> None:
        st = self._selected_loaded()
        if st is not None:
            self.packages.export(st)

    def action_import_eval(self) -> None:
        self.packages.import_eval()

    def action_hub(self) -> None:
        self.handoffs.hub()

    def action_footer_more(self) -> None:
        self.query_one(WorkbenchFooter).toggle_more()
