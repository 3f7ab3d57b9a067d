"""The app's row tables: a :class:`~textual.widgets.DataTable` whose Home and End go to the first and
last row (Textual's scroll to the first and last column, which a row cursor never leaves), and whose cells
are shown as text: a string cell is never parsed as markup and its control characters are visible."""

from __future__ import annotations

from typing import Any, ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.widgets import DataTable
from workbench_app.format import cell


class RowTable(DataTable[Any]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    async def _on_idle(self, _: events.Idle) -> None:
        """Textual measures added and updated cells when the table is idle (its own ``_on_idle``, which runs
        after this one), but keeps the rows it rendered before then in caches that do not know the widths:
        a column that widens or narrows then is redrawn whole."""
        if self._updated_cells or self._require_update_dimensions:  # what Textual's idle is about to measure
            self.call_later(self._redraw_if_resized, [c.get_render_width(self) for c in self.ordered_columns])

    def _redraw_if_resized(self, widths: list[int]) -> None:
        if [c.get_render_width(self) for c in self.ordered_columns] != widths:
            self._clear_caches()
            self.refresh()

    def add_row(self, *cells: Any, **kwargs: Any) -> Any:
        return super().add_row(*(cell(c) for c in cells), **kwargs)

    def update_cell(self, row_key: Any, column_key: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell(row_key, column_key, cell(value), **kwargs)

    def update_cell_at(self, coordinate: Any, value: Any, **kwargs: Any) -> None:
        super().update_cell_at(coordinate, cell(value), **kwargs)

    def selected_key(self) -> str | None:
        """The key of the row under the cursor, or None (an empty table)."""
        if self.row_count == 0:
            return None
        try:
            value = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # the cursor is past the rows while the table is refilled
            return None
        return None if value is None else str(value)
