"""What a run is for: its kind, recorded on every run, and which kinds a listing shows by default.

A store fills with runs the user did not ask to read: ``validate`` and the probe write a run per policy,
the debugger and Play one per session. Listings, the latest reward, Traces, statistics and ``rescore``
show the user's own work (:data:`USER_KINDS`) unless asked for other kinds (``--kind``, the app's kind
filter, the MCP tools' ``kinds`` argument). The kinds are declared beside the store
(:mod:`workbench.store.run_kinds`), which refuses a run of any other kind; they are read from here.
"""

from __future__ import annotations

from collections.abc import Iterable

from workbench.errors import OptionError
from workbench.store.run_kinds import PIPELINE_KINDS, RUN_KINDS, USER_KINDS, check_kind

#: The word that asks for every kind.
ALL = "all"


def parse_kinds(values: str | Iterable[str] | None, field: str = "RunFilter.kinds") -> tuple[str, ...]:
    """The kinds ``values`` name (repeated or comma-separated; ``all`` for every kind), in
    :data:`RUN_KINDS` order; :data:`USER_KINDS` when none is named. An unknown kind is an
    :class:`~workbench.errors.OptionError` on ``field`` that lists the kinds."""
    if values is None:
        return USER_KINDS
    words = [values] if isinstance(values, str) else list(values)
    named = {w.strip().lower() for v in words for w in v.split(",") if w.strip()}
    if not named:
        return USER_KINDS
    if ALL in named:
        return tuple(RUN_KINDS)
    unknown = sorted(named - RUN_KINDS.keys())
    if unknown:
        raise OptionError(field, ", ".join(unknown), ", ".join([*RUN_KINDS, ALL]),
                          "{field} {value} is not a run kind; the kinds are {allowed}")
    return tuple(k for k in RUN_KINDS if k in named)


__all__ = ["ALL", "PIPELINE_KINDS", "RUN_KINDS", "USER_KINDS", "check_kind", "parse_kinds"]
