"""The app's footer: Textual's, with the keys a user must always find (help and quit) pinned on the
right beside the command palette key. On a narrow terminal the screen's own keys that do not fit
whole are hidden (the last ones first), never cut mid-word, and never the pinned ones."""

from __future__ import annotations

import asyncio

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: The actions whose keys stay visible at any width.
PINNED_ACTIONS = ("help", "quit")


class WorkbenchFooter(Footer):
    DEFAULT_CSS = """
    WorkbenchFooter {
        .footer-pinned { dock: right; width: auto; height: 1; border-left: vkey $foreground 20%;
                         background: $footer-background; }
        .footer-pinned FooterKey.-command-palette { dock: none; border-left: none; margin-left: 1; }
    }
    """

    def compose(self) -> ComposeResult:
        pinned: list[Widget] = []
        palette: list[Widget] = []
        for widget in super().compose():
            if isinstance(widget, FooterKey) and widget.has_class("-command-palette"):
                palette.append(widget)
            elif isinstance(widget, FooterKey) and widget.action in PINNED_ACTIONS:
                pinned.append(widget)
            else:
                yield widget
        if pinned or palette:
            yield HorizontalGroup(*pinned, *palette, classes="footer-pinned")

    async def recompose(self) -> None:
        # One at a time: the bindings can change twice at once (a screen pushed as another is dismissed), and
        # two recomposes that overlap would each mount their keys.
        lock = self.__dict__.setdefault("_recomposing", asyncio.Lock())
        async with lock:
            await super().recompose()
            self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """Show the screen's keys left to right while they fit whole beside the pinned ones."""
        if not self.size.width:
            return  # not laid out (its screen is not shown): it fits itself when it is
        room = self.size.width
        for group in self.query(".footer-pinned"):
            room -= group.styles.gutter.width + sum(_width(w, self) for w in group.children)
        used = 0
        for w in self.children:
            if w.has_class("footer-pinned"):
                continue
            used += _width(w, self)
            w.display = used <= room


def _width(widget: Widget, footer: Footer) -> int:
    """How wide ``widget`` is laid out in ``footer``: what it renders, with its margins (no layout needed)."""
    styles = widget.styles
    content = widget.get_content_width(footer.size, footer.app.size)
    return content + styles.gutter.width + styles.margin.width
