"""The app's footer: Textual's, with the keys a user must always find (help and quit) pinned on the
right beside the command palette key. On a narrow terminal the screen's own keys that do not fit
whole are hidden (the last ones first), never cut mid-word, and never the pinned ones.

A screen that binds :data:`MORE_ACTION` (``Binding("m", "footer_more", "More")``, calling
:meth:`WorkbenchFooter.toggle_more`) gets a pinned "more" key while any of its keys is hidden: it turns
the footer to the second page, the screen's keys the first page hides (by width, or ``show=False``), and
back."""

from __future__ import annotations

import asyncio
from functools import cache

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import HorizontalGroup
from textual.dom import DOMNode
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: The package whose classes' bindings are Workbench's own.
APP_PACKAGE = "workbench_app"
#: The action of a screen's "more keys" binding: its key is pinned while some of the screen's keys are hidden.
MORE_ACTION = "footer_more"
#: The actions whose keys stay visible at any width.
PINNED_ACTIONS = ("help", "quit", MORE_ACTION)


class WorkbenchFooter(Footer):
    DEFAULT_CSS = """
    WorkbenchFooter {
        .footer-pinned { dock: right; width: auto; height: 1; border-left: vkey $foreground 20%;
                         background: $footer-background; }
        .footer-pinned FooterKey.-command-palette { dock: none; border-left: none; margin-left: 1; }
    }
    """

    more = False  # showing the second page: the screen's keys the first one hides
    _hidden: tuple[str, ...] = ()  # the actions the first page hid for want of room, at its last fit

    def compose(self) -> ComposeResult:
        pinned: list[Widget] = []
        palette: list[Widget] = []
        for widget in (self._second_page() if self.more else super().compose()):
            if isinstance(widget, FooterKey) and widget.has_class("-command-palette"):
                palette.append(widget)
            elif isinstance(widget, FooterKey) and widget.action in PINNED_ACTIONS:
                if widget.action == MORE_ACTION:
                    widget.add_class("-more")
                    if self.more:
                        widget.description = "Back"
                pinned.append(widget)
            else:
                yield widget
        if pinned or palette:
            yield HorizontalGroup(*pinned, *palette, classes="footer-pinned")

    def toggle_more(self) -> None:
        """Show the other page of keys (the screen's "more" action calls it)."""
        self.more = not self.more
        self.refresh(recompose=True)  # on its own message loop: its keys bind to it

    def _second_page(self) -> ComposeResult:
        """The screen's keys the first page does not show, then the pinned ones."""
        screen = self.screen
        seen: set[str] = set()
        for node, binding, enabled, tooltip in screen.active_bindings.values():
            action = binding.action
            if action in seen or not binding.description:
                continue
            seen.add(action)
            if action in PINNED_ACTIONS or (node is screen and is_own(node, binding)
                                            and (not binding.show or action in self._hidden)):
                key = FooterKey(binding.key, self.app.get_key_display(binding), binding.description, action,
                                disabled=not enabled, tooltip=tooltip)
                key.compact = True  # the second page holds more keys
                yield key

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
        hidden: list[str] = []
        for w in self.children:
            if w.has_class("footer-pinned"):
                continue
            used += _width(w, self)
            w.display = used <= room
            if not w.display and isinstance(w, FooterKey):
                hidden.append(w.action)
        if self.more:
            return
        self._hidden = tuple(hidden)
        unshown = any(not b.show and b.description and node is self.screen and is_own(node, b)
                      for node, b, _, _ in self.screen.active_bindings.values() if b.action != MORE_ACTION)
        for key in self.query(".-more"):
            key.display = bool(hidden) or unshown


def is_own(node: DOMNode, binding: Binding) -> bool:
    """Whether ``binding`` is one of Workbench's own (declared by a class of the app, by its id when a keymap
    moved it), not one Textual gives every app, screen or widget (focus moves, copy, ctrl+q, a table's keys)."""
    ids, keys = _own_bindings(type(node))
    return (binding.id is not None and binding.id in ids) or (binding.action, binding.key) in keys


@cache
def _own_bindings(cls: type) -> tuple[frozenset[str], frozenset[tuple[str, str]]]:
    """The ids, and the (action, key) pairs, of the bindings the app's own classes in ``cls``'s MRO declare."""
    ids: set[str] = set()
    keys: set[tuple[str, str]] = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith(APP_PACKAGE):
            for b in klass.__dict__.get("BINDINGS", ()):
                if isinstance(b, Binding):
                    ids.update([b.id] if b.id else [])
                    keys.update((b.action, key.strip()) for key in b.key.split(","))
    return frozenset(ids), frozenset(keys)


def _width(widget: Widget, footer: Footer) -> int:
    """How wide ``widget`` is laid out in ``footer``: what it renders, with its margins (no layout needed)."""
    styles = widget.styles
    content = widget.get_content_width(footer.size, footer.app.size)
    return content + styles.gutter.width + styles.margin.width
