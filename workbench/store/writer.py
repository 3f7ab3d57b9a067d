"""One batched writer per process: finished rollouts are committed in groups from one thread.

A killed process loses at most the batch in flight; every committed batch is a complete SQLite
transaction in WAL mode, so the file is never corrupted.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..rollout import ModelCall, RolloutError, Usage, searchable_text
from ..rubric import Scores
from ..tasks import Task
from ..trace import Trace
from .db import connect

_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=_OPTS, default=repr).decode()


@dataclass(slots=True)
class RolloutRecord:
    """Everything the store keeps about one finished rollout."""

    id: str
    run_id: str
    env_name: str
    model: str
    task: Task
    task_index: int
    sample_index: int
    status: str
    error_kind: str | None
    reward: float | None
    usage: Usage
    duration_s: float
    turns: int
    completion: str
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    scores: Scores
    calls: list[ModelCall]
    errors: list[RolloutError]
    created_at: float = field(default_factory=time.time)
    provider: str = ""
    trace: Trace | None = None


_ROLLOUT_COLS = (
    "pk, id, run_id, env_name, model, task_id, task_index, sample_index, status, error_kind, reward, "
    "prompt_tokens, completion_tokens, cost_usd, duration_s, turns, created_at, prompt, answer, info, "
    "completion, messages, state"
)
_ROLLOUT_SQL = f"INSERT INTO rollout ({_ROLLOUT_COLS}) VALUES ({', '.join('?' * 23)})"
_SCORE_SQL = "INSERT INTO score (rollout_pk, name, kind, value) VALUES (?, ?, ?, ?)"
_CALL_SQL = (
    "INSERT INTO model_call (rollout_pk, idx, n_messages, finish_reason, prompt_tokens, completion_tokens, "
    "latency_ms, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_ERROR_SQL = "INSERT INTO rollout_error (rollout_pk, run_id, kind, source, message) VALUES (?, ?, ?, ?, ?)"
_TRACE_SQL = (
    "INSERT INTO trace (rollout_pk, nodes, token_ids, logprobs, mask, n_tokens, mismatches) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_FTS_SQL = "INSERT INTO rollout_fts (rowid, text) VALUES (?, ?)"
_COST_SQL = (
    "INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
    "VALUES (?, 'api_tokens', ?, ?, ?, 'tokens', ?, ?)"
)


def _clean_state(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if not k.startswith("_") and k != "task"}


class _Flush:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = threading.Event()


class BatchWriter:
    """Commits submitted groups of rollouts from a single background thread."""

    def __init__(self, path: Path | str, *, max_batch: int = 2048, linger_s: float = 0.05,
                 on_commit: Any = None) -> None:
        self.path = Path(path)
        self.max_batch = max_batch
        self.linger_s = linger_s
        self.on_commit = on_commit
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.committed = 0
        self.batches = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="workbench-writer", daemon=True)
        self._conn = connect(self.path)
        self._thread.start()

    def submit(self, records: list[RolloutRecord]) -> None:
        """Queue a group of rollouts; they are committed together, in one transaction."""
        if self.error is not None:
            raise self.error
        self._q.put(records)

    def flush(self, timeout: float | None = None) -> None:
        f = _Flush()
        self._q.put(f)
        f.event.wait(timeout)
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
        self._conn.close()
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        stop = False
        while not stop:
            item = self._q.get()
            deadline = time.monotonic() + self.linger_s
            groups: list[list[RolloutRecord]] = []
            flushes: list[_Flush] = []
            n = 0
            while True:
                if item is None:
                    stop = True
                elif isinstance(item, _Flush):
                    flushes.append(item)
                else:
                    groups.append(item)
                    n += len(item)
                if stop or n >= self.max_batch or flushes:
                    break
                # Linger briefly so a busy run commits few large transactions instead of many small
                # ones (each costs a BEGIN, index work setup and a WAL frame): this bounds how much a
                # crash can lose to ``linger_s`` of finished rollouts.
                wait = deadline - time.monotonic() if n else 0.0
                try:
                    item = self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
                except queue.Empty:
                    break
            if groups and self.error is None:
                try:
                    self._write(groups)
                except BaseException as e:  # disk full, locked past timeout, ...
                    self.error = e
            for f in flushes:
                f.event.set()

    def _write(self, groups: list[list[RolloutRecord]]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            pk = conn.execute("SELECT COALESCE(MAX(pk), 0) FROM rollout").fetchone()[0]
            rollouts, scores, calls, errors, fts, traces = [], [], [], [], [], []
            cost: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
            now = time.time()
            task_json: dict[str, tuple[str, str, str]] = {}
            for group in groups:
                for r in group:
                    pk += 1
                    t = r.task
                    tj = task_json.get(t.id)
                    if tj is None:
                        tj = task_json[t.id] = (dumps(t.prompt), dumps(t.answer), dumps(t.info))
                    rollouts.append((
                        pk, r.id, r.run_id, r.env_name, r.model, t.id, r.task_index, r.sample_index, r.status,
                        r.error_kind, r.reward, r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cost_usd,
                        r.duration_s, r.turns, r.created_at, tj[0], tj[1], tj[2],
                        r.completion, dumps(r.messages), dumps(_clean_state(r.state)),
                    ))
                    for name, v in r.scores.rewards.items():
                        scores.append((pk, name, "reward", v))
                    for name, v in r.scores.metrics.items():
                        scores.append((pk, name, "metric", v))
                    for c in r.calls:
                        calls.append((pk, c.index, c.n_messages, c.finish_reason, c.prompt_tokens,
                                      c.completion_tokens, c.latency_s * 1000.0,
                                      dumps(c.extra) if c.extra else None))
                    for e in r.errors:
                        errors.append((pk, r.run_id, e.kind, e.source, e.message))
                    for name, msg in r.scores.errors:
                        errors.append((pk, r.run_id, "reward", name, msg))
                    if r.trace is not None and r.trace.has_tokens:
                        nodes, ids, lps, mask = r.trace.pack()
                        traces.append((pk, nodes, ids, lps, mask, len(mask), len(r.trace.mismatches)))
                    fts.append((pk, searchable_text(r.messages)))
                    if r.usage.total_tokens or r.usage.cost_usd:
                        acc = cost[(r.run_id, r.provider, r.model)]
                        acc[0] += r.usage.total_tokens
                        acc[1] += r.usage.cost_usd
            conn.executemany(_ROLLOUT_SQL, rollouts)
            if scores:
                conn.executemany(_SCORE_SQL, scores)
            if calls:
                conn.executemany(_CALL_SQL, calls)
            if errors:
                conn.executemany(_ERROR_SQL, errors)
            conn.executemany(_FTS_SQL, fts)
            if traces:
                conn.executemany(_TRACE_SQL, traces)
            if cost:
                conn.executemany(_COST_SQL, [(k[0], k[1], k[2], v[0], v[1], now) for k, v in cost.items()])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.committed += len(rollouts)
        self.batches += 1
        if self.on_commit is not None:
            self.on_commit(len(rollouts))
