"""One stored rollout: messages by role, tool calls, rewards and metrics by function, errors, timing, cost;
``t`` shows its tokens coloured by logprob, ``d`` opens it in the Debugger (read-only). Opened from a
Traces search, the search's words are highlighted in the messages and ``n`` / ``N`` go to the next and
previous message that holds one. A reward scored with older files than the environment has now says so."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import orjson
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static
from workbench_app.format import ROLE_COLORS, cell, fcost, fnum, ftime, safe_text, title, visible
from workbench_app.typed import WorkbenchAppMixin
from workbench_app.widgets.footer import WorkbenchFooter
from workbench_app.widgets.message_text import message_body
from workbench_app.widgets.search_highlight import highlight_hits, search_terms
from workbench_app.widgets.token_view import TokenView

from workbench.analysis.mcp_calls import mcp_calls_table
from workbench.config.redact import redact
from workbench.runs.score_age import current_versions, rollout_score_age


def overview(r: dict[str, Any]) -> Table:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold", no_wrap=True)
    t.add_column()
    status = Text("ok", style="green") if r.get("status") == "ok" else safe_text(r.get("error_kind"), "bold red")
    t.add_row("rollout", safe_text(f"{r['id']}   run {r.get('run_id', '-')}"))
    t.add_row("env / model", safe_text(f"{r.get('env_name', '-')}  ·  {r.get('model', '-')}"))
    t.add_row("task", safe_text(f"#{r.get('task_index', '-')} ({r.get('task_id', '-')}), sample "
                                f"{r.get('sample_index', '-')}"))
    t.add_row("status", status)
    t.add_row("reward", Text(fnum(r.get("reward")), style="bold"))
    t.add_row("answer", safe_text(orjson.dumps(r.get("answer")).decode() if not isinstance(r.get("answer"), str)
                                  else repr(r.get("answer"))))
    turns = r.get("turns", 0)
    t.add_row("timing", f"{r.get('duration_s') or 0:.2f} s, {turns} turn{'' if turns == 1 else 's'}, "
                        f"at {ftime(r.get('created_at'))}")
    t.add_row("tokens", f"{r.get('prompt_tokens', 0):,} prompt / {r.get('completion_tokens', 0):,} completion")
    t.add_row("cost", fcost(r.get("cost_usd")))
    return t


def scores_table(r: dict[str, Any]) -> Table | Text:
    rewards, metrics = r.get("rewards") or {}, r.get("metrics") or {}
    if not rewards and not metrics:
        return Text("no scores", style="dim")
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    t.add_column("function")
    t.add_column("kind")
    t.add_column("value", justify="right")
    for name, v in rewards.items():
        t.add_row(safe_text(name), "reward", fnum(v))
    for name, v in metrics.items():
        t.add_row(safe_text(name), Text("metric", style="dim"), fnum(v))
    return t


def call_api(call: dict[str, Any]) -> str:
    """The API a call came through the proxy on: chat, completions, responses or messages."""
    extra = call.get("extra")
    return str(extra.get("api") or "chat") if isinstance(extra, dict) else "chat"


def calls_table(calls: list[dict[str, Any]]) -> Table:
    """One row per model call; an ``api`` column where some call came through another API than chat."""
    apis = [call_api(c) for c in calls]
    cols = ["call", *(["api"] if any(a != "chat" for a in apis) else []), "messages in", "finish", "prompt tok",
            "completion tok", "latency"]
    t = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for col in cols:
        t.add_column(col, justify="left" if col in ("call", "api", "finish") else "right")
    for c, api in zip(calls, apis, strict=True):
        t.add_row(*(cell(str(x)) for x in (c.get("index", ""), *([api] if "api" in cols else []),
                                            c.get("n_messages", ""), c.get("finish_reason") or "-",
                                            c.get("prompt_tokens", 0), c.get("completion_tokens", 0))),
                  f"{(c.get('latency_ms') or 0):.0f} ms")
    return t


class RolloutDetailScreen(WorkbenchAppMixin, Screen[None]):
    """Pushed over Traces; escape goes back to the list, where the cursor still is."""

    TITLE = "Rollout"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back", id="rollout.back"),
        Binding("t", "toggle_tokens", "Tokens", id="rollout.tokens"),
        Binding("d", "debug", "Debugger", id="rollout.debug"),
        Binding("j", "scroll(1)", "Down", show=False),
        Binding("k", "scroll(-1)", "Up", show=False),
        Binding("n", "next_hit(1)", "Next hit", id="rollout.next_hit"),
        Binding("N", "next_hit(-1)", "Previous hit", show=False),
    ]

    def __init__(self, rollout: dict[str, Any], search: str | None = None) -> None:
        super().__init__()
        self.rollout = rollout
        self.search = search  # the search it was found with (its hits are highlighted); None: none
        self.terms: list[str] = []
        self.hits: list[int] = []  # the messages that hold a search hit, in order
        self.hit = -1  # the index in ``hits`` of the one last gone to
        self.score_age_read = False  # whether the stored score's age is known (and said, when it is older)

    def compose(self) -> ComposeResult:
        r = self.rollout
        self.terms = search_terms(self.search)
        yield Header()
        with VerticalScroll(id="rollout-body"):
            yield Static(overview(r), id="rollout-overview", classes="section")
            age = Static("", id="rollout-score-age")  # shown once the stored score is known to be older
            age.display = False
            yield age
            scores = Static(scores_table(r), id="rollout-scores", classes="section")
            scores.border_title = "rewards and metrics"
            yield scores
            errors = r.get("errors") or []
            if errors:
                text = Text()
                for e in errors:
                    text.append(visible(e.get("kind")), style="bold red")
                    text.append(visible(f" in {redact(str(e.get('source')))}: {redact(str(e.get('message')))}") + "\n")
                text.rstrip()  # in place: the last error's newline
                box = Static(text, id="rollout-errors", classes="section")
                box.border_title = "errors"
                yield box
            for i, m in enumerate(r.get("messages") or []):
                role = str(m.get("role", "?"))
                body = message_body(m)
                if highlight_hits(body, self.terms):
                    self.hits.append(i)
                msg = Static(body, classes=f"message role-{role if role in ROLE_COLORS else 'other'}",
                             id=f"message-{i}")
                name = m.get("name") or m.get("tool_call_id")
                msg.border_title = title(role + (f" ({name})" if name else ""))
                yield msg
            calls = r.get("calls") or []
            if calls:
                box = Static(calls_table(calls), id="rollout-calls", classes="section")
                box.border_title = "model calls"
                yield box
            mcp = mcp_calls_table(r.get("state"))
            if mcp is not None:
                box = Static(mcp, id="rollout-mcp-calls", classes="section")
                box.border_title = "MCP tool calls"
                yield box
        tokens = TokenView(id="rollout-tokens")
        tokens.display = False
        yield tokens
        yield WorkbenchFooter()

    def on_mount(self) -> None:
        self.sub_title = self.rollout["id"]
        self._read_score_age()
        if self.terms:
            self.sub_title += f" · {len(self.hits)} messages hold the search: n next, N previous"

    @work(exit_on_error=False, group="rollout-score-age")
    async def _read_score_age(self) -> None:
        """Whether the stored reward is older than the environment's rubric (its files changed since the
        run scored it): the same words Environments uses (``workbench.runs.score_age``)."""
        words = await asyncio.to_thread(self._score_age_words)
        if words:
            self._show_score_age(words)
        self.score_age_read = True

    def _score_age_words(self) -> str:
        """(A worker thread.) The score's age in words; "" when it is current or cannot be told."""
        app = self.workbench_app
        env = self.rollout.get("env_name")
        current = current_versions(ref for ref in app.discover_fn() if ref.name == env)
        age = rollout_score_age(app.store.get().conn, str(self.rollout["id"]), current)
        return age.describe() if age is not None else ""

    def _show_score_age(self, words: str) -> None:
        box = self.query_one("#rollout-score-age", Static)
        box.update(Text("⚠ " + words, style="yellow"))
        box.display = True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return bool(self.hits) if action == "next_hit" else True

    def action_next_hit(self, step: int) -> None:
        """Scroll to the next (``step`` 1) or previous (-1) message holding a search hit, round the end."""
        if not self.hits:
            return
        self.hit = (self.hit + step) % len(self.hits) if self.hit >= 0 else (0 if step > 0 else len(self.hits) - 1)
        message = self.query_one(f"#message-{self.hits[self.hit]}", Static)
        self.query_one("#rollout-body", VerticalScroll).scroll_to_widget(message, animate=False, top=True)
        self.sub_title = f"{self.rollout['id']} · hit {self.hit + 1}/{len(self.hits)}: n next, N previous"

    def action_scroll(self, lines: int) -> None:
        body = self.query_one(TokenView) if self.query_one(TokenView).display else self.query_one("#rollout-body")
        body.scroll_relative(y=lines, animate=False)

    def action_toggle_tokens(self) -> None:
        """The transcript, or the token-exact trace (loaded the first time it is shown)."""
        view = self.query_one(TokenView)
        body = self.query_one("#rollout-body", VerticalScroll)
        view.display, body.display = not view.display, view.display
        (view if view.display else body).focus()  # left and right move over the tokens
        if view.display and not view.report_text:
            view.load_stored(self.workbench_app.store, self.rollout)

    def action_debug(self) -> None:
        self.workbench_app.open_debugger(rollout=self.rollout)
