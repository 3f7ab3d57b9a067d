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
