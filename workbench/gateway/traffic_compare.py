"""``workbench compare --traffic ROUTE``: a route's arms side by side on the feedback the product gave, and on an
environment's rubric re-scored over the answers they gave (``--env``).

Each exchange a route served (``recorder.py``) is rated by its feedback: its own score, else its session's.
Per arm: how many exchanges it served, how many were rated, the mean rating with a 95% confidence interval
(normal approximation). Against the baseline arm (the one that served the most, unless named): the difference of
the means with a 95% CI from an unpaired bootstrap (seeded: the same traffic gives the same interval; the arms saw
different conversations, so nothing is paired), and whether it is significant (the interval excludes 0). A
shadow's answers are never shown to a user, so they have no feedback: their number is said, and they are left
out of the feedback means.

With an environment (``traffic_rubric.py``), each arm's answers are also scored by its rubric: per arm the mean
score with its CI and, against the baseline, the unpaired difference. A shadow answered the very conversation
its primary answered, so it is compared pairwise: the mean of (shadow's score - the primary's score) over the
exchanges both have a score for, with a paired bootstrap 95% CI.
"""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import orjson

from workbench.analysis.compare import (
    BOOTSTRAP_RESAMPLES,
    normal_half_width,
    paired_interval,
    percentile_interval,
)
from workbench.authoring.environment import Environment
from workbench.errors import ConfigError
from workbench.store.traffic import traffic_exchanges

from .from_traffic import parse_since
from .traffic_rubric import TrafficScores, score_traffic


def _mean_ci(values: list[float]) -> tuple[float | None, list[float] | None]:
    if not values:
        return None, None
    mean = math.fsum(values) / len(values)
    if len(values) < 2:
        return mean, None
    half = normal_half_width(values)
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
                   for _ in range(BOOTSTRAP_RESAMPLES))
    ci = percentile_interval(diffs)
    return {"delta": delta, "ci95": ci, "ci_method": "unpaired bootstrap", "significant": ci[0] > 0 or ci[1] < 0}


def route_exchanges(conn: Any, route: str, *, app: str | None = None, since: str | None = None
                    ) -> list[dict[str, Any]]:
    """The recorded exchanges of ``route`` (its arms' and its shadows'), oldest first, each with ``state`` read."""
    rows = []
    for row in traffic_exchanges(conn, app=app, since=parse_since(since)):
        state = orjson.loads(row["state"] or "{}")
        if state.get("route") == route:
            rows.append({**row, "state_dict": state})
    if not any(not r["state_dict"].get("shadow_of") for r in rows):
        raise ConfigError(f"the store holds no traffic of the route {route!r}" + (f" of app {app!r}" if app else "") +
                          "; `workbench runs --kind gateway` lists what was recorded")
    return rows


def _by_arm(rows: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """The exchanges each arm served, and each shadow's answers."""
    arms: dict[str, list[dict[str, Any]]] = {}
    shadows: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        arm = str(row["state_dict"].get("arm"))
        (shadows if row["state_dict"].get("shadow_of") else arms).setdefault(arm, []).append(row)
    return arms, shadows


def _baseline(arms: dict[str, list[dict[str, Any]]], baseline: str | None) -> str:
    """The arm named, else the one that served the most; a name that is none of the arms is one line."""
    if baseline is None:
        return max(arms, key=lambda a: (len(arms[a]), a))
    if baseline not in arms:
        raise ConfigError(f"--baseline {baseline}: the route's arms are {', '.join(sorted(arms))}")
    return baseline


def compare_exchanges(rows: list[dict[str, Any]], route: str, *, app: str | None = None,
                      baseline: str | None = None, seed: int = 0, scores: TrafficScores | None = None
                      ) -> dict[str, Any]:
    """The comparison of ``route_exchanges``' rows (see the module docstring)."""
    arms, shadows = _by_arm(rows)
    baseline = _baseline(arms, baseline)
    rated = {a: [float(r["feedback"]) for r in served if r["feedback"] is not None] for a, served in arms.items()}
    totals = scores.totals if scores is not None else {}
    scored = {a: [totals[r["id"]] for r in served if r["id"] in totals] for a, served in arms.items()}
    out = []
    for arm in [baseline, *sorted(a for a in arms if a != baseline)]:
        mean, ci = _mean_ci(rated[arm])
        entry: dict[str, Any] = {"arm": arm, "baseline": arm == baseline, "exchanges": len(arms[arm]),
                                 "rated": len(rated[arm]), "mean_feedback": mean, "mean_ci95": ci}
        if arm != baseline:
            entry.update(unpaired(rated[baseline], rated[arm], seed))
        if scores is not None:
            mean, ci = _mean_ci(scored[arm])
            entry["rubric"] = {"scored": len(scored[arm]), "mean": mean, "mean_ci95": ci}
            if arm != baseline:
                entry["rubric"].update(unpaired(scored[baseline], scored[arm], seed))
        out.append(entry)
    shadow_out = []
    for arm, answered in sorted(shadows.items()):
        entry = {"arm": arm, "exchanges": len(answered)}
        if scores is not None:
            own = [totals[r["id"]] for r in answered if r["id"] in totals]
            diffs = [totals[r["id"]] - totals[r["state_dict"]["shadow_of"]] for r in answered
                     if r["id"] in totals and r["state_dict"]["shadow_of"] in totals]
            mean, ci = _mean_ci(own)
            delta, pci, method = paired_interval(diffs, seed)
            entry["rubric"] = {"scored": len(own), "mean": mean, "mean_ci95": ci, "pairs": len(diffs),
                               "delta": delta if diffs else None, "ci95": pci, "ci_method": method,
                               "significant": bool(pci is not None and (pci[0] > 0 or pci[1] < 0))}
        shadow_out.append(entry)
    return {"route": route, "app": app, "baseline": baseline, "arms": out, "shadows": shadow_out,
            **({"rubric": scores.as_dict()} if scores is not None else {})}


def compare_traffic(conn: Any, route: str, *, app: str | None = None, since: str | None = None,
                    baseline: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The comparison ``compare --traffic`` prints, on feedback alone."""
    return compare_exchanges(route_exchanges(conn, route, app=app, since=since), route, app=app, baseline=baseline,
                             seed=seed)


async def compare_traffic_on_env(conn: Any, route: str, env: Environment, *, app: str | None = None,
                                 since: str | None = None, baseline: str | None = None, seed: int = 0
                                 ) -> dict[str, Any]:
    """The comparison ``compare --traffic ROUTE --env ENV`` prints: on feedback and on ``env``'s rubric."""
    rows = route_exchanges(conn, route, app=app, since=since)
    _baseline(_by_arm(rows)[0], baseline)  # a wrong --baseline is said before scoring
    scores = await score_traffic(env, rows)
    return compare_exchanges(rows, route, app=app, baseline=baseline, seed=seed, scores=scores)


__all__ = ["compare_exchanges", "compare_traffic", "compare_traffic_on_env", "route_exchanges", "unpaired"]
