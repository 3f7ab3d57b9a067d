"""Token prices per model (USD per million tokens), kept in the store and editable.

The defaults are public list prices known when this table was written; they change, so every
row says where it came from and ``workbench prices set`` overrides any of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DEFAULT_SOURCE = "list price, 2025 (edit with `workbench prices set`)"

#: model id or prefix* -> (provider, input $/Mtok, output $/Mtok)
DEFAULT_PRICES: dict[str, tuple[str, float, float]] = {
    "gpt-4o-mini*": ("openai", 0.15, 0.60),
    "gpt-4o*": ("openai", 2.50, 10.00),
    "gpt-4.1-nano*": ("openai", 0.10, 0.40),
    "gpt-4.1-mini*": ("openai", 0.40, 1.60),
    "gpt-4.1*": ("openai", 2.00, 8.00),
    "o3-mini*": ("openai", 1.10, 4.40),
    "o4-mini*": ("openai", 1.10, 4.40),
    "claude-3-5-haiku*": ("anthropic", 0.80, 4.00),
    "claude-3-5-sonnet*": ("anthropic", 3.00, 15.00),
    "claude-sonnet-4*": ("anthropic", 3.00, 15.00),
    "claude-opus-4*": ("anthropic", 15.00, 75.00),
    # Models served on this machine cost tokens nothing; their cost is compute time.
    "workbench-tiny*": ("local", 0.0, 0.0),
    "local/*": ("local", 0.0, 0.0),
}


#: What a cached prompt token costs, as a share of the input price: a cache read, a (5-minute) cache write.
CACHE_READ_RATE = 0.1
CACHE_WRITE_RATE = 1.25


@dataclass(frozen=True, slots=True)
class Price:
    model: str
    provider: str
    input_usd_per_mtok: float
    output_usd_per_mtok: float
    source: str = ""

    def cost(self, prompt_tokens: int, completion_tokens: int, cache_read_tokens: int = 0,
             cache_write_tokens: int = 0) -> float:
        """USD for the tokens. ``prompt_tokens`` includes the cached ones: a cache read costs
        :data:`CACHE_READ_RATE` of the input price, a cache write :data:`CACHE_WRITE_RATE` (Anthropic's
        published rates for prompt caching)."""
        plain = max(0, prompt_tokens - cache_read_tokens - cache_write_tokens)
        prompt = plain + cache_read_tokens * CACHE_READ_RATE + cache_write_tokens * CACHE_WRITE_RATE
        return (prompt * self.input_usd_per_mtok + completion_tokens * self.output_usd_per_mtok) / 1e6

    def cost_of_calls(self, prompt_tokens: int, completion_tokens: int, calls: Iterable[Any]) -> float:
        """:meth:`cost` of a rollout's tokens, the cache reads and writes its model calls reported (each call's
        ``extra``) included."""
        extra = [c.extra or {} for c in calls]
        return self.cost(prompt_tokens, completion_tokens, sum(int(x.get("cache_read_tokens") or 0) for x in extra),
                         sum(int(x.get("cache_write_tokens") or 0) for x in extra))


def match_price(model: str, table: dict[str, Price]) -> Price | None:
    """The exact row for ``model``, else the longest ``prefix*`` row that matches it."""
    if model in table:
        return table[model]
    best: Price | None = None
    best_len = -1
    for key, price in table.items():
        if key.endswith("*") and model.startswith(key[:-1]) and len(key) > best_len:
            best, best_len = price, len(key)
    return best
