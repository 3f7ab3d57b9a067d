"""The app's row tables: a :class:`~textual.widgets.DataTable` whose Home and End go to the first and
last row (Textual's scroll to the first and last column, which a row cursor never leaves)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import DataTable


class RowTable(DataTable[Any]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First row", show=False),
        Binding("end", "scroll_bottom", "Last row", show=False),
    ]

    def selected_key(self) -> str | None:
        """The key of the row under the cursor, or None (an empty table)."""
        if self.row_count == 0:
            return None
        try:
            value = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:  # the cursor is past the rows while the table is refilled
            return None
        return None if value is None else str(value)
