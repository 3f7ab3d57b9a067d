"""A Traces search's words found in a transcript: each message's occurrences highlighted (a style on the
Rich text, never markup), and the messages that hold one, for the next-hit keys."""

from __future__ import annotations

import re

from rich.text import Text

HIT_STYLE = "bold black on yellow"


def search_terms(text: str | None) -> list[str]:
    """The words and "quoted phrases" of a search as the store matches them (``prefix*``: its prefix),
    longest first so a phrase is highlighted whole."""
    terms = []
    for phrase, word in re.findall(r'"([^"]*)"?|(\S+)', text or ""):
        term = (phrase or word.rstrip("*")).strip()
        if any(ch.isalnum() for ch in term):
            terms.append(term)
    return sorted(dict.fromkeys(terms), key=len, reverse=True)


def highlight_hits(text: Text, terms: list[str]) -> int:
    """Highlight each occurrence of ``terms`` in ``text`` (any case), in place; how many there are."""
    if not terms:
        return 0
    return text.highlight_words(terms, HIT_STYLE, case_sensitive=False)


__all__ = ["HIT_STYLE", "highlight_hits", "search_terms"]
