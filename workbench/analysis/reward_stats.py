"""Reward distributions: summary statistics and a histogram two distributions share (before/after).

The before and after histograms of a re-score use the same bins, so their bars can be compared
side by side; a distribution's ``stderr`` is the standard error of its mean (sample std / sqrt n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def stderr_of_sums(n: int, total: float, sumsq: float) -> float | None:
    """The standard error of the mean of ``n`` values from their sum and the sum of their squares
    (sample std / sqrt n), or None for fewer than two values."""
    if n < 2:
        return None
    mean = total / n
    return math.sqrt(max(0.0, (sumsq - n * mean * mean) / (n - 1)) / n)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Summary of a set of reward values (all None when the set is empty)."""

    n: int
    mean: float | None = None
    std: float | None = None  # sample standard deviation (n - 1); 0 for a single value
    stderr: float | None = None  # of the mean
    min: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution:
        n = len(values)
        if n == 0:
            return cls(0)
        mean = math.fsum(values) / n
        var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
        std = math.sqrt(var)
        return cls(n, mean, std, std / math.sqrt(n), min(values), max(values))

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Histogram:
    """Counts of two distributions over the same ``bins`` equal-width bins (``edges`` has bins + 1)."""

    edges: list[float]
    before: list[int]
    after: list[int]

    @property
    def peak(self) -> int:
        return max([*self.before, *self.after, 0])

    def labels(self, digits: int = 2) -> list[str]:
        """``[lo, hi)`` for each bin; the last bin is closed, ``[lo, hi]``."""
        e, n = self.edges, len(self.edges) - 1
        return [f"[{e[i]:.{digits}f}, {e[i + 1]:.{digits}f}{']' if i == n - 1 else ')'}" for i in range(n)]

    def as_dict(self) -> dict[str, list[float] | list[int]]:
        return {"edges": self.edges, "before": self.before, "after": self.after}


def shared_histogram(before: Sequence[float], after: Sequence[float], bins: int = 10) -> Histogram:
    """Histograms of ``before`` and ``after`` over one set of bins spanning both.

    When every value is the same the single value sits in the middle of a unit-wide range, so a
    constant reward still shows as one bar instead of a division by zero.
    """
    if bins < 1:
        raise ValueError("a histogram needs at least one bin")
    values = [*before, *after]
    if not values:
        return Histogram([0.0, 1.0], [0], [0])
    lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    edges = [lo + i * width for i in range(bins)] + [hi]

    def count(vals: Sequence[float]) -> list[int]:
        out = [0] * bins
        for v in vals:
            out[min(bins - 1, max(0, int((v - lo) / width)))] += 1
        return out

    return Histogram(edges, count(before), count(after))
