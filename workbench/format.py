"""Formatting helpers shared by the CLI and the app: numbers, money, times, paths and clipped text."""

from __future__ import annotations

import time
from pathlib import Path


def fnum(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def fcost(v: float | None) -> str:
    return "-" if v is None else f"${v:.4f}"


def ftime(ts: float | None, short: bool = False) -> str:
    return "-" if ts is None else time.strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M", time.localtime(ts))


def clip(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def fpath(p: Path | str | None) -> str:
    """A path as the user would type it: relative to the working directory when under it, ~ for home."""
    if p is None:
        return "-"
    path = Path(p)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        pass
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)
