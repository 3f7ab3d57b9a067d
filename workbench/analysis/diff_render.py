"""Rich renderables for a :class:`~workbench.analysis.diff.RolloutDiff`, shared by ``workbench diff`` and the
app's diff screen, so a terminal and the app show the same tables and the same highlighted words."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from workbench.analysis.diff import MessageSide, RolloutDiff, Span, ValueDiff
from workbench.config.redact import redact
from workbench.format import safe_text, visible

#: How changed spans look on each side: A's removed words, B's added words (readable on light and dark).
A_STYLE, B_STYLE = "bold reverse red", "bold reverse green"
#: Without colours (a pipe, NO_COLOR) changed spans are bracketed as ``git diff --word-diff=plain`` does.
A_MARKS, B_MARKS = ("[-", "-]"), ("{+", "+}")
ROLE_STYLES = {"system": "magenta", "user": "dodger_blue1", "assistant": "green", "tool": "yellow"}
SAME_LINES = 3  # lines of a message both rollouts share that are shown unless asked for all
_DIGITS = {"duration_s": 2, "latency_s": 2, "cost_usd": 5}


def fvalue(v: Any, digits: int = 3) -> str:
    """A compared value for people: floats rounded, None as '-'."""
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def fdelta(d: float | None, digits: int = 3) -> str:
    """B - A with its sign; '' when the values are not numbers."""
    if d is None:
        return ""
    if not d:
        return "0"
    return f"{d:+d}" if isinstance(d, int) else f"{d:+.{digits}f}"


def values_table(rows: list[ValueDiff], title: str = "") -> Table:
    """Fields (``kind`` "") or scores as a table: name, kind, A, B, delta; changed rows bold, the rest dim."""
    scores = any(v.kind for v in rows)
    t = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
    t.add_column(title)
    if scores:
        t.add_column("kind")
    for col in ("A", "B", "Δ"):
        t.add_column(col, justify="right")
    for v in rows:
        digits = _DIGITS.get(v.name, 3)
        t.add_row(*(safe_text(c) for c in (v.name, *([v.kind] if scores else []), fvalue(v.a, digits),
                                           fvalue(v.b, digits), fdelta(v.delta, digits))),
                  style="bold" if v.changed else "dim")
    return t


def errors_text(d: RolloutDiff) -> Text | None:
    """Each side's errors, one line each (None when neither failed)."""
    text = Text()
    for label, r in (("A", d.a), ("B", d.b)):
        for e in r.get("errors") or []:
            if text:
                text.append("\n")
            text.append(f"{label} ", style="bold")
            text.append(visible(e.get("kind")), style="bold red")
            text.append(visible(f" in {redact(str(e.get('source')))}: {redact(str(e.get('message')))}"))
    return text or None


def spans_text(spans: list[Span], changed_style: str, marks: tuple[str, str] | None = None) -> Text:
    """One side's text, changed spans styled (and bracketed by ``marks`` when given)."""
    text = Text()
    for piece, changed in spans:
        piece = visible(piece)
        if not changed:
            text.append(piece)
        elif marks:
            text.append(marks[0] + piece + marks[1], style=changed_style)
        else:
            text.append(piece, style=changed_style)
    return text


def message_body(side: MessageSide, changed_style: str, *, same: bool, full: bool = False,
                 marks: tuple[str, str] | None = None) -> Text:
    """A message's text in the diff: changed words highlighted; a message both share is dim, and
    clipped to :data:`SAME_LINES` lines unless ``full``."""
    if same:
        lines = side.text.splitlines()
        clipped = full or len(lines) <= SAME_LINES
        body = safe_text(side.text if clipped else "\n".join(lines[:SAME_LINES]), style="dim")
        if not clipped:
            body.append(f"\n… {len(lines) - SAME_LINES} more lines", style="dim italic")
    else:
        body = spans_text(side.spans, changed_style, marks)
    return body or Text("(empty)", style="dim")


def messages_table(d: RolloutDiff, *, full: bool = False, plain: bool = False) -> Table:
    """The conversations in two columns, one row per aligned pair (``plain``: bracket changed words)."""
    t = Table(expand=True, show_lines=True, header_style="bold")
    t.add_column(safe_text(f"A  {d.a['id']}"), ratio=1)
    t.add_column(safe_text(f"B  {d.b['id']}"), ratio=1)
    for p in d.messages:
        same = p.status == "same"
        cells: list[Text] = []
        for side, style, marks in ((p.a, A_STYLE, A_MARKS), (p.b, B_STYLE, B_MARKS)):
            if side is None:
                cells.append(Text("(no message here)", style="dim italic"))
                continue
            title = safe_text(side.title(), style=f"bold {ROLE_STYLES.get(side.role, '')}")
            if same:
                title.append("  (same in both)", style="dim")
            body = message_body(side, style, same=same, full=full, marks=marks if plain else None)
            cells.append(Text.assemble(title, "\n", body))
        t.add_row(*cells)
    return t
