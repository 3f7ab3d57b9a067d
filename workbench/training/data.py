"""Reading finished rollouts back from the store as :class:`~workbench.training.algorithms.TrainRollout`.

The async loop can poll a running run incrementally::

    rollouts, last_pk = load_rollouts(store.conn, run_id, after_pk=last_pk)
    groups = complete_groups(pending + rollouts, group_size)   # train only on whole groups
    out = make_algorithm("grpo").process(groups)

A group is every rollout of one task in one run (``group_id = f"{run_id}:{task_index}"``); the
``reward`` column already holds the weighted total, group rewards included. Rollouts written
without a trace (an endpoint that gave no token ids) come back with no branches, which the
algorithms count as ``skipped_no_tokens``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from workbench.records.trace import Trace
from workbench.store.train_records import traced_rollouts
from workbench.training.algorithms import TrainRollout, group_rollouts


def group_id(run_id: str, task_index: int) -> str:
    return f"{run_id}:{task_index}"


def load_rollouts(conn: sqlite3.Connection, run_id: str, *, after_pk: int = 0, limit: int | None = None,
                  task_indices: Iterable[int] | None = None) -> tuple[list[TrainRollout], int]:
    """The run's rollouts with ``pk > after_pk`` in commit order (at most ``limit``), each with its
    trace's branches; and the highest pk read (``after_pk`` when none), to poll from next time."""
    out: list[TrainRollout] = []
    last = after_pk
    for pk, rid, task_index, reward, status, nodes, ids, lps, mask in traced_rollouts(
            conn, run_id, after_pk=after_pk, limit=limit, task_indices=task_indices):
        trace = Trace.unpack(nodes, ids, lps, mask) if nodes is not None else None
        out.append(TrainRollout.from_trace(rid, group_id(run_id, task_index), reward, trace, status=status, pk=pk))
        last = max(last, pk)
    return out, last


def complete_groups(rollouts: Sequence[TrainRollout], group_size: int) -> list[list[TrainRollout]]:
    """The groups that have all ``group_size`` rollouts (errored ones count: they are finished)."""
    return [g for g in group_rollouts(rollouts) if len(g) >= group_size]


__all__ = ["complete_groups", "group_id", "groups_trained_on", "load_rollouts", "split_stale"]


def split_stale(groups: Sequence[Sequence[TrainRollout]], version: int, max_off_policy_steps: int
                ) -> tuple[list[list[TrainRollout]], list[list[TrainRollout]], dict[int, int]]:
    """(fresh groups, stale groups, staleness histogram in rollouts) for a trainer at policy
    ``version``: a group is stale when any of its rollouts was sampled more than
    ``max_off_policy_steps`` versions ago (a rollout of unknown version counts as fresh)."""
    fresh: list[list[TrainRollout]] = []
    stale: list[list[TrainRollout]] = []
    hist: dict[int, int] = {}
    for g in groups:
        ages = [version - v for r in g if (v := r.policy_version) is not None]
        for a in ages:
            hist[a] = hist.get(a, 0) + 1
        (stale if ages and max(ages) > max_off_policy_steps else fresh).append(list(g))
    return fresh, stale, hist


def groups_trained_on(groups: Sequence[Sequence[TrainRollout]], version: int, groups_per_step: int,
                      max_off_policy_steps: int) -> int:
    """How many of ``groups`` a trainer at policy ``version`` trains on when it takes them in order, a batch of
    ``groups_per_step`` at a time, dropping the stale ones (:func:`split_stale`) and stepping after each batch
    with a fresh group in it. The groups of a last, partial batch count when fresh: they join the next ones."""
    trained = 0
    for i in range(0, len(groups), groups_per_step):
        batch = groups[i:i + groups_per_step]
        fresh = split_stale(batch, version, max_off_policy_steps)[0]
        trained += len(fresh)
        if fresh and len(batch) == groups_per_step:
            version += 1
    return trained
