"""The Traces screen's bridge to ``workbench.store.queries``: filters, pages, count, one rollout, export.

Called from worker threads only; each thread reads through its own connection (StoreHandle).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from workbench_app.store_access import StoreHandle

from workbench.runs.kinds import RUN_KINDS, USER_KINDS
from workbench.store.queries import (
    RolloutFilter,
    RolloutSummary,
    count_rollouts,
    distinct_values,
    get_rollout,
    page_rollouts,
)

#: Where a rollout came from (the store's ``rollout.source``): a model's eval or training run, a file
#: ``workbench import`` read, or a person playing the policy.
SOURCES = ["model", "imported", "human"]

#: (label, sort understood by ``RolloutFilter.sort``)
SORTS: list[tuple[str, str]] = [
    ("newest first", "-created"),
    ("oldest first", "created"),
    ("reward high→low", "-reward"),
    ("reward low→high", "reward"),
    ("slowest first", "-duration"),
]


#: The kind filter's choices, in the order ``K`` steps through them: (label, kinds; None: every kind).
#: ``mine`` is the user's own work (:data:`~workbench.runs.kinds.USER_KINDS`), shown by default.
KIND_CHOICES: list[tuple[str, tuple[str, ...] | None]] = [
    ("mine", USER_KINDS), ("all", None),
    *((k, (k,)) for k in RUN_KINDS if k not in USER_KINDS),
    *((k, (k,)) for k in USER_KINDS),
]


def kind_label(kinds: tuple[str, ...] | None) -> str:
    """What the kind filter shows for ``kinds``: ``mine``, ``all`` or the kinds' names."""
    for label, choice in KIND_CHOICES:
        if choice == kinds:
            return label
    return ",".join(kinds or ())


def next_kinds(kinds: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """The kind filter's choice after ``kinds`` (from the last, ``mine`` again)."""
    choices = [c for _, c in KIND_CHOICES]
    i = choices.index(kinds) if kinds in choices else -1
    return choices[(i + 1) % len(choices)]


def reverse_sort(sort: str) -> str:
    """The exact reverse order (ties on pk reverse too, and unrewarded rows change ends)."""
    return sort[1:] if sort.startswith("-") else "-" + sort


@dataclass(frozen=True, slots=True)
class Filters:
    """What the filter inputs hold (comparable, so unchanged input does not re-query)."""

    env: str | None = None
    model: str | None = None
    run_id: str | None = None
    error_kind: str | None = None  # a kind, "any" or "none"
    min_reward: float | None = None
    max_reward: float | None = None
    text: str | None = None
    source: str | None = None  # one of SOURCES
    kinds: tuple[str, ...] | None = USER_KINDS  # the kinds of run shown (None: every kind); see KIND_CHOICES

    def describe(self) -> str:
        """The filters set, ``kind=...`` only when not the default (the user's own kinds)."""
        parts = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if f.name != "kinds" and getattr(self, f.name) is not None]
        if self.kinds != USER_KINDS:
            parts.append(f"kind={kind_label(self.kinds)}")
        return ", ".join(parts)

    def query(self, sort: str) -> RolloutFilter:
        return RolloutFilter(env=self.env, run_id=self.run_id, model=self.model, min_reward=self.min_reward,
                             max_reward=self.max_reward, error_kind=self.error_kind, text=self.text,
                             source=self.source, kinds=self.kinds, sort=sort)


class RolloutSource:
    """A :class:`~workbench_app.widgets.virtual_table.PageSource` over the store's rollouts.

    Pages next to a cached page are read by keyset (constant cost at any depth); a page far from
    any cached one is read by offset from whichever end of the order is nearer.
    """

    def __init__(self, store: StoreHandle, filters: Filters, sort: str) -> None:
        self.store, self.filters, self.sort = store, filters, sort
        self.forward = filters.query(sort)
        self.backward = filters.query(reverse_sort(sort))
        #: run id -> the registered model name its user picked (None: the model id is its name)
        self.model_names: dict[str, str | None] = {}

    def model_label(self, row: RolloutSummary) -> str:
        """The row's model as the user called it: the run's registered model name, else the model id."""
        return self.model_names.get(row.run_id) or row.model

    def page(self, index: int, size: int, prev: list[RolloutSummary] | None, next: list[RolloutSummary] | None,
             total: int | None) -> list[RolloutSummary]:
        rows = self._page(index, size, prev, next, total)
        self._read_model_names(rows)
        return rows

    def _read_model_names(self, rows: list[RolloutSummary]) -> None:
        """The registered model names of the rows' runs not read yet (one lookup per run)."""
        from workbench.store.reports import compared_run

        conn = self.store.get().conn
        for run_id in {r.run_id for r in rows} - self.model_names.keys():
            run = compared_run(conn, run_id)
            self.model_names[run_id] = None if run is None else run[3]

    def _page(self, index: int, size: int, prev: list[RolloutSummary] | None, next: list[RolloutSummary] | None,
              total: int | None) -> list[RolloutSummary]:
        conn = self.store.get().conn
        if prev:
            return page_rollouts(conn, self.forward, limit=size, after=prev[-1].cursor(self.sort))
        if next:
            rows = page_rollouts(conn, self.backward, limit=size, after=next[0].cursor(self.backward.sort))
            return rows[::-1]
        start = index * size
        if total is not None and start > total // 2:
            n = max(0, min(size, total - start))
            back = total - start - n
            return page_rollouts(conn, self.backward, limit=n, offset=back)[::-1]
        return page_rollouts(conn, self.forward, limit=size, offset=start)

    def count(self) -> int:
        return count_rollouts(self.store.get().conn, self.forward)


def load_rollout(store: StoreHandle, rollout_id: str) -> dict[str, Any]:
    return get_rollout(store.get().conn, rollout_id)


def suggestions(store: StoreHandle) -> dict[str, list[str]]:
    """Known values for the env, model, run and error-kind inputs (cheap skip scans)."""
    conn = store.get().conn
    out = {col: distinct_values(conn, col) for col in ("env", "model", "run_id", "error_kind")}
    out["error_kind"] = ["any", "none", *out["error_kind"]]
    return out


def export_jsonl(store: StoreHandle, filters: Filters, sort: str, path: Path) -> int:
    """Write every rollout matching ``filters`` (full: messages, scores, calls, errors) as JSONL."""
    from workbench.analysis.export import export_rollouts

    path.parent.mkdir(parents=True, exist_ok=True)
    return export_rollouts(store.get(), filters.query(sort), path, fmt="rollouts")


def export_atif(store: StoreHandle, filters: Filters, sort: str, folder: Path) -> int:
    """Write every rollout matching ``filters`` as a Harbor ATIF trajectory, one trial folder each, into the
    new or empty ``folder`` (``workbench export --format atif``); an export that fails leaves nothing."""
    from workbench.analysis.export_atif import export_atif as write_atif

    return write_atif(store.get(), filters.query(sort), folder)
