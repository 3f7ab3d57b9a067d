"""Two rollouts side by side (``workbench diff A B`` in the app): fields and scores with deltas, then
the conversations in two columns, aligned message by message, changed words highlighted.

Pushed over Traces (``m`` marks a rollout, ``D`` on another opens this); escape goes back to the
list with its cursor where it was. ``n`` / ``p`` jump between the messages that differ.
"""

from __future__ import annotations

from typing import ClassVar

from rich.measure import Measurement
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static
from workbench_app.format import ROLE_COLORS
from workbench_app.widgets.footer import WorkbenchFooter

from workbench.analysis.diff import MessageSide, RolloutDiff
from workbench.analysis.diff_render import A_STYLE, B_STYLE, errors_text, message_body, values_table

MIN_SCORES_WIDTH = 40  # the scores pane sits beside the fields only with this many columns left for it


class RolloutDiffScreen(Screen[None]):
    TITLE = "Diff"
    DEFAULT_CSS = """
    #diff-body { padding: 0 1; }
    #diff-values { height: auto; }
    #diff-fields { width: auto; }
    #diff-scores { width: 1fr; }
    #diff-values.-stacked { layout: vertical; }
    #diff-values.-stacked > #diff-fields, #diff-values.-stacked > #diff-scores { width: 1fr; }
    #diff-heads { height: 1; }
    .diff-head { width: 1fr; text-style: bold; padding: 0 1; }
    .diff-row { height: auto; }
    .diff-row > .message { width: 1fr; }
    .diff-row > .diff-missing { border: round $foreground 15%; color: $text-muted; }
    .diff-row.diff-same > .message { border: round $foreground 30%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,backspace", "app.pop_screen", "Back", id="diff.back"),
        Binding("n", "jump(1)", "Next change", id="diff.next"),
        Binding("p", "jump(-1)", "Previous change", id="diff.previous", show=False),
        Binding("a", "toggle_full", "Shared in full", id="diff.all"),
        Binding("j", "scroll(1)", "Down", show=False),
        Binding("k", "scroll(-1)", "Up", show=False),
    ]

    def __init__(self, diff: RolloutDiff) -> None:
        super().__init__()
        self.diff = diff
        self.full = False  # show the messages both rollouts share in full
        self._at = -1  # the pair n/p last jumped to

    def compose(self) -> ComposeResult:
        d = self.diff
        yield Header()
        with VerticalScroll(id="diff-body"):
            if not d.same_task:
                yield Static(Text(f"different tasks: A is {d.a.get('env_name')} task #{d.a.get('task_index')}, "
                                  f"B is {d.b.get('env_name')} task #{d.b.get('task_index')}", style="yellow"),
                             id="diff-note")
            with Horizontal(id="diff-values"):
                fields = Static(values_table(d.fields), id="diff-fields", classes="section")
                fields.border_title = "rollout"
                yield fields
                scores = Static(values_table(d.scores, "score") if d.scores else Text("no scores", style="dim"),
                                id="diff-scores", classes="section")
                scores.border_title = "rewards and metrics"
                yield scores
            errors = errors_text(d)
            if errors is not None:
                box = Static(errors, id="rollout-errors", classes="section")
                box.border_title = "errors"
                yield box
            with Horizontal(id="diff-heads"):
                yield Static(Text.assemble(("A ", "bold red"), d.a["id"]), classes="diff-head")
                yield Static(Text.assemble(("B ", "bold green"), d.b["id"]), classes="diff-head")
            for i, pair in enumerate(d.messages):
                with Horizontal(classes=f"diff-row diff-{pair.status}", id=f"pair-{i}"):
                    yield self._cell(pair.a, A_STYLE, pair.status == "same")
                    yield self._cell(pair.b, B_STYLE, pair.status == "same")
        yield WorkbenchFooter()

    def _cell(self, side: MessageSide | None, style: str, same: bool) -> Static:
        if side is None:
            return Static(Text("(no message here)", style="italic"), classes="message diff-missing")
        role = side.role if side.role in ROLE_COLORS else "other"
        cell = Static(message_body(side, style, same=same, full=self.full), classes=f"message role-{role}")
        cell.border_title = side.title() + ("  (same)" if same else "")
        cell.border_subtitle = f"#{side.index}"
        return cell

    def on_resize(self, event: events.Resize) -> None:
        """The scores go under the fields where they would be squeezed beside them."""
        console = self.app.console
        fields = Measurement.get(console, console.options, values_table(self.diff.fields)).maximum + 4
        self.query_one("#diff-values").set_class(event.size.width - fields < MIN_SCORES_WIDTH, "-stacked")

    def on_mount(self) -> None:
        d = self.diff
        changed = f"{d.changed_messages} of {len(d.messages)} messages differ"
        self.sub_title = f"{d.a['id']} ↔ {d.b['id']} · {changed}"

    def action_scroll(self, lines: int) -> None:
        self.query_one("#diff-body", VerticalScroll).scroll_relative(y=lines, animate=False)

    def action_jump(self, direction: int) -> None:
        """Scroll the next (or previous) pair that differs to the top."""
        changed = [i for i, p in enumerate(self.diff.messages) if p.status != "same"]
        ahead = [i for i in changed if (i - self._at) * direction > 0]
        if not ahead:
            self.notify("no more changes this way" if changed else "the messages are the same", timeout=2)
            return
        self._at = ahead[0] if direction > 0 else ahead[-1]
        self.query_one("#diff-body", VerticalScroll).scroll_to_widget(
            self.query_one(f"#pair-{self._at}"), top=True, animate=False)

    def action_toggle_full(self) -> None:
        """Show the messages both rollouts share in full, or clipped to their first lines."""
        self.full = not self.full
        for i, pair in enumerate(self.diff.messages):
            if pair.status != "same":
                continue
            row = self.query_one(f"#pair-{i}", Horizontal)
            for cell, side, style in zip(row.query(Static), (pair.a, pair.b), (A_STYLE, B_STYLE), strict=True):
                if side is not None:
                    cell.update(message_body(side, style, same=True, full=self.full))
