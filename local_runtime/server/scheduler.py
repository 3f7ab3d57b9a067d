"""The scheduler: collects waiting sequences and runs them as one padded batch in a worker thread.

Static batching: a batch runs to its end while new requests queue; the next batch takes every
waiting sequence for the oldest request's model (base or one adapter), up to ``max_batch``. The
queue holds at most ``max_queue`` sequences; past that, :class:`QueueFull` (HTTP 429).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from workbench_local.server.generation import Sequence
from workbench_local.server.runner import Engine

T = TypeVar("T")


class QueueFull(Exception):
    pass


@dataclass(slots=True)
class Stats:
    batches: int = 0
    sequences: int = 0
    max_batch_seen: int = 0
    last_batch: int = 0
    rejected: int = 0
    batch_sizes: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class Job:
    seqs: list[Sequence]
    done: asyncio.Future[None]
    queued_at: float


class Scheduler:
    def __init__(self, engine: Engine, *, max_batch: int = 32, max_queue: int = 256, batch_wait_s: float = 0.004,
                 threads: int | None = None) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.batch_wait_s = batch_wait_s
        self.threads = threads
        self.stats = Stats()
        self._pending: deque[Job] = deque()
        self._queued = 0
        self._running = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self.last_activity = time.monotonic()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="workbench-gen",
                                            initializer=self._init_thread)

    def _init_thread(self) -> None:
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def running(self) -> int:
        return self._running

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._loop(), name="workbench-scheduler")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the generation thread, between batches (adapter loading, for one)."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def submit(self, seqs: list[Sequence]) -> asyncio.Future[None]:
        """Queue a request's sequences; the future resolves when all of them have finished."""
        if self._queued + len(seqs) > self.max_queue:
            self.stats.rejected += 1
            raise QueueFull(f"the server is at capacity ({self._queued} sequences queued, {self._running} running); "
                            "retry later or start it with a larger --max-queue")
        self.last_activity = time.monotonic()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(Job(seqs, fut, time.perf_counter()))
        self._queued += len(seqs)
        assert self._wake is not None
        self._wake.set()
        return fut

    def _take(self) -> list[Job]:
        """The next batch: FIFO jobs for the oldest job's model, up to max_batch sequences."""
        first = self._pending[0]
        model = first.seqs[0].model
        batch: list[Job] = []
        size = 0
        skipped: deque[Job] = deque()
        while self._pending:
            job = self._pending.popleft()
            if job.seqs[0].model != model or (batch and size + len(job.seqs) > self.max_batch):
                skipped.append(job)
                continue
            batch.append(job)
            size += len(job.seqs)
        self._pending.extendleft(reversed(skipped))
        return batch

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self.batch_wait_s and len(self._pending) < self.max_batch:
                await asyncio.sleep(self.batch_wait_s)  # let near-simultaneous requests join the batch
            jobs = self._take()
            self._queued = max(0, self._queued - sum(len(j.seqs) for j in jobs))
            jobs = [j for j in jobs if not j.done.done()]  # a client that went away no longer waits
            seqs = [s for j in jobs for s in j.seqs]
            n = len(seqs)
            if not seqs:
                continue
            self._running = n
            st = self.stats
            st.batches += 1
            st.sequences += n
            st.last_batch = n
            st.max_batch_seen = max(st.max_batch_seen, n)
            st.batch_sizes[n] = st.batch_sizes.get(n, 0) + 1
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self.engine.run_batch, seqs)
            finally:
                self._running = 0
                self.last_activity = time.monotonic()
            for j in jobs:
                if not j.done.done():
                    j.done.set_result(None)
