"""Play: you are the policy. One rollout of an environment's task in which you write each assistant turn.

The rollout is :func:`workbench.runs.play_session.play` (what ``workbench play`` runs) on an event loop of its
own thread (:class:`~workbench_app.workers.SessionLoop`, as the Debugger's session), so the environment's harness,
tools, sandbox and rubric run as they do for a model and a slow tool never freezes the interface. Its policy is
:class:`AppPolicy`: each turn the harness asks for is posted to this screen (:class:`PlayScreen.TurnAsked`)
with the conversation and the tools offered, and ``reply`` awaits the answer written here — a text reply, a
tool call from the form built from the tool's JSON schema (checked with ``check_call``, the error shown on the
field it names), or both. Escape stops (after a confirm once a turn is written): nothing is stored. At the end
the reward, the rubric's scores and the rollout id are shown; the rollout is stored with source ``human``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Static, TextArea
from workbench_app.format import clip, fnum, for_app, safe_text
from workbench_app.screens.dialog import Dialog
from workbench_app.screens.rollout_detail import scores_table
from workbench_app.store_access import StoreHandle
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.debug_panels import DebugView, transcript
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.tool_form import ToolForm
from workbench_app.workers import SessionLoop, post_ui

from workbench.errors import WorkbenchError
from workbench.rollouts.human import Message as ChatMessage
from workbench.rollouts.human import PlayStopped, ReplyError, check_call, parse_reply, tool_call

_STOPPED = "stopped in the app before the rollout ended: nothing was stored"


class AppPolicy:
    """A :class:`~workbench.rollouts.human.HumanPolicy` whose turns are written on a :class:`PlayScreen`.

    ``reply`` runs on the play session's loop: it posts the turn to the screen and awaits a future on that
    loop, which :meth:`answer` (from the UI thread) resolves with the written message and :meth:`stop` with
    nothing, which ``reply`` raises as :class:`PlayStopped`."""

    def __init__(self, name: str, screen: PlayScreen) -> None:
        self.name = name
        self._screen = screen
        self._pending: tuple[asyncio.AbstractEventLoop, asyncio.Future[ChatMessage | None]] | None = None
        self.stopped = False

    async def reply(self, messages: list[ChatMessage], tools: list[dict[str, Any]] | None) -> ChatMessage:
        if self.stopped:
            raise PlayStopped(_STOPPED)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ChatMessage | None] = loop.create_future()
        self._pending = (loop, future)
        post_ui(self._screen, PlayScreen.TurnAsked(list(messages), tools))
        try:
            msg = await future
        finally:
            self._pending = None
        if msg is None:
            raise PlayStopped(_STOPPED)
        return msg

    def _resolve(self, value: ChatMessage | None) -> bool:
        pending = self._pending
        if pending is None:
            return False
        loop, future = pending

        def settle() -> None:
            if not future.done():
                future.set_result(value)

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop is closed: the session is over
            return False
        return True

    def answer(self, msg: ChatMessage) -> bool:
        """Send the written turn (from any thread); False when no turn is waiting for one."""
        return self._resolve(msg)

    def stop(self) -> None:
        """End the session: the turn waited for (or the next one asked) raises PlayStopped."""
        self.stopped = True
        self._resolve(None)


def stop_question(turns: int) -> str:
    """What the confirm asks when ``turns`` turns are written and the rollout has not ended."""
    written = "1 turn you wrote is" if turns == 1 else f"{turns} turns you wrote are"
    return f"Stop playing? The {written} not stored (the rollout has not ended).  y stops, n keeps playing"


class ConfirmStop(Dialog[bool]):
    """Stop playing? What was written is not stored."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Stop", id="play.confirm_stop"),
        Binding("n,escape", "answer(False)", "Keep playing", id="play.keep_playing"),
    ]
    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    #stop-box { width: 60; max-width: 95%; height: auto; border: thick $warning; background: $surface;
                padding: 0 1; }
    #stop-text { height: auto; margin-bottom: 1; }
    #stop-buttons { height: 3; align-horizontal: right; }
    #stop-buttons Button { margin-left: 1; }
    """

    def __init__(self, turns: int) -> None:
        super().__init__()
        self.turns = turns

    def compose(self) -> ComposeResult:
        with Vertical(id="stop-box"):
            yield Static(stop_question(self.turns), id="stop-text")
            with Horizontal(id="stop-buttons"):
                yield Button("Stop", variant="warning", id="stop-yes")
                yield Button("Keep playing", id="stop-no")

    def action_answer(self, stop: bool) -> None:
        self.dismiss(stop)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "stop-yes")


class PlayScreen(WorkbenchAppMixin, Screen[None]):
    """Pushed over Environments (``p``: its task 0) or the Debugger (``p``: the task # there)."""

    TITLE = "Play"
    DEFAULT_CSS = """
    #play-status { height: auto; max-height: 2; padding: 0 1; color: $text-muted; }
    #play-body { height: 1fr; }
    #play-messages { width: 1fr; padding: 0 1; }
    #play-side { width: 50%; max-width: 64; border-left: solid $primary; padding: 0 1; }
    #play-reply { height: 5; }
    #play-reply-error { height: auto; color: $error; display: none; }
    #play-reply-error.-shown { display: block; }
    .play-label { height: 1; color: $text-muted; }
    #play-result { height: auto; display: none; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "submit", "Send turn", id="play.submit", priority=True),
        Binding("escape", "stop", "Stop", id="play.stop"),
        Binding("ctrl+r", "focus_reply", "Reply", id="play.reply", show=False),
        Binding("ctrl+o", "focus_tool", "Tool", id="play.tool", show=False),
    ]

    class TurnAsked(Message):
        """The harness asks for the next assistant turn (posted from the play session's loop)."""

        def __init__(self, messages: list[ChatMessage], tools: list[dict[str, Any]] | None) -> None:
            super().__init__()
            self.messages, self.tools = messages, tools

    def __init__(self, env_spec: str, task_index: int = 0, env_name: str | None = None) -> None:
        super().__init__()
        self.env_spec = env_spec
        self.task_index = task_index
        self.env_name = env_name or env_spec
        self.policy: AppPolicy | None = None
        self._loop: SessionLoop | None = None
        self._future: concurrent.futures.Future[Any] | None = None
        self.messages: list[ChatMessage] = []
        self.tools: list[dict[str, Any]] | None = None
        self.turn_starts: dict[int, int] = {}  # message index -> the turn (1-based) that wrote it
        self.waiting = False  # a turn is asked for and not yet sent
        self.turns_written = 0
        self.state = "starting"  # starting | turn | sent | done | failed | stopped
        self.result: Any = None  # the PlayResult, when the rollout has ended
        self.rollout: dict[str, Any] | None = None  # the stored rollout, read back

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="play-status")
        with Horizontal(id="play-body"):
            with VerticalScroll(id="play-messages"):
                yield Static("", id="play-transcript")
            with VerticalScroll(id="play-side"):
                with Vertical(id="play-composer"):
                    yield Static("your reply (or /call NAME {json})", classes="play-label")
                    yield TextArea("", id="play-reply", soft_wrap=True, show_line_numbers=False)
                    yield Static("", id="play-reply-error")
                    yield Static("and/or a tool call", classes="play-label")
                    yield ToolForm(id="play-tool")
                yield Static("", id="play-result")
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.sub_title = f"{self.env_name} · task {self.task_index}"
        self._set_status(f"starting: loading {self.env_name} and its task {self.task_index}…")
        self._draw()
        self._enable(False)
        from workbench.runs.play_session import person_name

        self.policy = AppPolicy(person_name(), self)
        self._loop = SessionLoop("workbench-play")
        # a simulated user's model: the one chosen for it in Settings, else the quick-eval endpoint (else embedded)
        model, base_url = self.workbench_app.config.endpoint_for("play_user")
        self._future = self._loop.submit(_play(self.env_spec, self.task_index, self.workbench_app.store,
                                               self.policy, base_url, model))
        self._await_play(self._future)

    def on_unmount(self) -> None:
        """Leaving (escape, or the app quitting) stops a rollout still waiting: nothing is stored."""
        policy, loop, future = self.policy, self._loop, self._future
        self._loop = None
        if policy is not None:
            policy.stop()
        if future is not None:
            try:
                future.result(timeout=30)
            except BaseException:  # noqa: BLE001 - PlayStopped, or whatever the session ended with
                pass
        if loop is not None:
            loop.stop()

    # -- the session ----------------------------------------------------------------------------
    @work(exit_on_error=False, group="play")
    async def _await_play(self, future: concurrent.futures.Future[Any]) -> None:
        wrapped = asyncio.wrap_future(future)
        wrapped.add_done_callback(_retrieved)  # left (the screen gone) before the end: its outcome is read still
        try:
            result = await asyncio.shield(wrapped)
        except PlayStopped:
            self.state = "stopped"
            return
        except WorkbenchError as e:
            self._failed(for_app(e))
        except asyncio.CancelledError:
            return
        except Exception as e:  # a bug in environment code surfaces here, not as a crash
            self._failed(f"{type(e).__name__}: {e}")
        else:
            self._finished(result)

    @on(TurnAsked)
    def _turn_asked(self, event: TurnAsked) -> None:
        if self.state in ("stopped", "done", "failed"):
            return
        turn = self.turns_written + 1
        self.messages = event.messages
        self.turn_starts[len(event.messages)] = turn
        self.tools = event.tools
        form = self.query_one(ToolForm)
        form.set_tools(event.tools)
        self.query_one("#play-reply", TextArea).text = ""
        self._reply_error("")
        self.waiting, self.state = True, "turn"
        self._enable(True)
        tools = f", or choose a tool ({len(form.schemas)} offered) and fill its arguments" if form.schemas else ""
        self._set_status(f"turn {turn}: write the assistant's reply{tools}; ctrl+s sends")
        self._draw()
        self.query_one("#play-reply", TextArea).focus()

    def _finished(self, result: Any) -> None:
        from workbench.store.queries import get_rollout

        self.state, self.result, self.waiting = "done", result, False
        try:
            self.rollout = get_rollout(self.workbench_app.store.get().conn, result.rollout_id)
        except Exception:  # the transcript keeps what was shown; the result is still said below
            self.rollout = None
        if self.rollout is not None:
            self.messages = list(self.rollout.get("messages") or self.messages)
        self._enable(False)
        self.query_one("#play-composer").display = False
        box = self.query_one("#play-result", Static)
        box.update(self._result_text(result))
        box.display = True
        status = "ok" if result.status == "ok" else result.status
        self._set_status(f"done ({status}): reward {fnum(result.reward)}; stored as {result.rollout_id} with "
                         "source human (Traces: 2, then K for play runs) · escape goes back")
        self._draw()
        self.notify(f"rollout {result.rollout_id}: reward {fnum(result.reward)}, stored with source human "
                    "(Traces lists it once K shows play runs)", title="play")

    def _result_text(self, result: Any) -> Group:
        name = self.policy.name if self.policy is not None else ""
        head = Text()
        head.append("rollout ", style="bold")
        head.append(f"{result.rollout_id}\n", style="bold")
        head.append(f"run {result.run_id} · source human · played by {name}\n", style="dim")
        head.append("status ")
        head.append(result.status, style="green" if result.status == "ok" else "bold red")
        head.append("\ntotal reward ", style="bold")
        head.append(fnum(result.reward), style="bold")
        parts: list[Any] = [head, Text("rewards and metrics", style="bold underline"),
                            scores_table({"rewards": result.rewards, "metrics": result.metrics})]
        if result.errors:
            errs = Text()
            for e in result.errors:
                errs.append(str(e.get("kind")), style="bold red")
                errs.append(f" in {e.get('source')}: {e.get('message')}\n")
            parts.append(errs)
        return Group(*parts)

    def _failed(self, message: str) -> None:
        self.state, self.waiting = "failed", False
        self._enable(False)
        self._set_status(f"failed: {clip(message, 300)} · nothing was stored · escape goes back")
        self.notify(clip(message, 300), title="play", severity="error", timeout=10)

    # -- writing a turn -------------------------------------------------------------------------
    def action_submit(self) -> None:
        if not self.waiting or self.policy is None:
            what = {"starting": "the session is starting", "sent": "the environment is answering your turn",
                    "done": "the rollout has ended", "failed": "the session has failed"}.get(self.state, "")
            self.notify(f"not your turn: {what}" if what else "not your turn", severity="warning", timeout=3)
            return
        msg = self._written()
        if msg is None:
            return
        if not self.policy.answer(msg):
            self.notify("the session is no longer waiting for a turn", severity="warning")
            return
        self.turns_written += 1
        self.waiting, self.state = False, "sent"
        self.messages = [*self.messages, msg]
        self._enable(False)
        self._set_status(f"turn {self.turns_written} sent: the environment is answering…")
        self._draw()

    def _written(self) -> ChatMessage | None:
        """The turn written (a text reply, a tool call, or both), or None with the error shown where it is."""
        form = self.query_one(ToolForm)
        text = self.query_one("#play-reply", TextArea).text
        self._reply_error("")
        form.clear_errors()
        name = form.tool
        if name is None:
            try:
                return parse_reply(text, self.tools)
            except ReplyError as e:
                self._reply_error(e.message)
                return None
        try:
            args = form.arguments()
            check_call(name, args, self.tools)
        except ReplyError as e:
            form.show_error(e.message, e.field)
            return None
        try:
            msg: ChatMessage = parse_reply(text, self.tools) if text.strip() else {"role": "assistant", "content": None}
        except ReplyError as e:
            self._reply_error(e.message)
            return None
        msg["tool_calls"] = [*(msg.get("tool_calls") or []), tool_call(name, args)]
        return msg

    @on(Input.Submitted, "ToolForm Input")
    def _field_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def _reply_error(self, message: str) -> None:
        err = self.query_one("#play-reply-error", Static)
        err.update(safe_text(message))
        err.set_class(bool(message), "-shown")

    def action_focus_reply(self) -> None:
        self.query_one("#play-reply", TextArea).focus()

    def action_focus_tool(self) -> None:
        self.query_one("#tool-select").focus()

    # -- stopping -------------------------------------------------------------------------------
    def action_stop(self) -> None:
        if self.state in ("done", "failed", "stopped") or self.turns_written == 0:
            self._leave()
            return
        self.app.push_screen(ConfirmStop(self.turns_written), self._confirmed)

    def _confirmed(self, stop: bool | None) -> None:
        if stop:
            self._leave()

    def _leave(self) -> None:
        if self.state not in ("done", "failed"):
            self.state = "stopped"
            if self.policy is not None:
                self.policy.stop()
            self.notify("stopped: nothing was stored", title="play", timeout=4)
        self.app.pop_screen()  # on_unmount waits for the session to end

    # -- drawing --------------------------------------------------------------------------------
    def _set_status(self, text: str) -> None:
        self.query_one("#play-status", Static).update(text)

    def _enable(self, on: bool) -> None:
        self.query_one("#play-composer").disabled = not on

    def _draw(self) -> None:
        view = DebugView("", "", self.messages, dict(self.turn_starts))
        self.query_one("#play-transcript", Static).update(transcript(view))
        self.query_one("#play-messages", VerticalScroll).scroll_end(animate=False)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def _play(env_spec: str, task_index: int, store: StoreHandle, policy: AppPolicy, base_url: str | None,
                model: str | None) -> Any:
    """On the session's loop thread: its own store connection (the handle gives each thread one)."""
    from workbench.runs.play_session import play

    return await play(env_spec, task_index, store.get(), policy, base_url=base_url, model=model)
