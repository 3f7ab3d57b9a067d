"""The base of the app's dialogs: a modal screen whose own keys act as the app receives them.

Textual hands a key to the focused widget as it arrives, and runs a (non-priority) binding only once the
key has bubbled back up to the app. A key typed right after a dialog's closing key (escape) therefore
reaches the dialog's focused widget before the dialog has closed: an input types it, anything else drops
it, and the screen beneath never sees it. A :class:`Dialog`'s own bindings are priority bindings, run as the
key arrives, so the dialog is gone before the next key is routed, and that key goes to the screen beneath.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from textual.binding import Binding
from textual.screen import ModalScreen

ResultType = TypeVar("ResultType")


class Dialog(ModalScreen[ResultType]):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        own = cls.__dict__.get("BINDINGS")
        if own:  # before Textual merges the class's bindings
            cls.BINDINGS = [dataclasses.replace(b, priority=True) if isinstance(b, Binding) else b for b in own]
        super().__init_subclass__(**kwargs)
