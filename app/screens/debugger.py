"""Debugger: run one rollout turn by turn, or open a stored one read-only.

The rollout is a :class:`workbench.runs.debug_session.DebugSession` (what ``workbench debug`` runs) on an
event loop of its own thread, so a paused rollout keeps its client, sandbox and proxy between key
presses and a slow tool never freezes the interface. The session reports changes by setting a flag
that a timer on the UI side picks up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, ClassVar

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Header, Input, Select, Static
from workbench_app.env_state import env_spec
from workbench_app.format import clip, for_app, safe_text
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.debug_panels import (
    DebugView,
    errors_text,
    live_view,
    scores_table,
    stored_view,
    transcript,
    turns_table,
)
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.token_view import TokenView
from workbench_app.workers import SessionLoop, notify_ui, post_ui

from workbench.errors import WorkbenchError
from workbench.runs.debug_session import DebugSession


class DebuggerScreen(WorkbenchAppMixin, Screen[None]):
    TITLE = "Debugger"
    DEFAULT_CSS = """
    #dbg-controls { height: 3; padding: 0 1; }
    #dbg-env { width: 30; }
    #dbg-task { width: 14; }
    #dbg-status { width: 1fr; height: 3; padding: 0 1; content-align-vertical: middle; }
    #dbg-main { width: 1fr; }
    #dbg-messages { padding: 0 1; }
    #dbg-side { width: 48; border-left: solid $primary; padding: 0 1; }
    #dbg-side Static { margin-bottom: 1; }
    DebuggerScreen.-narrow #dbg-env { width: 22; }
    DebuggerScreen.-narrow #dbg-task { width: 10; }
    DebuggerScreen.-narrow #dbg-side { width: 40; }
    """
    NARROW = 110  # below this many columns the picker, the task and the side panel shrink
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "next_turn", "Next turn", id="debug.next"),
        Binding("r", "run_to_end", "Run to end", id="debug.run"),
        Binding("t", "toggle_tokens", "Tokens", id="debug.tokens"),
        Binding("x", "new_rollout", "New rollout", id="debug.new"),
        Binding("p", "play", "Play", id="debug.play"),
        Binding("escape", "focus_main", "Transcript", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._loop: SessionLoop | None = None
        self.session: DebugSession | None = None
        self.stored: dict[str, Any] | None = None  # the read-only rollout, when one is open
        self.busy = False
        self._dirty = False
        self._tokens_stale = True
        self._env_options: list[tuple[str, str]] = []  # (label, spec) in the environment picker

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="dbg-controls"):
            yield Select[str]([], prompt="environment", id="dbg-env", allow_blank=True)
            yield Input("0", placeholder="task #", id="dbg-task", type="integer")
            yield Static("pick an environment and a task, then n (next turn) or r (run to end)", id="dbg-status")
        with Horizontal(id="dbg-body"):
            with ContentSwitcher(initial="dbg-messages", id="dbg-main"):
                with VerticalScroll(id="dbg-messages"):
                    yield Static("", id="dbg-transcript")
                yield TokenView(id="dbg-tokens")
            with VerticalScroll(id="dbg-side"):
                yield Static("", id="dbg-turns", classes="section")
                yield Static("", id="dbg-scores", classes="section")
                yield Static("", id="dbg-errors")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.query_one("#dbg-turns").border_title = "turns"
        self.query_one("#dbg-scores").border_title = "rewards and metrics"
        self.set_interval(0.1, self._poll)
        self._list_envs()
        self._show(None)
        self.query_one("#dbg-messages").focus()

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.width < self.NARROW, "-narrow")

    def on_screen_resume(self) -> None:
        self.take_request()

    def take_request(self) -> None:
        """Open what ``app.open_debugger`` asked for (an environment, or a stored rollout)."""
        app = self.workbench_app
        request = app.debug_request
        if request is None:
            return
        app.debug_request = None
        kind, value = request
        if kind == "rollout":
            self.open_stored(value)
        else:
            self.select_env(value)

    def on_unmount(self) -> None:
        session, loop = self.session, self._loop
        self.session, self._loop = None, None
        if loop is None:
            return
        if session is not None:
            try:
                loop.submit(session.close()).result(timeout=30)
            except Exception:
                pass  # the app is closing; the run stays marked as running
        loop.stop()

    # -- environments ---------------------------------------------------------------------------
    class EnvsListed(Message, bubble=False):
        """The environments to pick from: (label, spec) each."""

        def __init__(self, envs: list[tuple[str, str]]) -> None:
            super().__init__()
            self.envs = envs

    class StoredPriced(Message, bubble=False):
        """A stored rollout's model price and score lines, read in a worker."""

        def __init__(self, rollout: dict[str, Any], price: Any, scores: Any) -> None:
            super().__init__()
            self.rollout, self.price, self.scores = rollout, price, scores

    @work(thread=True, exit_on_error=False, group="debug-envs")
    def _list_envs(self) -> None:
        try:
            refs = self.workbench_app.discover_fn()
        except Exception as e:
            notify_ui(self, f"listing environments failed: {e}", severity="error")
            return
        post_ui(self, self.EnvsListed([(r.name, env_spec(r)) for r in refs]))

    @on(EnvsListed)
    def _set_envs(self, event: EnvsListed) -> None:
        envs = event.envs
        select = self.query_one("#dbg-env", Select)
        current = select.value
        self._env_options = list(dict.fromkeys(envs))
        if isinstance(current, str) and current not in {v for _, v in self._env_options}:
            self._env_options.append((current, current))
        with select.prevent(Select.Changed):  # the same choice: the open rollout stays
            select.set_options(self._env_options)
            if isinstance(current, str):
                select.value = current
        if self.stored is not None:
            self._select_env_of(self.stored)

    def _select_env_of(self, rollout: dict[str, Any]) -> None:
        """Point the picker at a stored rollout's environment, so x re-runs its task live."""
        spec = next((v for label, v in self._env_options if label == rollout.get("env_name")), None)
        select = self.query_one("#dbg-env", Select)
        if spec is not None and select.value != spec:
            with select.prevent(Select.Changed):
                select.value = spec

    def select_env(self, spec: str, task: int | None = None) -> None:
        """Choose the environment (and task) to debug; ends whatever was open."""
        select = self.query_one("#dbg-env", Select)
        if spec not in {v for _, v in self._env_options}:
            self._env_options.append((spec, spec))
            with select.prevent(Select.Changed):
                select.set_options(self._env_options)
        with select.prevent(Select.Changed):
            select.value = spec
        if task is not None:
            self.query_one("#dbg-task", Input).value = str(task)
        self._reset()

    @on(Select.Changed, "#dbg-env")
    def _env_changed(self) -> None:
        self._reset()

    @on(Input.Submitted, "#dbg-task")
    def _task_submitted(self) -> None:
        self._reset()
        self.query_one("#dbg-messages").focus()

    def action_focus_main(self) -> None:
        self.query_one(f"#{self.query_one(ContentSwitcher).current}").focus()

    # -- a stored rollout, read-only ------------------------------------------------------------
    def open_stored(self, rollout: dict[str, Any]) -> None:
        self._reset()
        self.stored = rollout
        self._tokens_stale = True  # an open token view shows this rollout, not the empty one _reset drew
        self.query_one("#dbg-task", Input).value = str(rollout.get("task_index", 0))
        self._select_env_of(rollout)
        self._price_for_stored(rollout)
        self._show(stored_view(rollout, None))

    @work(thread=True, exit_on_error=False, group="debug-price")
    def _price_for_stored(self, rollout: dict[str, Any]) -> None:
        """Per-turn cost from the model's price; weights from the run's environment (best effort)."""
        from workbench.analysis.run_env import load_run_env
        from workbench.runs.debug_report import score_lines
        from workbench.store.prices import match_price

        store = self.workbench_app.store.get()
        price = match_price(rollout.get("model") or "", store.prices())
        try:
            scores = score_lines(load_run_env(store, rollout["run_id"]), rollout.get("rewards") or {},
                                 rollout.get("metrics") or {})
        except Exception:  # the env moved or no longer loads: the scores keep their names only
            scores = None
        post_ui(self, self.StoredPriced(rollout, price, scores))

    @on(StoredPriced)
    def _apply_stored(self, event: StoredPriced) -> None:
        if self.stored is event.rollout:
            self._show(stored_view(event.rollout, event.price, event.scores))

    # -- stepping -------------------------------------------------------------------------------
    def _reset(self) -> None:
        """Drop the open rollout: a live one is cancelled (its run is marked interrupted)."""
        session, self.session = self.session, None
        self.stored = None
        if session is not None and self._loop is not None:
            self._loop.submit(session.close())
        self._tokens_stale = True
        self._show(None)

    def _new_session(self) -> DebugSession | None:
        select = self.query_one("#dbg-env", Select)
        if not isinstance(select.value, str):
            self.notify("pick an environment first", severity="warning")
            return None
        raw = self.query_one("#dbg-task", Input).value.strip() or "0"
        try:
            task = int(raw)
        except ValueError:
            self.notify(f"the task index must be a whole number, not {raw!r}", severity="error")
            return None
        from workbench.runs.evaluate import EvalOptions

        model, base_url = self.workbench_app.config.endpoint_for("debugger")  # chosen in Settings
        opts = EvalOptions(env=select.value, model=model, base_url=base_url)
        store = self.workbench_app.store

        def changed(_: DebugSession) -> None:
            self._dirty = True  # the UI timer redraws; never block the session's loop on the UI

        if self._loop is None:
            self._loop = SessionLoop("workbench-debugger")
        try:
            # The store handle gives each thread its own connection: the session's is the loop thread's.
            session = self._loop.submit(_make_session(opts, task, store, changed)).result(timeout=10)
        except WorkbenchError as e:
            self.notify(for_app(e), title="debugger", severity="error")
            return None
        except Exception as e:  # the loop is stuck closing the previous rollout, or gone
            self.notify(f"cannot start a rollout now ({type(e).__name__}: {e}); try again", title="debugger",
                        severity="error")
            return None
        self.session = session
        return session

    def action_next_turn(self) -> None:
        self._step(lambda s: s.next_turn())

    def action_run_to_end(self) -> None:
        self._step(lambda s: s.run_to_end())

    def action_new_rollout(self) -> None:
        stored = self.stored
        self._reset()
        if stored is not None:
            self.notify(f"task {stored.get('task_index')} is ready to run live: n next turn, r run to end", timeout=4)

    def action_play(self) -> None:
        """Play the chosen environment's task # yourself (the Play screen, over this one)."""
        select = self.query_one("#dbg-env", Select)
        if not isinstance(select.value, str):
            self.notify("pick an environment first", severity="warning")
            return
        raw = self.query_one("#dbg-task", Input).value.strip() or "0"
        try:
            task = int(raw)
        except ValueError:
            self.notify(f"the task index must be a whole number, not {raw!r}", severity="error")
            return
        label = next((name for name, spec in self._env_options if spec == select.value), select.value)
        self.workbench_app.open_play(select.value, task, label)

    def _step(self, what: Any) -> None:
        if self.stored is not None:
            self.notify("this is a stored rollout (read-only); x starts a live rollout of its task", severity="warning")
            return
        if self.busy:
            self.notify("a turn is running; wait for it or press x to drop the rollout", severity="warning")
            return
        session = self.session
        if session is not None and session.done:
            self.notify("the rollout has ended; x starts a new one", severity="warning")
            return
        if session is None:
            if not self.workbench_app.require_writable("a live rollout"):
                return
            session = self._new_session()
            if session is None:
                return
        self.busy = True
        self._run(session, what(session))

    @work(exit_on_error=False, group="debug-step")
    async def _run(self, session: DebugSession, coro: Coroutine[Any, Any, Any]) -> None:
        assert self._loop is not None
        try:
            await self._loop.run(coro)
        except WorkbenchError as e:
            self.notify(clip(for_app(e), 300), title="debugger", severity="error", timeout=10)
        except (asyncio.CancelledError, KeyboardInterrupt):
            pass
        except Exception as e:  # a bug in environment code surfaces here, not as a crash
            self.notify(clip(f"{type(e).__name__}: {e}", 300), title="debugger", severity="error", timeout=10)
        finally:
            self.busy = False
            self._dirty = True
        if session is self.session and session.result is not None:
            res = session.result
            reward = "-" if res.reward is None else f"{res.reward:.3f}"
            self.notify(f"rollout {res.rollout_id}: reward {reward}, stored (Traces lists it once K shows debug runs)", title="debugger")

    # -- drawing --------------------------------------------------------------------------------
    def _poll(self) -> None:
        if self._dirty:
            self._dirty = False
            self._tokens_stale = True
            if self.session is not None:
                self._show(live_view(self.session))

    def _show(self, view: DebugView | None) -> None:
        if view is None:
            view = DebugView("", "pick an environment and a task, then n (next turn) or r (run to end)")
        self.sub_title = view.title
        self.query_one("#dbg-status", Static).update(safe_text(view.status))  # holds an error's text
        self.query_one("#dbg-transcript", Static).update(transcript(view))
        self.query_one("#dbg-turns", Static).update(turns_table(view))
        self.query_one("#dbg-scores", Static).update(scores_table(view))
        errors = self.query_one("#dbg-errors", Static)
        errors.update(errors_text(view))
        errors.display = bool(view.errors)
        self.query_one("#dbg-messages", VerticalScroll).scroll_end(animate=False)
        if self.query_one(ContentSwitcher).current == "dbg-tokens":
            self._load_tokens()

    def action_toggle_tokens(self) -> None:
        switcher = self.query_one(ContentSwitcher)
        if switcher.current == "dbg-tokens":
            switcher.current = "dbg-messages"
            self.query_one("#dbg-messages").focus()
            return
        switcher.current = "dbg-tokens"
        self._tokens_stale = True
        self._load_tokens()
        self.query_one(TokenView).focus()  # left and right move over its tokens

    def _load_tokens(self) -> None:
        if not self._tokens_stale:
            return
        self._tokens_stale = False
        view = self.query_one(TokenView)
        if self.stored is not None:
            view.load_stored(self.workbench_app.store, self.stored)
        elif self.session is not None and self.session.rollout is not None:
            view.load_live(self.session)
        else:
            view.load(lambda: None, "no rollout yet: n runs the first turn")


async def _make_session(opts: Any, task: int, store: Any, changed: Any) -> DebugSession:
    return DebugSession(opts, task, store.get(), on_change=changed)
