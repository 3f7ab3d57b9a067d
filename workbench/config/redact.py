"""Secrets in use are never written out: every API key a client of this process sends is registered
here, and every error message that may carry text from outside (a server's error body, an exception)
goes through :func:`redact` before it is printed, logged or stored."""

from __future__ import annotations

import threading

_MIN_LEN = 8  # shorter values are not secrets worth the false positives
_lock = threading.Lock()
_secrets: set[str] = set()
MASK = "[redacted]"


def register(value: str | None) -> None:
    """A secret in use by this process (an API key a client sends)."""
    if value and len(value) >= _MIN_LEN:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``[redacted]``."""
    if not _secrets or not text:
        return text
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


__all__ = ["MASK", "redact", "register"]
