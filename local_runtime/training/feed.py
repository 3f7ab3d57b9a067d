"""Where the trainer's rank 0 gets finished rollouts and where it writes its records: a feed.

The trainer (``workbench_local.training.worker``) never talks to the orchestrator directly. It reads
finished rollouts from a feed in commit order, from a cursor, and writes its records (steps,
skipped steps, events) back to it; the orchestrator learns about new policies from those records.

* :class:`StoreFeed` — the run's SQLite store itself (``workbench train`` on one machine: the
  trainer opens the orchestrator's store). Its cursor is the rollout's ``pk``.
* ``workbench_cloud.handoff.LogFeed`` — two append-only event logs (a directory for
  ``workbench launch --backend local``, a ``modal.Dict`` on Modal, where the trainer nodes do not
  have the orchestrator's store). Its cursor is the batch log's sequence number.

Only the cursor's meaning differs; :class:`~workbench_local.training.worker.TrainLoop` records it as
``last_pk`` in every step record and resumes from it, whichever feed it has.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from workbench.store import Store
from workbench.training.algorithms import TrainRollout
from workbench.training.data import load_rollouts


class TrainFeed(Protocol):
    def read(self, after: int) -> tuple[list[TrainRollout], int]:
        """Finished rollouts past cursor ``after`` in commit order, and the cursor to read from next."""
        ...

    def record(self, step: int, kind: str, metrics: dict[str, Any], message: str) -> None:
        """One training record (``step`` | ``skipped`` | ``event``) for the orchestrator."""
        ...

    def records(self, kind: str) -> list[dict[str, Any]]:
        """The run's records of ``kind`` so far, oldest first (``step``, ``metrics``, ``message``); for
        ``eval``, the orchestrator's held-out evals (at least their ``step``) as far as the feed knows them."""
        ...

    def gone(self) -> str | None:
        """Why the orchestrator is not coming back (the trainer then exits with code 3), or None."""
        ...


class StoreFeed:
    """The feed of a trainer that shares the orchestrator's machine and store."""

    def __init__(self, store: Store, run_id: str, parent_pid: int | None = None) -> None:
        self.store, self.run_id, self.parent_pid = store, run_id, parent_pid

    def read(self, after: int) -> tuple[list[TrainRollout], int]:
        return load_rollouts(self.store.conn, self.run_id, after_pk=after)

    def record(self, step: int, kind: str, metrics: dict[str, Any], message: str) -> None:
        self.store.record_train(self.run_id, step, kind, metrics, message)

    def records(self, kind: str) -> list[dict[str, Any]]:
        return self.store.train_records(self.run_id, kind)

    def gone(self) -> str | None:
        if self.parent_pid is None:
            return None
        try:
            os.kill(self.parent_pid, 0)
        except ProcessLookupError:
            return f"the orchestrator (pid {self.parent_pid}) is gone"
        return None


__all__ = ["StoreFeed", "TrainFeed"]
