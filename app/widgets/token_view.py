"""The token view: every token of a trace, sampled ones coloured by logprob, mismatches marked.

Reading the trace, loading the tokenizer (seconds, the first time) and re-rendering with the chat
template run in a worker thread; the view says what it is doing and never raises into the app. Left and
right move a cursor over the sampled tokens; the line below the tokens says the one under it: its
logprob and the top alternatives its server returned (``top_logprobs`` in the model call's stored reply).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.events import Resize
from textual.message import Message
from textual.widgets import Static
from workbench_app.workers import post_ui

from workbench.analysis.token_render import legend, render_report
from workbench.analysis.token_report import TokenReport
from workbench.records.trace import Trace

if TYPE_CHECKING:
    from workbench_app.store_access import StoreHandle

CURSOR_STYLE = "reverse bold"
HINT = "← → move over the sampled tokens: each one's logprob and top alternatives show here"


def top_alternatives(extra: Any) -> list[list[tuple[str, float]]] | None:
    """Each sampled token's top alternatives, most likely first, from a model call's stored ``extra``
    (``logprobs`` as the chat API returns it, or the completions API's ``top_logprobs``); None when the
    server returned none."""
    lp = extra.get("logprobs") if isinstance(extra, dict) else None
    if not isinstance(lp, dict):
        return None
    per_token: list[list[tuple[str, float]]] = []
    content = lp.get("content")
    if isinstance(content, list):
        for entry in content:
            tops = entry.get("top_logprobs") if isinstance(entry, dict) else None
            per_token.append([(str(a.get("token")), float(a["logprob"])) for a in tops or []
                              if isinstance(a, dict) and isinstance(a.get("logprob"), int | float)])
    elif isinstance(lp.get("top_logprobs"), list):
        for tops in lp["top_logprobs"]:
            per_token.append([(str(k), float(v)) for k, v in tops.items() if isinstance(v, int | float)]
                             if isinstance(tops, dict) else [])
    else:
        return None
    if not any(per_token):
        return None
    return [sorted(tops, key=lambda a: -a[1]) for tops in per_token]


@dataclass(slots=True)
class TokenSpot:
    """One sampled token as the view draws it: where it is in the body's text, and what is known of it."""

    start: int
    end: int
    call: int | None  # the model call that sampled it
    index: int  # in its call's sampled tokens
    count: int  # how many tokens its call sampled
    piece: str
    logprob: float | None
    alternatives: list[tuple[str, float]] | None  # None: the server returned no top alternatives


def _shown(piece: str, decoded: bool) -> str:
    """A token as :func:`~workbench.analysis.token_render.render_report` writes it."""
    return piece.replace("\t", "⇥").replace("\n", "↵\n") if decoded else piece + " "


def token_spots(report: TokenReport, body: Text, tops: dict[int, list[list[tuple[str, float]]]]) -> list[TokenSpot]:
    """Where each sampled token of ``report`` is in ``body`` (its rendering), with its logprob and the
    alternatives in ``tops`` (call index -> per token)."""
    plain, pos, spots = body.plain, 0, []
    for nt in report.nodes:
        n = nt.node
        head = plain.find(f"── call {n.call} · ", pos)
        if head < 0:
            break
        pos = plain.find("\n", head) + 1
        alternatives = tops.get(n.call) if n.call is not None else None
        for i, piece in enumerate(nt.pieces):
            pos += 1 if i in nt.marks else 0  # the ⚠ before a marked token
            text = _shown(piece, report.decoded)
            if nt.sampled:
                lp = nt.logprobs[i] if nt.logprobs is not None and i < len(nt.logprobs) else None
                alts = alternatives[i] if alternatives is not None and i < len(alternatives) else None
                spots.append(TokenSpot(pos, min(pos + len(text.rstrip(" ") or text), len(plain)), n.call, i,
                                       len(nt.pieces), piece, lp, alts))
            pos += len(text)
    return spots


def spot_line(spot: TokenSpot) -> Text:
    """The line under the tokens: the token at the cursor, its logprob and its top alternatives."""
    out = Text.assemble(("token ", "bold"), f"{spot.index + 1}/{spot.count} of call {spot.call}  ",
                        (repr(spot.piece), "bold"), "  ")
    if spot.logprob is None:
        out.append("logprob not stored", style="dim")
    else:
        out.append(f"logprob {spot.logprob:.3f} (p {math.exp(min(0.0, spot.logprob)):.3f})")
    if spot.alternatives is None:
        out.append("  · no top alternatives stored (the server was not asked for top_logprobs)", style="dim")
    elif spot.alternatives:
        out.append("  · top: ", style="bold")
        out.append("  ".join(f"{tok!r} {lp:.2f}" for tok, lp in spot.alternatives[:5]))
    return out


class TokenView(VerticalScroll):
    """``load(make_report)`` runs ``make_report`` in a thread and shows what it returns."""

    DEFAULT_CSS = """
    TokenView { height: 1fr; padding: 0 1; }
    TokenView #token-legend { height: auto; margin-bottom: 1; }
    TokenView #token-body { height: auto; }
    TokenView #token-cursor { dock: bottom; height: auto; max-height: 3; background: $boost; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right", "move_cursor(1)", "Next token", show=False),
        Binding("left", "move_cursor(-1)", "Previous token", show=False),
    ]

    report_text: str = ""  # what the view shows, as plain text (tests and copy-out read it)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spots: list[TokenSpot] = []  # the sampled tokens the cursor moves over
        self.cursor = -1  # the index in ``spots`` under the cursor (-1: none yet)
        self._body = Text()

    def compose(self) -> Any:
        yield Static(legend(), id="token-legend")
        yield Static(Text("no trace loaded", style="dim"), id="token-body")
        cursor = Static("", id="token-cursor")
        cursor.display = False
        yield cursor

    @on(Resize)
    def _fit_legend(self, event: Resize) -> None:
        full = legend()
        fits = event.size.width - 2 >= full.cell_len
        self.query_one("#token-legend", Static).update(full if fits else legend(short=True))

    def load(self, make_report: Callable[[], TokenReport | None], empty: str,
             extras: Callable[[], Sequence[Any]] = list) -> None:
        """Build the report off the UI thread; ``empty`` is shown when there is no trace at all; ``extras``:
        each model call's stored ``extra`` (by call index), where the top alternatives are."""
        self.query_one("#token-body", Static).update(Text("reading tokens…", style="dim"))
        self.run_worker(lambda: self._build(make_report, empty, extras), thread=True, exclusive=True,
                        group="tokens", exit_on_error=False)

    def _build(self, make_report: Callable[[], TokenReport | None], empty: str,
               extras: Callable[[], Sequence[Any]]) -> None:
        spots: list[TokenSpot] = []
        try:
            report = make_report()
            body = render_report(report) if report is not None else Text(empty, style="italic")
            if report is not None:
                tops = {i: alts for i, extra in enumerate(extras()) if (alts := top_alternatives(extra))}
                spots = token_spots(report, body, tops)
        except Exception as e:  # a broken tokenizer or store: said in the view, never a crash
            body = Text(f"cannot show the tokens: {type(e).__name__}: {e}", style="bold red")
        post_ui(self, self.Built(body, spots))

    class Built(Message):
        """The token view's body, built in a worker thread."""

        def __init__(self, body: Text, spots: list[TokenSpot] | None = None) -> None:
            super().__init__()
            self.body = body
            self.spots = spots or []

    @on(Built)
    def _show(self, event: Built) -> None:
        event.stop()
        self.report_text = event.body.plain
        self._body = event.body
        self.spots, self.cursor = event.spots, -1
        self.query_one("#token-body", Static).update(event.body)
        line = self.query_one("#token-cursor", Static)
        line.update(Text(HINT, style="dim"))
        line.display = bool(self.spots)

    @property
    def cursor_text(self) -> str:
        """The line under the tokens, as plain text (tests read it)."""
        return str(self.query_one("#token-cursor", Static).render())

    def action_move_cursor(self, step: int) -> None:
        """Move the cursor to the next (1) or previous (-1) sampled token and say what is known of it."""
        if not self.spots:
            return
        self.cursor = max(0, min(len(self.spots) - 1, self.cursor + step if self.cursor >= 0 else 0))
        spot = self.spots[self.cursor]
        body = self._body.copy()
        body.stylize(CURSOR_STYLE, spot.start, spot.end)
        self.query_one("#token-body", Static).update(body)
        self.query_one("#token-cursor", Static).update(spot_line(spot))
        line = self._body.plain.count("\n", 0, spot.start) + 2  # the legend's lines above (about)
        if not self.scrollable_content_region.height or not (
                self.scroll_y <= line < self.scroll_y + self.scrollable_content_region.height - 3):
            self.scroll_to(y=max(0, line - 3), animate=False)

    def load_stored(self, store: StoreHandle, rollout: dict[str, Any]) -> None:
        """A stored rollout's trace (``store``: the app's StoreHandle; ``rollout``: a ``get_rollout`` row)."""
        def make() -> TokenReport | None:
            from workbench.analysis.token_report import stored_report

            return stored_report(store.get(), rollout)

        calls = rollout.get("calls") or []
        self.load(make, f"rollout {rollout.get('id')} has no stored token trace: its server returned no token ids "
                        "(the embedded server and vLLM do)", lambda: [c.get("extra") for c in calls])

    def load_live(self, session: Any) -> None:
        """The trace so far of a live :class:`~workbench.runs.debug_session.DebugSession`."""
        def make() -> TokenReport | None:
            from workbench.analysis.token_report import report_for

            trace = session.trace
            if trace is None or not trace.has_tokens:
                return None
            snapshot = Trace.unpack(*trace.pack())  # the session's loop may be recording the next call
            return report_for(snapshot, session.model, session.tools)

        calls = session.rollout.calls if session.rollout is not None else []
        self.load(make, "no model call yet: n runs the first turn" if not calls else
                  "no tokens recorded: the server returned no token ids (the embedded server and vLLM do)",
                  lambda: [c.extra for c in list(calls)])
