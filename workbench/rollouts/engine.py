"""The rollout engine: run an environment's tasks through its harness, score them, store them.

Bounded concurrency with a fixed pool of worker coroutines (no task per rollout), per-rollout
timeouts, groups of ``r`` rollouts per task scored together (group rewards), every failure recorded
on its rollout, whole groups committed at once (so ``--resume`` never duplicates).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from workbench.authoring.environment import Environment, needs_sandbox
from workbench.authoring.rubric import USER_CODE_ERRORS, Scores
from workbench.authoring.sandbox import SandboxError, SandboxPool
from workbench.config.redact import redact
from workbench.records.model_reply import FATAL, ModelError
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.records.task import Task
from workbench.rollouts.client import ChatClient
from workbench.store import BatchWriter, RolloutRecord
from workbench.store.prices import Price


class FatalRunError(Exception):
    """The endpoint cannot serve this run at all (bad key, unknown model): stop every rollout."""

    def __init__(self, error: ModelError) -> None:
        super().__init__(error.message)
        self.error = error


@dataclass(slots=True)
class RunCounters:
    finished: int = 0
    failed: int = 0  # rollouts that failed outright (no reward)
    errors: int = 0  # rollouts with an error of any kind (failed, or a reward, tool or sandbox error)
    oldest_in_flight_s: float = 0.0  # how long the oldest rollout still running has run (set by the ticker)
    reward_sum: float = 0.0
    reward_sq: float = 0.0  # the sum of squared rewards, for the standard error of the mean
    scored: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


class _Deadlines:
    """Per-rollout timeouts for the engine's workers: one watchdog task that cancels a worker whose
    rollout is past its deadline (within ``tick`` of it), instead of a timer armed and disarmed per
    rollout. A worker tells its own cancellation from an outside one as ``asyncio.timeout`` does."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.tick = max(0.005, min(0.1, timeout_s / 10))
        self.active: dict[asyncio.Task[Any], float] = {}
        self.expired: set[asyncio.Task[Any]] = set()

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            now = time.perf_counter()  # the clock of ``Rollout.started``
            for task, deadline in list(self.active.items()):
                if now >= deadline and task not in self.expired:
                    self.expired.add(task)
                    task.cancel()


@dataclass(slots=True)
class _Group:
    task: Task
    task_index: int
    size: int
    rollouts: list[Rollout | None]
    scores: list[Scores | None]
    remaining: int
    contexts: list[dict[str, Any] | None]


@dataclass(slots=True)
class RolloutEngine:
    env: Environment
    client: ChatClient
    writer: BatchWriter
    run_id: str
    model: str
    base_url: str
    rollouts_per_task: int = 1
    concurrency: int = 32
    timeout_s: float = 600.0
    price: Price | None = None
    provider: str = ""
    sandbox_factory: Callable[[Rollout], Any] | None = None  # overrides ``sandboxes``; the sandbox's close() releases it
    sandboxes: SandboxPool | None = None  # the run's sandbox pool (opened by evaluate when the env needs one)
    extra_params: dict[str, Any] = field(default_factory=dict)  # training fields (token ids, logprobs)
    proxy: Any = None  # an InterceptionProxy, for harnesses that call the model through their own client
    continuation: Any = None  # a TokenContinuation, where the upstream serves exact-token follow-up calls
    gate: Callable[[int], Awaitable[None]] | None = None  # awaited with a group's index before each of its rollouts
    prepare: Callable[[Rollout], None] | None = None  # sees each rollout before its harness runs (the debugger)
    sampling_seed: int | None = None  # each rollout samples with a seed of its own, derived from this one
    counters: RunCounters = field(default_factory=RunCounters)
    fatal: FatalRunError | None = None
    _needs_sandbox: bool = False
    _hold_sandboxes: bool = False
    _deadlines: _Deadlines | None = None
    _group_scored: bool = False  # whether the rubric has group rewards
    _toolsets: Any = None  # the run's MCP toolsets (RunToolsets) when the harness has any

    def oldest_in_flight_s(self) -> float:
        """How long the oldest rollout still running has been running (0 when none is)."""
        d = self._deadlines
        if d is None or not d.active:
            return 0.0
        return max(0.0, time.perf_counter() - (min(d.active.values()) - d.timeout_s))

    async def run(self, tasks: list[Task], skip: set[tuple[int, int]] | None = None) -> RunCounters:
        """Every task once (as a group of ``rollouts_per_task``), except the slots in ``skip``."""
        return await self.run_groups(enumerate(tasks), skip)

    async def run_groups(self, groups: Iterable[tuple[int, Task]],
                         skip: set[tuple[int, int]] | None = None) -> RunCounters:
        """Groups of (group index, task), pulled lazily: an endless stream keeps the workers busy
        until the caller cancels (training), each group waiting on :attr:`gate` when one is set."""
        skip = skip or set()
        self._needs_sandbox = needs_sandbox(self.env)
        group_rewards = self.env.rubric.group_rewards
        self._group_scored = bool(group_rewards)
        self._hold_sandboxes = any("sandboxes" in f.args for f in group_rewards)
        jobs = self._jobs(groups, skip)
        params = {**self.env.sampling.to_params(), **self.extra_params}
        if getattr(self.env.harness, "toolsets", None):
            from workbench.rollouts.mcp_sessions import RunToolsets

            self._toolsets = await RunToolsets.for_env(self.env, self.sandboxes, self.concurrency)
        self._deadlines = _Deadlines(self.timeout_s)
        watchdog = asyncio.create_task(self._deadlines.watch())
        workers = [asyncio.create_task(self._worker(jobs, params)) for _ in range(max(1, self.concurrency))]
        try:
            await asyncio.gather(*workers)
        except BaseException:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        finally:
            watchdog.cancel()
            if self._toolsets is not None:
                await self._toolsets.close()
                self._toolsets = None
        if self.fatal is not None:
            raise self.fatal
        return self.counters

    def _jobs(self, groups: Iterable[tuple[int, Task]], skip: set[tuple[int, int]]) -> Iterator[tuple[_Group, int]]:
        r = self.rollouts_per_task
        for i, task in groups:
            if skip and all((i, s) in skip for s in range(r)):
                continue
            # Groups are committed whole, so a group is either all there or not at all.
            g = _Group(task, i, r, [None] * r, [None] * r, r, [None] * r)
            for s in range(r):
                yield g, s

    async def _worker(self, jobs: Iterator[tuple[_Group, int]], params: dict[str, Any]) -> None:
        for group, sample in jobs:
            if self.fatal is not None:
                return
            if self.gate is not None:
                await self.gate(group.task_index)
            rollout, scores, ctx = await self._one(group, sample, params)
            group.rollouts[sample] = rollout
            group.contexts[sample] = ctx
            group.scores[sample] = scores
            group.remaining -= 1
            if group.remaining == 0:
                await self._finish_group(group)

    async def _one(self, group: _Group, sample: int, params: dict[str, Any]
                   ) -> tuple[Rollout, Scores | None, dict[str, Any] | None]:
        rid = f"{self.run_id}.{group.task_index}.{sample}"
        base_url = self.proxy.url_for(rid) if self.proxy is not None else self.base_url
        if self.sampling_seed is not None:
            params = {**params, "seed": rollout_seed(self.sampling_seed, group.task_index, sample)}
        rollout = Rollout(id=rid, task=group.task, sample_index=sample, client=self.client, base_url=base_url,
                          model=self.model, params=params, upstream_url=self.base_url,
                          continuation=self.continuation)
        if self.prepare is not None:
            self.prepare(rollout)
        harness = self.env.harness
        unregister = self.proxy.register(rollout) if self.proxy is not None else None
        held = False
        deadlines = self._deadlines
        assert deadlines is not None
        me = asyncio.current_task()
        assert me is not None
        cancelling = me.cancelling()
        try:
            deadlines.active[me] = rollout.started + self.timeout_s
            try:
                # The rollout's sandbox is live from before the harness until after scoring.
                ready = None
                if self.sandbox_factory is not None:
                    rollout.sandbox = await self.sandbox_factory(rollout)
                elif self._toolsets is not None and self._toolsets.prepares(group.task):
                    rollout.sandbox, ready = await self._toolsets.prepared.take()
                elif self.sandboxes is not None and (self._needs_sandbox or group.task.sandbox is not None):
                    rollout.sandbox = await self.sandboxes.acquire(rid, group.task)
                if self._toolsets is not None:
                    rollout.mcp = await self._toolsets.for_rollout(rollout, ready)
                await harness.run(rollout)
                if me in deadlines.expired:  # the harness swallowed its cancellation: still out of time
                    me.uncancel()
                    raise TimeoutError
            except asyncio.CancelledError:
                if me not in deadlines.expired or me.uncancel() > cancelling:
                    raise  # cancelled from outside (Ctrl-C, the run stopping): not this rollout's timeout
                rollout.failure = RolloutError("timeout", harness.describe(), f"rollout exceeded its {self.timeout_s:g}s timeout")
            except TimeoutError:
                rollout.failure = RolloutError("timeout", harness.describe(), f"rollout exceeded its {self.timeout_s:g}s timeout")
            except ModelError as e:
                rollout.failure = RolloutError(f"model.{e.kind}", self.base_url, e.message)
                if e.kind in FATAL and self.fatal is None:
                    self.fatal = FatalRunError(e)
            except RolloutFailed as e:
                rollout.failure = RolloutError(e.kind, e.source, e.message)
            except SandboxError as e:
                rollout.failure = RolloutError("sandbox", getattr(self.env.runtime, "spec", "runtime"), str(e))
            except USER_CODE_ERRORS as e:  # a bug in harness code (even sys.exit): recorded, the run goes on
                from workbench.authoring.rubric import _error_text

                rollout.failure = RolloutError("harness", harness.describe(), _error_text(e))
            finally:
                del deadlines.active[me]
                deadlines.expired.discard(me)
                if unregister is not None:
                    unregister()
            rollout.duration_s = time.perf_counter() - rollout.started
            if self.price is not None:
                rollout.usage.cost_usd = self.price.cost_of_calls(
                    rollout.usage.prompt_tokens, rollout.usage.completion_tokens, rollout.calls)
            if rollout.failure is not None:
                rollout.errors.append(rollout.failure)
                return rollout, None, None
            ctx = rollout.score_context()
            scores = await self.env.rubric.score_rollout(ctx)
            if rollout.mcp is not None:  # the rollout's own servers stop once it is scored
                ctx["mcp"] = None
                await _stop_servers(rollout)
            if rollout.trace.has_tokens:
                # Turn N's prompt tokens must extend turn N-1's prompt + completion tokens.
                scores.metrics["token_mismatch"] = float(len(rollout.trace.mismatches))
            # Group rewards that ask for ``sandboxes`` need them live until the group is scored.
            held = self._hold_sandboxes and rollout.sandbox is not None
            return rollout, scores, ctx
        finally:
            if rollout.mcp is not None:
                await _stop_servers(rollout)
            if not held:
                await _release(rollout)

    async def _finish_group(self, group: _Group) -> None:
        ok = [i for i, s in enumerate(group.scores) if s is not None]
        try:
            if ok and self._group_scored:
                ctxs = [group.contexts[i] for i in ok]
                await self.env.rubric.score_group(ctxs, [group.scores[i] for i in ok])  # type: ignore[arg-type, misc]
        finally:
            if self._hold_sandboxes:
                for r in group.rollouts:
                    if r is not None:
                        await _release(r)
        records: list[RolloutRecord] = []
        c = self.counters
        for rollout, scores in zip(group.rollouts, group.scores, strict=True):
            assert rollout is not None
            failed = rollout.failure is not None
            sc = scores or Scores()
            if rollout.errors or sc.errors:  # text from outside (a tool, a reward, a server) may hold a key
                rollout.errors = [RolloutError(e.kind, e.source, redact(e.message)) for e in rollout.errors]
                sc.errors = [(name, redact(msg)) for name, msg in sc.errors]
            records.append(RolloutRecord(
                id=rollout.id, run_id=self.run_id, env_name=self.env.name, model=rollout.model, task=group.task,
                task_index=group.task_index, sample_index=rollout.sample_index,
                status="error" if failed else "ok",
                error_kind=rollout.failure.kind if rollout.failure is not None else None,
                reward=None if failed else sc.total, usage=rollout.usage, duration_s=rollout.duration_s,
                turns=rollout.turns, completion=rollout.completion, messages=rollout.messages, state=rollout.state,
                scores=sc, calls=rollout.calls, errors=rollout.errors, provider=self.provider, trace=rollout.trace,
                source=rollout.source,
            ))
            c.finished += 1
            c.tokens += rollout.usage.total_tokens
            c.cost_usd += rollout.usage.cost_usd
            if failed or rollout.errors or sc.errors:
                c.errors += 1
            if failed:
                c.failed += 1
            else:
                c.scored += 1
                c.reward_sum += sc.total
                c.reward_sq += sc.total * sc.total
        self.writer.submit(records)


def rollout_seed(seed: int, group_index: int, sample: int) -> int:
    """The sampling seed of sample ``sample`` of group ``group_index`` under the run's ``seed``: what the
    rollout samples depends on the seed and its place in the run, not on when the server got to it."""
    return ((seed * 1_000_003 + group_index) * 1_009 + sample) % (1 << 31)


async def _stop_servers(rollout: Rollout) -> None:
    sessions, rollout.mcp = rollout.mcp, None
    await asyncio.shield(sessions.close())


async def _release(rollout: Rollout) -> None:
    """Give the rollout's sandbox back (after scoring, or at once on error, timeout or cancellation)."""
    sb, rollout.sandbox = rollout.sandbox, None
    close = getattr(sb, "close", None)
    if close is None:
        return
    try:
        await close()
    except Exception as e:  # never hides the rollout's own outcome; the pool cleans up at the end anyway
        rollout.errors.append(RolloutError("sandbox", type(sb).__name__, f"releasing the sandbox failed: {e}"))
