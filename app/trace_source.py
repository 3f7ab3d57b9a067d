"""The Traces screen's bridge to ``workbench.store.queries``: filters, pages, count, one rollout, export.

Called from worker threads only; each thread reads through its own connection (StoreHandle).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from workbench_app.store_access import StoreHandle

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

    def describe(self) -> str:
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                         if getattr(self, f.name) is not None)

    def query(self, sort: str) -> RolloutFilter:
        return RolloutFilter(env=self.env, run_id=self.run_id, model=self.model, min_reward=self.min_reward,
                             max_reward=self.max_reward, error_kind=self.error_kind, text=self.text,
                             source=self.source, sort=sort)


class RolloutSource:
    """A :class:`~workbench_app.widgets.virtual_table.PageSource` over the store's rollouts.

    Pages next to a cached page are read by keyset (constant cost at any depth); a page far from
    any cached one is read by offset from whichever end of the order is nearer.
    """

    def __init__(self, store: StoreHandle, filters: Filters, sort: str) -> None:
        self.store, self.filters, self.sort = store, filters, sort
        self.forward = filters.query(sort)
        self.backward = filters.query(reverse_sort(sort))

    def page(self, index: int, size: int, prev: list[RolloutSummary] | None, next: list[RolloutSummary] | None,
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
