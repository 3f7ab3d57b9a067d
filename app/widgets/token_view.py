"""The token view: every token of a trace, sampled ones coloured by logprob, mismatches marked.

Reading the trace, loading the tokenizer (seconds, the first time) and re-rendering with the chat
template run in a worker thread; the view says what it is doing and never raises into the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from workbench.token_report import BANDS, TokenReport, logprob_band
from workbench.trace import Trace

#: One style per logprob band of :data:`workbench.token_report.BANDS`, most likely first.
BAND_STYLES = ["black on green3", "black on dark_olive_green2", "black on yellow2", "black on dark_orange",
               "bold white on red3"]
PROMPT_STYLE = "dim"
MARK_STYLE = "bold white on magenta"


def legend() -> Text:
    out = Text("logprob of sampled tokens: ", style="bold")
    for (_, label), style in zip(BANDS, BAND_STYLES, strict=True):
        out.append(f" {label} ", style=style)
        out.append(" ")
    out.append(" prompt/template", style=PROMPT_STYLE)
    out.append("   ")
    out.append("⚠ mismatch", style=MARK_STYLE)
    return out


def _visible(piece: str) -> str:
    """Newlines and tabs shown as glyphs, so a whitespace token is never invisible."""
    return piece.replace("\t", "⇥").replace("\n", "↵\n")


def render_report(report: TokenReport) -> Text:
    out = Text()
    for note in report.notes:
        out.append(f"note: {note}\n", style="italic yellow")
    for nt in report.nodes:
        n = nt.node
        what = "sampled" if nt.sampled else "prompt / env"
        head = f"── call {n.call} · {what} · {len(nt.pieces)} tokens"
        if n.policy_version is not None and nt.sampled:
            head += f" · policy {n.policy_version}"
        if nt.marks:
            head += f" · ⚠ {len(nt.marks)} mismatch"
        out.append(head + "\n", style="bold")
        for i, piece in enumerate(nt.pieces):
            text = _visible(piece) if report.decoded else piece + " "
            if i in nt.marks:
                out.append("⚠", style=MARK_STYLE)
                out.append(text, style=MARK_STYLE + " underline")
            elif not nt.sampled:
                out.append(text, style=PROMPT_STYLE)
            elif nt.logprobs is not None:
                # Neighbouring tokens of the same band would merge: every other one is underlined.
                style = BAND_STYLES[logprob_band(nt.logprobs[i])] + (" underline" if i % 2 else "")
                out.append(text, style=style)
            else:
                out.append(text, style="bold" if i % 2 else "")
        if not out.plain.endswith("\n"):
            out.append("\n")
    if report.mismatches:
        out.append("\n")
        for line in report.mismatches:
            out.append("⚠ ", style=MARK_STYLE)
            out.append(line + "\n", style="red")
    elif report.decoded:
        out.append("\nno mismatch: every prompt re-renders to the recorded tokens\n", style="green")
    out.rstrip()
    return out


class TokenView(VerticalScroll):
    """``load(make_report)`` runs ``make_report`` in a thread and shows what it returns."""

    DEFAULT_CSS = """
    TokenView { height: 1fr; padding: 0 1; }
    TokenView #token-legend { height: auto; margin-bottom: 1; }
    TokenView #token-body { height: auto; }
    """

    report_text: str = ""  # what the view shows, as plain text (tests and copy-out read it)

    def compose(self) -> Any:
        yield Static(legend(), id="token-legend")
        yield Static(Text("no trace loaded", style="dim"), id="token-body")

    def load(self, make_report: Callable[[], TokenReport | None], empty: str) -> None:
        """Build the report off the UI thread; ``empty`` is shown when there is no trace at all."""
        self.query_one("#token-body", Static).update(Text("reading tokens…", style="dim"))
        self.run_worker(lambda: self._build(make_report, empty), thread=True, exclusive=True, group="tokens",
                        exit_on_error=False)

    def _build(self, make_report: Callable[[], TokenReport | None], empty: str) -> None:
        try:
            report = make_report()
            body = render_report(report) if report is not None else Text(empty, style="italic")
        except Exception as e:  # a broken tokenizer or store: said in the view, never a crash
            body = Text(f"cannot show the tokens: {type(e).__name__}: {e}", style="bold red")
        try:
            self.app.call_from_thread(self._show, body)
        except RuntimeError:  # the app is gone
            pass

    def _show(self, body: Text) -> None:
        self.report_text = body.plain
        self.query_one("#token-body", Static).update(body)

    def load_stored(self, store: Any, rollout: dict[str, Any]) -> None:
        """A stored rollout's trace (``store``: the app's StoreHandle; ``rollout``: a ``get_rollout`` row)."""
        def make() -> TokenReport | None:
            from workbench.render import default_tokenizer_for
            from workbench.token_report import report_for, stored_trace, tools_for_run

            st = store.get()
            trace = stored_trace(st.conn, rollout["pk"])
            if trace is None:
                return None
            tools, notes = None, []
            tokenizer = default_tokenizer_for(rollout.get("model") or "")
            if tokenizer is not None:  # tool schemas matter only to the re-render check
                try:
                    tools = tools_for_run(st, rollout["run_id"])
                except Exception as e:
                    notes.append(f"the run's environment did not load ({e}); re-rendered without its tool schemas")
            return report_for(trace, rollout.get("model") or "", tools, tokenizer, notes)

        self.load(make, f"rollout {rollout.get('id')} has no stored token trace: its server returned no token ids "
                        "(the embedded server and vLLM do)")

    def load_live(self, session: Any) -> None:
        """The trace so far of a live :class:`~workbench.debug_session.DebugSession`."""
        def make() -> TokenReport | None:
            from workbench.token_report import report_for

            trace = session.trace
            if trace is None or not trace.has_tokens:
                return None
            snapshot = Trace.unpack(*trace.pack())  # the session's loop may be recording the next call
            return report_for(snapshot, session.model, session.tools)

        calls = session.rollout.calls if session.rollout is not None else []
        self.load(make, "no model call yet: n runs the first turn" if not calls else
                  "no tokens recorded: the server returned no token ids (the embedded server and vLLM do)")
