"""``workbench compare --traffic ROUTE``: a route's arms side by side on the feedback the product gave.

Each exchange a route served (``recorder.py``) is rated by its feedback: its own score, else its session's.
Per arm: how many exchanges it served, how many were rated, the mean rating with a 95% confidence interval
(normal approximation). Against the baseline arm (the one that served the most, unless named): the difference of
the means with a 95% CI from an unpaired bootstrap (seeded: the same traffic gives the same interval; the arms saw
different conversations, so nothing is paired), and whether it is significant (the interval excludes 0). A
shadow's answers are never shown to a user, so they have no feedback: their number is said, and they are left
out of the means.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.store.traffic import traffic_exchanges

from .from_traffic import parse_since

RESAMPLES = 2000
_Z95 = 1.959963984540054


def _mean_ci(values: list[float]) -> tuple[float | None, list[float] | None]:
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    half = _Z95 * statistics.stdev(values) / math.sqrt(len(values))
    return mean, [mean - half, mean + half]


def unpaired(base: list[float], other: list[float], seed: int = 0) -> dict[str, Any]:
    """``other``'s mean minus ``base``'s, with a 95% CI from an unpaired bootstrap."""
    if not base or not other:
        return {"delta": None, "ci95": None, "ci_method": "none", "significant": False}
    delta = statistics.fmean(other) - statistics.fmean(base)
    if len(base) < 2 or len(other) < 2:
        return {"delta": delta, "ci95": None, "ci_method": "none", "significant": False}
    rng = random.Random(seed)
    diffs = sorted(statistics.fmean(rng.choices(other, k=len(other))) - statistics.fmean(rng.choices(base, k=len(base)))
                   for _ in range(RESAMPLES))
    ci = [diffs[int(0.025 * RESAMPLES)], diffs[int(0.975 * RESAMPLES) - 1]]
    return {"delta": delta, "ci95": ci, "ci_method": "unpaired bootstrap", "significant": ci[0] > 0 or ci[1] < 0}


def compare_traffic(conn: Any, route: str, *, app: str | None = None, since: str | None = None,
                    baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The comparison ``compare --traffic`` prints (see the module docstring)."""
    arms: dict[str, list[float | None]] = {}
    shadows: dict[str, int] = {}
    for row in traffic_exchanges(conn, app=app, since=parse_since(since)):
        state = orjson.loads(row["state"] or "{}")
        if state.get("route") != route:
            continue
        arm = str(state.get("arm"))
        if state.get("shadow_of"):
            shadows[arm] = shadows.get(arm, 0) + 1
            continue
        arms.setdefault(arm, []).append(row["feedback"])
    if not arms:
        raise ConfigError(f"the store holds no traffic of the route {route!r}" + (f" of app {app!r}" if app else "") +
                          "; `workbench runs --kind gateway` lists what was recorded")
    if baseline is None:
        baseline = max(arms, key=lambda a: (len(arms[a]), a))
    elif baseline not in arms:
        raise ConfigError(f"--baseline {baseline}: the route's arms are {', '.join(sorted(arms))}")
    rated = {a: [float(v) for v in values if v is not None] for a, values in arms.items()}
    out = []
    for arm in [baseline, *sorted(a for a in arms if a != baseline)]:
        mean, ci = _mean_ci(rated[arm])
        entry: dict[str, Any] = {"arm": arm, "baseline": arm == baseline, "exchanges": len(arms[arm]),
                                 "rated": len(rated[arm]), "mean_feedback": mean, "mean_ci95": ci}
        if arm != baseline:
            entry.update(unpaired(rated[baseline], rated[arm], seed))
        out.append(entry)
    return {"route": route, "app": app, "baseline": baseline, "arms": out,
            "shadows": [{"arm": a, "exchanges": n} for a, n in sorted(shadows.items())]}


__all__ = ["compare_traffic", "unpaired"]
