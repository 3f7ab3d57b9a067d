"""What the gateway removes from an exchange before anything of it is written: keys and tokens (the secret
scan's patterns, the secrets Workbench holds, credentials in URLs) and, by default, personal data (email
addresses, phone numbers, payment card numbers that pass the Luhn check). Each is replaced by
``[redacted:KIND]``, and the count of replacements is kept with the exchange."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from workbench.bundles.secrets_scan import PATTERNS
from workbench.config.redact import redact

#: The personal data removed unless the gateway is told otherwise (``--redact`` adds patterns).
PERSONAL: dict[str, re.Pattern[str]] = {
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    "card": re.compile(r"\b(?:\d[ -]?){12,18}\d\b"),
    "phone": re.compile(r"(?<![\w+])\+?\d{1,3}?[ .-]?\(?\d{2,4}\)?[ .-]?\d{3,4}[ .-]?\d{3,4}\b"),
}


def _luhn(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = int(ch)
        if i % 2 == parity:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class Redactor:
    """Scrubs text: secrets always; the personal patterns named (all by default), plus any given."""

    def __init__(self, personal: Iterable[str] | None = None, extra: Iterable[str] = ()) -> None:
        names = list(PERSONAL) if personal is None else list(personal)
        self.patterns: list[tuple[str, re.Pattern[str]]] = [("secret", p) for _, p in PATTERNS]
        self.patterns += [(n, PERSONAL[n]) for n in names]
        self.patterns += [("pattern", re.compile(x)) for x in extra]

    def text(self, text: str) -> tuple[str, int]:
        """``text`` scrubbed, and how many replacements were made."""
        count = 0
        before = text
        text = redact(text)
        if text != before:
            count += text.count("[redacted]") - before.count("[redacted]")
        for kind, pattern in self.patterns:
            def swap(m: re.Match[str], kind: str = kind) -> str:
                nonlocal count
                if kind == "card" and not _luhn(re.sub(r"\D", "", m.group(0))):
                    return m.group(0)
                count += 1
                return f"[redacted:{kind}]"

            text = pattern.sub(swap, text)
        return text, count

    def messages(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """The messages with every text in them scrubbed (content strings and parts, tool arguments)."""
        total = 0
        out = []
        for m in messages:
            m = dict(m)
            content = m.get("content")
            if isinstance(content, str):
                m["content"], n = self.text(content)
                total += n
            elif isinstance(content, list):
                parts = []
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        text, n = self.text(part["text"])
                        part, total = {**part, "text": text}, total + n
                    parts.append(part)
                m["content"] = parts
            calls = m.get("tool_calls")
            if isinstance(calls, list):
                fixed = []
                for call in calls:
                    fn = call.get("function") if isinstance(call, dict) else None
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        args, n = self.text(fn["arguments"])
                        call, total = {**call, "function": {**fn, "arguments": args}}, total + n
                    fixed.append(call)
                m["tool_calls"] = fixed
            out.append(m)
        return out, total


__all__ = ["PERSONAL", "Redactor"]
