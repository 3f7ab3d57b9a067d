"""Tables that fit the terminal: every CLI table is printed through :func:`print_table`.

A column is either kept whole (``keep``: an id, a number, an interval, a cost: never wrapped, never cut)
or text that folds onto more lines. When the columns do not fit the console's width even with the text
folded down to its narrowest, the columns with the highest ``drop`` are left out, and one dim line
under the table names them (``--json`` has every field).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from workbench.format import safe_text

#: Spaces between two columns (Rich's default padding, none at the table's edges).
GUTTER = 2


@dataclass(frozen=True, slots=True)
class Col:
    """One column of :func:`print_table`."""

    title: str
    keep: bool = False  #: printed whole on one line: ids, numbers, intervals, costs
    drop: int = 0  #: 0: always shown; the highest is left out first when the table does not fit
    justify: str = "left"
    fold_to: int = 10  #: the narrowest a text column folds to before a column is left out


Cell = str | Text


def _cell_text(value: Cell) -> Text:
    return value if isinstance(value, Text) else safe_text(value)


def _natural(col: Col, cells: list[Text]) -> int:
    """The column's width with nothing folded: its widest line, or its title's."""
    lines = [line for c in cells for line in c.plain.split("\n")] or [""]
    return max(len(col.title), *(Text(line).cell_len for line in lines))


def _narrowest(col: Col, natural: int) -> int:
    """The least width the column may have: all of it when kept whole, else folded to ``fold_to``
    (never narrower than its title's longest word)."""
    if col.keep:
        return natural
    return min(natural, max(col.fold_to, *(len(w) for w in col.title.split() or [""])))


def fit_columns(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int) -> list[int]:
    """The indices of the columns shown at ``width``: all of them, or without the highest ``drop`` ones
    until the rest fit (kept-whole columns whole, text folded to its ``fold_to``)."""
    texts = [[_cell_text(row[i]) for row in rows] for i in range(len(cols))]
    least = [_narrowest(c, _natural(c, t)) for c, t in zip(cols, texts, strict=True)]
    shown = list(range(len(cols)))

    def needed() -> int:
        return sum(least[i] for i in shown) + GUTTER * (len(shown) - 1)

    dropped: list[int] = []
    while needed() > width:
        droppable = [i for i in shown if cols[i].drop > 0]
        if not droppable:
            break  # nothing more to leave out: the lines run past the width rather than cut an id
        dropped.append(max(droppable, key=lambda i: (cols[i].drop, i)))
        shown.remove(dropped[-1])
    for i in reversed(dropped[:-1]):  # one left out late (a wide one) may have made room for one left out early
        shown = sorted([*shown, i])
        if needed() > width:
            shown.remove(i)
    return shown


def build_table(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], width: int,
                **table_args: Any) -> tuple[Table, list[str]]:
    """The table of ``rows`` that fits ``width``, and the titles of the columns left out."""
    shown = fit_columns(cols, rows, width)
    table = Table(box=None, show_edge=False, pad_edge=False, **{"header_style": "bold", **table_args})
    for i in shown:
        col = cols[i]
        natural = _natural(col, [_cell_text(r[i]) for r in rows])
        table.add_column(col.title, justify=col.justify,  # type: ignore[arg-type]
                         no_wrap=col.keep, overflow="fold", min_width=natural if col.keep else None)
    for row in rows:
        table.add_row(*(_cell_text(row[i]) for i in shown))
    return table, [cols[i].title for i in range(len(cols)) if i not in shown]


def hidden_note(hidden: Sequence[str], width: int, json_hint: bool = True) -> Text:
    """The dim line that says which columns a table left out at ``width``."""
    where = "; --json has every field" if json_hint else ""
    return Text(f"({', '.join(hidden)} hidden at {width} columns{where})", style="dim")


def print_table(cols: Sequence[Col], rows: Sequence[Sequence[Cell]], console: Console | None = None,
                json_hint: bool = True, **table_args: Any) -> list[str]:
    """Print ``rows`` under ``cols`` as wide as the console allows (see the module docstring); returns the
    titles of the columns left out. Data cells given as ``str`` are shown as text (never markup)."""
    if console is None:
        from workbench.cli.common import console as default

        console = default
    width = console.width
    table, hidden = build_table(cols, rows, width, **table_args)
    console.print(table, soft_wrap=False, crop=False)
    if hidden:
        console.print(hidden_note(hidden, width, json_hint), soft_wrap=False, highlight=False)
    return hidden
