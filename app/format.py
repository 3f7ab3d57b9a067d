"""The app's formatting: the shared helpers (``workbench.format``) and the app's own colours."""

from __future__ import annotations

from workbench.format import clip, fcost, fnum, fpath, ftime

ROLE_COLORS = {"system": "magenta", "user": "dodger_blue1", "assistant": "green", "tool": "yellow"}

__all__ = ["ROLE_COLORS", "clip", "fcost", "fnum", "fpath", "ftime"]
