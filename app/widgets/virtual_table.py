"""A virtual table for millions of rows: a Line API ScrollView that reads pages lazily.

Only the rows on screen are rendered; a page of rows is fetched (in a thread worker) the first time
one of its rows is needed. The owner supplies a :class:`PageSource`; a new source (new filter or
sort) bumps a generation counter so late pages of the old one are dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events, on
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from workbench_app.workers import post_ui

from workbench.format import visible

Row = Any


class PageSource(Protocol):
    """Where rows come from. Both methods are called from worker threads."""

    def page(self, index: int, size: int, prev: list[Row] | None, next: list[Row] | None,
             total: int | None) -> list[Row]:
        """Rows ``[index*size, (index+1)*size)``. ``prev``/``next`` are the neighbouring pages when
        cached (for keyset paging from either side); ``total`` is the row count once known."""
        ...

    def count(self) -> int: ...


@dataclass(slots=True)
class Column:
    """One column. Its width fits its title and the rows read so far, up to ``width`` (``fit=False``:
    always ``width``; ``width=0``: it takes the width left, at least ``min_width``). When the columns do
    not fit the screen, the ones of lowest ``priority`` are left out first (the rightmost among equals),
    so no title and no value is ever cut mid-word to make room."""

    title: str
    width: int  # the most it takes (0: the width left over)
    render: Callable[[Row], str | tuple[str, str]]  # text, or (text, rich style)
    right: bool = False
    priority: int = 5  # higher: kept longer on a narrow screen
    fit: bool = True  # False: always ``width`` wide
    min_width: int = 12  # for the ``width=0`` column: less than this and it is left out

    def natural(self, measured: int) -> int:
        """Its width for content ``measured`` cells wide."""
        if not self.width:
            return self.min_width
        if not self.fit:
            return self.width
        return max(cell_len(self.title), min(measured, self.width))


def fit_columns(columns: list[Column], measured: list[int], width: int) -> list[int | None]:
    """Each column's width on a screen ``width`` cells wide (None: left out), one space between columns."""
    natural = [c.natural(m) for c, m in zip(columns, measured, strict=True)]
    shown = list(range(len(columns)))

    def need() -> int:
        return sum(natural[i] for i in shown) + max(0, len(shown) - 1)

    for i in sorted(shown, key=lambda i: (columns[i].priority, -i)):
        if need() <= width or len(shown) == 1:
            break
        shown.remove(i)
    out: list[int | None] = [None] * len(columns)
    spare = max(0, width - need())
    for i in shown:
        out[i] = natural[i] + (spare if not columns[i].width else 0)
    return out


class VirtualTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    VirtualTable { background: $surface; overflow-x: hidden; }
    VirtualTable > .virtual-table--header { text-style: bold; background: $panel; color: $foreground; }
    VirtualTable > .virtual-table--cursor { background: $block-cursor-background; color: $block-cursor-foreground;
        text-style: bold; }
    VirtualTable:blur > .virtual-table--cursor { background: $block-cursor-blurred-background; text-style: none; }
    VirtualTable > .virtual-table--placeholder { color: $text-muted; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "virtual-table--header", "virtual-table--cursor", "virtual-table--placeholder"}
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home,g", "home", "First", show=False),
        Binding("end,G", "end", "Last", show=False),
        Binding("enter", "select", "Open", show=True),
    ]

    cursor = reactive(0, init=False, always_update=True)

    class Selected(Message):
        def __init__(self, table: VirtualTable, index: int, row: Row) -> None:
            super().__init__()
            self.table, self.index, self.row = table, index, row

    class Counted(Message):
        def __init__(self, table: VirtualTable, total: int) -> None:
            super().__init__()
            self.table, self.total = table, total

    def __init__(self, columns: list[Column], *, page_size: int = 200, max_pages: int = 64,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns = columns
        self.page_size = page_size
        self.max_pages = max_pages
        self.source: PageSource | None = None
        self.total: int | None = None  # None until the count is known
        self._pages: OrderedDict[int, list[Row]] = OrderedDict()
        self._pending: set[int] = set()
        self._gen = 0
        self._known_end: int | None = None  # index of the last row seen so far (+1), while counting
        self._measured = [0] * len(columns)  # the widest value of each column in the rows read so far
        self._layout: tuple[tuple[int, tuple[int, ...]], list[int | None]] | None = None

    # -- data -----------------------------------------------------------------------------------
    def set_source(self, source: PageSource) -> None:
        """Show rows from ``source`` (a new filter or sort): forget cached pages, count again."""
        self._gen += 1
        self.source = source
        self.total = None
        self._known_end = None
        self._pages.clear()
        self._pending.clear()
        self._measured = [0] * len(self.columns)
        self.cursor = 0
        self.scroll_to(0, 0, animate=False, immediate=True)
        self._resize()
        self._fetch(0)
        self.run_worker(lambda gen=self._gen: self._count(gen, source), thread=True,
                        exit_on_error=False, group="virtual-table-count", exclusive=True)

    @property
    def row_count(self) -> int:
        """Rows the table can scroll through now (the count once known, else what has loaded)."""
        if self.total is not None:
            return self.total
        if self._known_end is None:
            return 0
        full = any(len(rows) == self.page_size for rows in self._pages.values())
        return self._known_end + (self.page_size if full else 0)

    def row(self, index: int) -> Row | None:
        """The row at ``index`` if its page is loaded (else schedules the page and returns None)."""
        if index < 0:
            return None
        page, off = divmod(index, self.page_size)
        rows = self._pages.get(page)
        if rows is None:
            if page not in self._pending:
                self.call_later(self._fetch, page)
            return None
        self._pages.move_to_end(page)
        return rows[off] if off < len(rows) else None

    def _fetch(self, page: int) -> None:
        if self.source is None or page in self._pending or page in self._pages:
            return
        if self.total is not None and page * self.page_size >= max(self.total, 1):
            return
        self._pending.add(page)
        gen, source, total = self._gen, self.source, self.total
        prev, nxt = self._pages.get(page - 1), self._pages.get(page + 1)
        self.run_worker(lambda: self._load_page(gen, source, page, prev, nxt, total), thread=True,
                        exit_on_error=False, group="virtual-table-page")

    class PageRead(Message, bubble=False):
        """A page read in a worker (``rows``), or the error reading it; page -1 is the count."""

        def __init__(self, gen: int, page: int, rows: list[Row] | None, error: Exception | None = None) -> None:
            super().__init__()
            self.gen, self.page, self.rows, self.error = gen, page, rows, error

    class CountRead(Message, bubble=False):
        def __init__(self, gen: int, total: int) -> None:
            super().__init__()
            self.gen, self.total = gen, total

    def _load_page(self, gen: int, source: PageSource, page: int, prev: list[Row] | None,
                   nxt: list[Row] | None, total: int | None) -> None:
        try:
            rows = source.page(page, self.page_size, prev, nxt, total)
        except Exception as e:
            post_ui(self, self.PageRead(gen, page, None, e))
            return
        post_ui(self, self.PageRead(gen, page, rows))

    @on(PageRead)
    def _page_read(self, event: PageRead) -> None:
        gen, page, rows = event.gen, event.page, event.rows
        if rows is None:
            if gen == self._gen:
                self._pending.discard(page)
                self.notify(f"reading rows failed: {event.error}", severity="error")
            return
        if gen != self._gen:
            return
        self._pending.discard(page)
        self._pages[page] = rows
        self._measure(rows)
        while len(self._pages) > self.max_pages:
            self._pages.popitem(last=False)
        if self.total is None:
            end = page * self.page_size + len(rows)
            if len(rows) < self.page_size:
                self.total = end  # the last page: the count is known
            self._known_end = max(self._known_end or 0, end)
            self._resize()
        self.refresh()

    def _count(self, gen: int, source: PageSource) -> None:
        try:
            total = source.count()
        except Exception as e:
            post_ui(self, self.PageRead(gen, -1, None, e))
            return
        post_ui(self, self.CountRead(gen, total))

    @on(CountRead)
    def _counted(self, event: CountRead) -> None:
        if event.gen != self._gen:
            return
        self.total = event.total
        self._resize()
        self.refresh()
        self.post_message(self.Counted(self, event.total))

    # -- geometry and rendering -----------------------------------------------------------------
    def _resize(self) -> None:
        self.virtual_size = Size(self.scrollable_content_region.width, self.row_count + 1)  # +1: the header

    def on_resize(self) -> None:
        self._resize()

    def _measure(self, rows: list[Row]) -> None:
        """Widen the columns to the values of ``rows`` (what fits is decided at each paint)."""
        measured = self._measured
        for i, col in enumerate(self.columns):
            if not col.fit or not col.width:
                continue
            widest = measured[i]
            for row in rows:
                out = col.render(row)
                widest = max(widest, cell_len(" ".join((out if isinstance(out, str) else out[0]).split())))
            measured[i] = widest

    def column_widths(self, width: int | None = None) -> list[int | None]:
        """Each column's width now (None: left out for lack of room), at ``width`` (default: the table's)."""
        width = self.scrollable_content_region.width if width is None else width
        key = (width, tuple(self._measured))
        if self._layout is None or self._layout[0] != key:
            self._layout = (key, fit_columns(self.columns, self._measured, width))
        return self._layout[1]

    def _line(self, cells: list[tuple[str, Style | None]], widths: list[int | None], base: Style) -> list[Segment]:
        segs: list[Segment] = []
        for (text, style), w, col in zip(cells, widths, self.columns, strict=True):
            if w is None:
                continue
            if segs:
                segs.append(Segment(" ", base))
            text = visible(" ".join(text.split()))  # data: control characters shown, never sent to the terminal
            if col.right:
                text = " " * max(0, w - cell_len(text)) + text
            text = set_cell_size(text, w)
            segs.append(Segment(text, base + style if style else base))
        return segs

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        widths = self.column_widths(width)
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("virtual-table--header")
            cells: list[tuple[str, Style | None]] = [(c.title, None) for c in self.columns]
            return Strip(self._line(cells, widths, base + header)).adjust_cell_length(width, base + header)
        index = int(self.scroll_offset.y) + y - 1
        if index >= self.row_count:
            return Strip.blank(width, base)
        style = base + self.get_component_rich_style("virtual-table--cursor") if index == self.cursor else base
        row = self.row(index)
        if row is None:
            ph = self.get_component_rich_style("virtual-table--placeholder")
            return Strip([Segment("  …", style + ph)]).adjust_cell_length(width, style)
        cells = []
        for c in self.columns:
            out = c.render(row)
            cells.append((out, None) if isinstance(out, str) else (out[0], Style.parse(out[1])))
        return Strip(self._line(cells, widths, style)).adjust_cell_length(width, style)

    # -- cursor ---------------------------------------------------------------------------------
    @property
    def _body_height(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def watch_cursor(self, old: int, new: int) -> None:
        top = int(self.scroll_offset.y)
        if new < top:
            self.scroll_to(y=new, animate=False, immediate=True)
        elif new >= top + self._body_height:
            self.scroll_to(y=new - self._body_height + 1, animate=False, immediate=True)
        self.refresh()

    def _move(self, to: int) -> None:
        n = self.row_count
        self.cursor = max(0, min(to, n - 1)) if n else 0

    def action_cursor(self, delta: int) -> None:
        self._move(self.cursor + delta)

    def action_page(self, direction: int) -> None:
        step = self._body_height
        self.scroll_to(y=max(0, self.scroll_offset.y + direction * step), animate=False, immediate=True)
        self._move(self.cursor + direction * step)

    def action_home(self) -> None:
        self._move(0)

    def action_end(self) -> None:
        self._move(self.row_count - 1)

    def action_select(self) -> None:
        row = self.row(self.cursor)
        if row is not None:
            self.post_message(self.Selected(self, self.cursor, row))

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self._move(int(self.scroll_offset.y) + event.y - 1)
            if event.chain >= 2:
                self.action_select()

    def current_row(self) -> Row | None:
        return self.row(self.cursor)
