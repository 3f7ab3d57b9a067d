"""Formatting helpers shared by the CLI and the app: numbers, money, times, paths and clipped text, and
text from data made safe for a terminal.

Anything that came from data (names, messages, answers, errors) is shown as text: its control characters
made visible (``\x1b`` as ``␛``; newlines and tabs kept), never parsed as Rich markup. :func:`visible`,
:func:`safe_text` (a ``rich.text.Text``) and :func:`esc` (for a markup template) do it, and
:class:`SafeConsole`, the CLI's console, makes visible whatever control character still reaches it.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.errors import MarkupError
from rich.markup import escape
from rich.segment import Segment
from rich.text import Text

from workbench.config.redact import redact

#: C0 controls (but tab and newline) as their Unicode control pictures (␛, ␍, ␇...), DEL as ␡, C1 controls
#: and the bidirectional overrides as escapes: whatever a terminal would act on is shown instead.
_VISIBLE: dict[int, str] = {i: chr(0x2400 + i) for i in range(32) if i not in (9, 10)}
_VISIBLE[0x7F] = "\u2421"
_VISIBLE.update({i: f"\\x{i:02x}" for i in range(0x80, 0xA0)})
_VISIBLE.update({i: f"\\u{i:04x}" for i in (0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))})
_NEEDS = re.compile("[" + "".join(re.escape(chr(i)) for i in _VISIBLE) + "]")


def fnum(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


#: Decimal places money is printed with (``$1.2500``, ``$1,234.5000``): a tenth of a cent is still seen.
MONEY_DECIMALS = 4
#: Significant digits an amount too small for those places keeps (``$0.000021``, ``$0.0000136``).
MONEY_DIGITS = 3


def fcost(v: float | None) -> str:
    """A money amount in US dollars, the one way every cost is printed: :data:`MONEY_DECIMALS` places
    with thousands separators (``$0.0847``, ``$1,234.5000``, ``$0.0000`` for nothing), and an amount below
    a tenth of a cent with :data:`MONEY_DIGITS` significant digits (``$0.000021``), so a small cost never
    reads as ``$0.0000``."""
    if v is None or v != v:  # None or NaN: no amount to say
        return "-"
    sign, a = ("-" if v < 0 else ""), abs(v)
    if a == 0 or a >= 10 ** (1 - MONEY_DECIMALS):
        return f"{sign}${a:,.{MONEY_DECIMALS}f}"
    decimals = MONEY_DIGITS - 1 - math.floor(math.log10(a))
    whole, frac = f"{a:.{decimals}f}".split(".")
    return f"{sign}${whole}.{frac.rstrip('0').ljust(MONEY_DECIMALS, '0')}"


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


def visible(text: Any) -> str:
    """``text`` (any value, as ``str``) as it may be shown: the secrets this process holds and the
    credentials of any URL in it redacted, its control characters made visible (``\\r\\n`` becomes ``\\n``)."""
    text = redact(text if isinstance(text, str) else str(text))
    if not _NEEDS.search(text):
        return text
    return text.replace("\r\n", "\n").translate(_VISIBLE)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`visible` would change."""
    return _NEEDS.search(text) is not None


def safe_text(value: Any, style: str = "") -> Text:
    """Data as a ``rich.text.Text``: shown as it is (no markup), control characters visible."""
    return Text(visible(value), style=style)


def esc(value: Any) -> str:
    """Data for a markup template (``f"[bold]{esc(name)}[/]"``): markup escaped, control characters visible."""
    return escape(visible(value))


def fsize(n: float) -> str:
    """A byte count for people: 812 B, 4.1 kB, 59.8 MB."""
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


def cut(text: str, limit: int = 10_000, lines: int = 400) -> str:
    """``text`` up to ``limit`` characters and ``lines`` lines, and what was left out said with its size."""
    if len(text) <= limit and text.count("\n", 0, limit + 1) < lines:
        return text
    head = text[:limit]
    nl = -1
    for _ in range(lines):
        nl = head.find("\n", nl + 1)
        if nl < 0:
            break
    if nl >= 0:
        head = head[:nl]
    rest = len(text[len(head):].encode("utf-8", "surrogatepass"))
    return f"{head}\n… [{fsize(rest)} more, --full to print all]"


class SafeConsole(Console):
    """A Rich console that shows what it prints as text: a control character in any rendered text (data
    that reached it unescaped) is made visible, and a print whose markup does not parse (data inside a
    markup string) is printed without markup instead of failing. Rich's own styles and controls pass."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and _NEEDS.search(seg.text):
                yield Segment(visible(seg.text), seg.style)
            else:
                yield seg

    def print(self, *objects: Any, **kwargs: Any) -> None:
        try:
            super().print(*objects, **kwargs)
        except MarkupError:
            super().print(*objects, **{**kwargs, "markup": False})
