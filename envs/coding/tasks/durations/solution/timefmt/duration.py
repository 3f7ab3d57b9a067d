"""Durations like "1h30m" or "45s"."""

import re

_PART = re.compile(r"(\d+)([hms])")
_UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> int:
    """The number of seconds in ``text``: a sequence of <number><h|m|s> parts, e.g. "2h5m10s"."""
    text = text.strip().lower()
    if not text or _PART.sub("", text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(text))
