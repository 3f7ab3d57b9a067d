"""The Workbench terminal app: ``workbench`` with no command runs :func:`run_app`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import App
from textual.binding import Binding, BindingType
from workbench_app.commands import WorkbenchCommands
from workbench_app.config import TuiConfig, load_config
from workbench_app.format import fpath, visible
from workbench_app.screens.costs import CostsScreen
from workbench_app.screens.debugger import DebuggerScreen
from workbench_app.screens.environments import EnvironmentsScreen
from workbench_app.screens.help import HelpScreen, binding_rows
from workbench_app.screens.play import PlayScreen
from workbench_app.screens.rollout_detail import RolloutDetailScreen
from workbench_app.screens.rollout_diff import RolloutDiffScreen
from workbench_app.screens.runs import RunsScreen
from workbench_app.screens.settings import SettingsScreen
from workbench_app.screens.traces import TracesScreen
from workbench_app.screens.traffic import TrafficScreen
from workbench_app.screens.trajectory_import import TrajectoryImport
from workbench_app.store_access import StoreHandle
from workbench_app.typed import WorkbenchHost

from workbench.authoring import discovery
from workbench.authoring.discovery import EnvRef
from workbench.config import paths


class WorkbenchApp(App[None]):
    """Screens are modes: each keeps its own stack (Traces -> rollout detail), switched by 1/2/3/4.

    Screens reach these attributes through ``workbench_app`` (:class:`workbench_app.typed.WorkbenchAppMixin`),
    typed as the :class:`~workbench_app.typed.WorkbenchHost` protocol this class satisfies;
    what their workers produce for another screen arrives here as typed messages (the ``@on`` handlers)."""

    TITLE = "Workbench"
    CSS_PATH = "workbench.tcss"
    COMMANDS = App.COMMANDS | {WorkbenchCommands}
    MODES: ClassVar = {
        "environments": EnvironmentsScreen,
        "traces": TracesScreen,
        "runs": RunsScreen,
        "costs": CostsScreen,
        "debugger": DebuggerScreen,
        "settings": SettingsScreen,
        "traffic": TrafficScreen,
    }
    DEFAULT_MODE = "environments"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "switch_mode('environments')", "Envs", id="screen.environments"),
        Binding("2", "switch_mode('traces')", "Traces", id="screen.traces"),
        Binding("3", "switch_mode('runs')", "Runs", id="screen.runs"),
        Binding("4", "switch_mode('costs')", "Costs", id="screen.costs"),
        Binding("5", "switch_mode('debugger')", "Debugger", id="screen.debugger", show=False),
        Binding("6", "switch_mode('settings')", "Settings", id="screen.settings", show=False),
        Binding("7", "switch_mode('traffic')", "Traffic", id="screen.traffic", show=False),
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("ctrl+t", "toggle_theme", "Light/dark theme", id="app.theme", show=False),
        Binding("q", "quit", "Quit", id="app.quit"),
    ]

    def __init__(
        self,
        db: Path | str,
        *,
        config: TuiConfig | None = None,
        discover_fn: Callable[[], list[EnvRef]] | None = None,
        watch: bool = True,
        mode: str | None = None,
        launcher: Callable[..., Any] | None = None,
        modal_launcher: Callable[..., Any] | None = None,
    ) -> None:
        """``db`` is the store file. ``discover_fn`` lists the environments (default: bundled, user and
        installed ones); ``watch`` turns hot reload on; ``mode`` is the first screen; ``launcher`` and
        ``modal_launcher`` run a launch from the Environments screen on the local and modal backends
        (default: the backend's own, ``workbench_cloud.launch.launch_local`` for local)."""
        if mode is not None:
            self.DEFAULT_MODE = mode  # type: ignore[misc]  # read by App.__init__
        super().__init__()
        self.config = config or load_config()
        self.store = StoreHandle(db)
        self.discover_fn = discover_fn or discovery.discover
        self.watch_envs = watch
        self.launcher = launcher
        self.modal_launcher = modal_launcher
        self.debug_request: tuple[str, Any] | None = None  # what the Debugger opens when shown next
        for attr in ("theme", "light_theme"):
            name = getattr(self.config, attr)
            if name not in self.available_themes:
                self.config.problems.append(f"tui.toml: unknown {attr} {name!r}; known: "
                                            f"{', '.join(sorted(self.available_themes))}")
                setattr(self.config, attr, TuiConfig.model_fields[attr].default)
        self.theme = self.config.theme
        if self.config.keymap:
            self.set_keymap(self.config.keymap)

    @property
    def db_path(self) -> Path:
        return self.store.path

    def on_mount(self) -> None:
        self.sub_title = fpath(self.db_path) + (" (read-only)" if self.store.readonly else "")
        for problem in self.config.problems:
            self.notify(problem, severity="warning", timeout=8)
        if self.store.readonly:
            self.notify(f"{fpath(self.db_path)} cannot be written here, so it is open read-only: browse runs, "
                        "traces and costs; quick eval, launch and live debugging are off until it is writable "
                        "(its permissions, `chattr -i`, or the mount)", title="read-only store",
                        severity="warning", timeout=12)

    def notify(self, message: str, **kwargs: Any) -> None:
        """A notification, as text: what it says often holds data (an error's text, a name), so it is never
        parsed as markup (a screen's ``notify`` passes ``markup=True``: overruled) and its control characters
        are shown."""
        super().notify(visible(message), **{**kwargs, "markup": False})

    def require_writable(self, what: str) -> bool:
        """True if the store can be written; else one clear error saying ``what`` needs it, and False."""
        if not self.store.readonly:
            return True
        self.notify(f"{what} writes to the store, and {fpath(self.db_path)} is read-only here; make it writable "
                    "(its permissions, `chattr -i`, or the mount) or open the app on another store "
                    "(workbench --db PATH)", title="read-only store", severity="error", timeout=10)
        return False

    def on_unmount(self) -> None:
        self.store.close()

    async def action_quit(self) -> None:
        """Say so at once: stopping what still runs (a quick eval, a debug session, workers) takes a moment."""
        self.notify("quitting: stopping what still runs…", title="quit", timeout=30)
        self.call_after_refresh(self.exit)

    def open_debugger(self, *, env_spec: str | None = None, rollout: dict[str, Any] | None = None) -> None:
        """Show the Debugger on an environment (its spec, as ``workbench debug`` takes it) or on a
        stored rollout (a ``get_rollout`` row, opened read-only)."""
        if rollout is not None:
            self.debug_request = ("rollout", rollout)
        elif env_spec is not None:
            self.debug_request = ("env", env_spec)
        if isinstance(self.screen, DebuggerScreen):
            self.screen.take_request()  # already showing: it takes the request now
        else:
            self.switch_mode("debugger")

    def open_play(self, env_spec: str, task_index: int = 0, env_name: str | None = None) -> None:
        """Play task ``task_index`` of an environment yourself: the Play screen, over the one shown."""
        if self.require_writable("playing an environment"):
            self.push_screen(PlayScreen(env_spec, task_index, env_name))

    # -- what the screens' workers post for another screen -----------------------------------------
    @on(TracesScreen.RolloutLoaded)
    def _show_rollout(self, event: TracesScreen.RolloutLoaded) -> None:
        self.push_screen(RolloutDetailScreen(event.rollout, search=event.search))

    @on(TracesScreen.DiffLoaded)
    def _show_diff(self, event: TracesScreen.DiffLoaded) -> None:
        self.push_screen(RolloutDiffScreen(event.diff))

    @on(EnvironmentsScreen.LaunchStarted)
    @on(EnvironmentsScreen.LaunchFinished)
    @on(TrajectoryImport.Imported)
    def _runs_changed(self) -> None:
        """A launch or an import added or finished a run: the Runs or Costs screen, if shown, reads it now (the
        others refresh when shown). One that arrives while the app is closing finds no screen: nothing to do."""
        if not self.screen_stack:
            return
        screen = self.screen
        if isinstance(screen, RunsScreen | CostsScreen):
            screen.action_refresh()

    def action_help(self) -> None:
        if isinstance(self.screen, HelpScreen):
            return
        title = self.screen.title or self.current_mode
        self.push_screen(HelpScreen(binding_rows(self.screen), str(title)))

    def action_toggle_theme(self) -> None:
        cfg = self.config
        self.theme = cfg.light_theme if self.theme != cfg.light_theme else cfg.theme
        self.notify(f"theme: {self.theme}", timeout=2)


if TYPE_CHECKING:
    _SCREENS_HOST: type[WorkbenchHost] = WorkbenchApp  # mypy checks that the app provides what its screens use


def run_app(db: str | None) -> None:
    """Open the app on the store ``db`` (default: the XDG data dir, or ``WORKBENCH_DB``)."""
    WorkbenchApp(db or paths.default_db()).run()
