"""The token view: every token of a trace, sampled ones coloured by logprob, mismatches marked.

Reading the trace, loading the tokenizer (seconds, the first time) and re-rendering with the chat
template run in a worker thread; the view says what it is doing and never raises into the app.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import on
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from workbench_app.workers import post_ui

from workbench.analysis.token_render import legend, render_report
from workbench.analysis.token_report import TokenReport
from workbench.records.trace import Trace

if TYPE_CHECKING:
    from workbench_app.store_access import StoreHandle


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
        post_ui(self, self.Built(body))

    class Built(Message):
        """The token view's body, built in a worker thread."""

        def __init__(self, body: Text) -> None:
            super().__init__()
            self.body = body

    @on(Built)
    def _show(self, event: Built) -> None:
        event.stop()
        self.report_text = event.body.plain
        self.query_one("#token-body", Static).update(event.body)

    def load_stored(self, store: StoreHandle, rollout: dict[str, Any]) -> None:
        """A stored rollout's trace (``store``: the app's StoreHandle; ``rollout``: a ``get_rollout`` row)."""
        def make() -> TokenReport | None:
            from workbench.analysis.token_report import stored_report

            return stored_report(store.get(), rollout)

        self.load(make, f"rollout {rollout.get('id')} has no stored token trace: its server returned no token ids "
                        "(the embedded server and vLLM do)")

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
                  "no tokens recorded: the server returned no token ids (the embedded server and vLLM do)")
