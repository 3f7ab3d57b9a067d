"""Run one rollout turn by turn: the rollout debugger behind ``workbench debug`` and the app's Debugger.

The rollout runs through the same :class:`~workbench.rollouts.engine.RolloutEngine`, harness, sandbox pool,
interception proxy, token continuation, rubric and store writer as ``workbench eval``; the only
addition is a pause (:attr:`Rollout.pause`) awaited before every model call. ``next_turn`` lets one
model call through and returns once the harness is about to make the next one (tool results,
sandbox output and the environment's reply are in by then) or the rollout has ended. At the end the
engine scores it with the environment's rubric and stores it as the one rollout of a ``debug`` run,
so it shows up in Traces like any other rollout.

Everything here runs on one event loop (the CLI's, or a loop thread of the app); nothing imports Textual.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.environment import Environment
from workbench.errors import TASK_OUT_OF_RANGE, EndpointError, OptionError
from workbench.records.rollout import Rollout
from workbench.records.task import Message, Task
from workbench.records.trace import Trace
from workbench.rollouts.client import ChatClient, preflight, training_params
from workbench.rollouts.engine import FatalRunError, RolloutEngine
from workbench.runs.context_fit import check_first_prompts_fit
from workbench.runs.debug_report import DebugResult, Turn, score_lines
from workbench.runs.evaluate import (
    EvalOptions,
    apply_hot_swaps,
    close_sandboxes,
    new_run_id,
    open_sandboxes,
)
from workbench.store import BatchWriter, Store
from workbench.store.prices import Price, match_price
from workbench.store.run_lookups import has_rollouts

#: The engine's per-rollout limit. A debugger waits on its user between turns, and that time is not
#: the rollout's: only the model requests themselves time out (the client's request timeout).
_NO_ROLLOUT_LIMIT_S = 30 * 24 * 3600.0


class DebugSession:
    """One rollout of ``opts.env`` on task ``task_index``, advanced a model call at a time.

    ``await start()`` prepares everything and stops before the first model call (the prompt is then in
    :attr:`messages`); ``await next_turn()`` and ``await run_to_end()`` advance it; ``await close()``
    always ends it (an unfinished rollout is dropped and its run marked interrupted). ``on_change`` is
    called (on the session's loop) whenever the state moved: a turn ended, the rollout was stored.
    """

    def __init__(self, opts: EvalOptions, task_index: int, store: Store, *,
                 on_change: Callable[[DebugSession], None] | None = None) -> None:
        opts.validate()
        if task_index < 0:
            raise OptionError("DebugSession.task", task_index, "0 or more")
        self.opts, self.task_index, self.store, self.on_change = opts, task_index, store, on_change
        self.env: Environment | None = None
        self.task: Task | None = None
        self.run_id = ""
        self.base_url = ""
        self.model = ""
        self.price: Price | None = None
        self.turns: list[Turn] = []
        self.result: DebugResult | None = None
        self.status = "new"  # new | starting | paused | running | done | failed | closed
        self.error = ""  # why the run failed (endpoint), when it did
        self.rollout: Rollout | None = None
        self._client: ChatClient | None = None
        self._engine: RolloutEngine | None = None
        self._writer: BatchWriter | None = None
        self._sandboxes: Any = None
        self._drive_task: asyncio.Task[None] | None = None
        self._cond = asyncio.Condition()
        self._allowed = 0  # model calls the user has let through
        self._passed = 0  # model calls that went through
        self._waiting = False  # the harness is held before a model call
        self._ended = False  # the engine is done with the rollout (stored or failed)
        self._finished = False
        self._shut = False
        self._run_recorded = False  # the run row exists: its status must be written at the end

    # -- what the views read ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.status in ("done", "failed", "closed")

    @property
    def rollout_id(self) -> str:
        return f"{self.run_id}.{self.task_index}.0" if self.run_id else ""

    @property
    def messages(self) -> list[Message]:
        """The conversation so far (for an external program: the conversations its calls so far held)."""
        r = self.rollout
        if r is None:
            return []
        if r.conversations is not None and len(r.conversations):
            return r.conversations.messages()
        if r.messages:
            return list(r.messages)
        if r.last_request is not None and r.calls:
            return [*r.last_request, *(m for m in [r.calls[-1].message] if m is not None)]
        return []

    @property
    def trace(self) -> Trace | None:
        return self.rollout.trace if self.rollout is not None else None

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The tool schemas the harness sends (the chat template renders them into the prompt)."""
        return getattr(self.env.harness, "schemas", None) if self.env is not None else None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the env, reach the endpoint, record the run, and hold the rollout before its first call."""
        if self.status != "new":
            return
        self.status = "starting"
        opts = self.opts
        try:
            env = discovery.load(opts.env, opts.env_args)
            apply_hot_swaps(env, opts)
            n = len(env.tasks)
            if self.task_index >= n:
                raise OptionError("DebugSession.task", self.task_index, f"from 0 to {n - 1}", TASK_OUT_OF_RANGE,
                                  env=env.name, n=n, last=n - 1)
            task = env.tasks[self.task_index]
            assert isinstance(task, Task)
            self.env, self.task = env, task
            endpoint = opts.resolve()
            self.base_url, self.model = endpoint.base_url, endpoint.model
            await self._open(env, task)
        except BaseException as e:
            self.status, self.error = "failed", str(e) or type(e).__name__
            await self._shutdown("failed")
            raise
        self._drive_task = asyncio.create_task(self._drive(task))
        await self._wait_for_pause()

    async def _open(self, env: Environment, task: Task) -> None:
        """What ``evaluate`` sets up for a run, for one rollout: client, preflight, sandboxes, run row."""
        opts, store = self.opts, self.store
        store.register_env(env.name, env.version, env.source, env.description)
        endpoint = opts.resolve()
        self.price = endpoint.price or match_price(self.model, store.prices())
        self._client = ChatClient(endpoint.api_key, provider=endpoint.provider, max_connections=4,
                                  request_timeout=opts.timeout_s + 5.0, max_retries=opts.max_retries)
        await self._client.open()
        info = await preflight(self._client, self.base_url, self.model)
        await check_first_prompts_fit(self._client, self.base_url, self.model, env, [task])
        extra_params = training_params(info) if opts.tokens is not False else {}
        self.run_id = new_run_id()
        # Sandboxes first: an engine that is not running fails here, before the run is recorded.
        self._sandboxes = sandboxes = await open_sandboxes(env, [task], self.run_id, 1, 1)
        config = {"env": opts.env, "env_args": opts.env_args, "task_index": self.task_index, "model": self.model,
                  "base_url": self.base_url, "harness": opts.harness, "runtime": opts.runtime,
                  "temperature": opts.temperature, "max_tokens": opts.max_tokens}
        store.create_run(self.run_id, kind="debug", env_name=env.name, env_version=env.version, env_source=env.source,
                         env_args=opts.env_args, model=self.model, base_url=self.base_url,
                         harness=env.harness.describe(),
                         runtime=getattr(env.runtime, "spec", getattr(env.runtime, "kind", "")),
                         n_tasks=1, rollouts_per_task=1, concurrency=1, sampling=asdict(env.sampling), config=config)
        self._run_recorded = True
        self._writer = store.writer()
        engine = RolloutEngine(env=env, client=self._client, writer=self._writer, run_id=self.run_id,
                               model=self.model, base_url=self.base_url, concurrency=1,
                               timeout_s=_NO_ROLLOUT_LIMIT_S, price=self.price,
                               provider=self.price.provider if self.price else "", extra_params=extra_params,
                               sandboxes=sandboxes, prepare=self._prepare)
        self._engine = engine
        if extra_params and info.continues_tokens and not opts.render_prompts:
            from workbench.rollouts.continuation import TokenContinuation

            engine.continuation = TokenContinuation(self._client, self.base_url, self.model)
        if getattr(env.harness, "needs_proxy", False):
            from workbench.rollouts.proxy import InterceptionProxy

            engine.proxy = await InterceptionProxy(self._client, self.base_url, self.model, {
                **env.sampling.to_params(), **extra_params}).start()
            await engine.proxy.bridge_into(engine.sandboxes)

    def _prepare(self, rollout: Rollout) -> None:
        self.rollout = rollout
        rollout.pause = self._pause

    async def _pause(self, rollout: Rollout) -> None:
        t0 = time.perf_counter()
        async with self._cond:
            self._waiting = True
            self._cond.notify_all()
            await self._cond.wait_for(lambda: self._allowed > self._passed)
            self._passed += 1
            self._waiting = False
        rollout.started += time.perf_counter() - t0  # the user's pause is not the rollout's duration

    async def _drive(self, task: Task) -> None:
        assert self._engine is not None
        try:
            await self._engine.run_groups([(self.task_index, task)])
        except FatalRunError as e:
            self.error = e.error.message
        finally:
            async with self._cond:
                self._ended = True
                self._cond.notify_all()

    async def _wait_for_pause(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self._ended or (self._waiting and self._passed == self._allowed))
        if self._ended:
            await self._finish()
        else:
            self.status = "paused"
            self._changed()

    # -- stepping --------------------------------------------------------------------------------
    async def next_turn(self) -> Turn | None:
        """Let one model call through; return that turn once the harness is about to call again or the
        rollout has ended (then it is scored and stored). None when there is nothing left to run."""
        await self.start()
        if self.done:
            return None
        before = len(self.messages)
        index = self._passed
        t0 = time.perf_counter()
        self.status = "running"
        self._changed()
        async with self._cond:
            self._allowed += 1
            self._cond.notify_all()
        await self._wait_for_pause()
        t1 = time.perf_counter()
        rollout = self.rollout
        # The last turn ends where the harness ended; scoring and storing are the result's time.
        ended = rollout.started + rollout.duration_s if rollout is not None and rollout.duration_s else t1
        wall = max(0.0, min(t1, ended) - t0)
        if self.result is not None:
            self.result.scoring_s = max(0.0, t1 - ended)
        call = rollout.calls[index] if rollout is not None and index < len(rollout.calls) else None
        cost = self.price.cost(call.prompt_tokens, call.completion_tokens) if call and self.price else None
        turn = Turn(index, call, self.messages[before:], wall, cost)
        self.turns.append(turn)
        self._changed()
        return turn

    async def run_to_end(self, max_turns: int | None = None) -> DebugResult | None:
        """Step until the rollout ends (or ``max_turns`` more turns ran); the stored result, if it ended."""
        await self.start()
        ran = 0
        while not self.done and (max_turns is None or ran < max_turns):
            await self.next_turn()
            ran += 1
        return self.result

    async def _finish(self) -> None:
        """The engine is done: wait for the store to have the rollout, then read it back."""
        if self._finished:
            return
        self._finished = True
        await self._shutdown("failed" if self.error else "completed")
        try:
            from workbench.store.queries import get_rollout

            r = get_rollout(self.store.conn, self.rollout_id)
        except Exception as e:  # the engine records every failure; a missing row is a bug worth saying
            self.status, self.error = "failed", self.error or f"the rollout was not stored ({e})"
            self._changed()
            return
        assert self.env is not None
        self.result = DebugResult(r["id"], r["status"], r["reward"], score_lines(self.env, r["rewards"], r["metrics"]),
                                  r["errors"], r["duration_s"] or 0.0, r["cost_usd"] or 0.0, 0.0)
        self.status = "failed" if self.error else "done"
        self._changed()

    async def close(self) -> None:
        """End the session: an unfinished rollout is cancelled (nothing stored, run interrupted)."""
        if self.status == "closed":
            return
        task = self._drive_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self._shutdown("interrupted")
        elif not self._finished:
            await self._shutdown("interrupted")
        self.status = "closed" if self.result is None else self.status

    async def _shutdown(self, status: str) -> None:
        """Close proxy, sandboxes, writer and client (each once); record the run's status and summary."""
        if self._shut:
            return
        self._shut = True
        engine, writer, client, sandboxes = self._engine, self._writer, self._client, self._sandboxes
        try:
            if engine is not None and engine.proxy is not None:
                await engine.proxy.close()
            if sandboxes is not None:
                await close_sandboxes(sandboxes, self.store, self.run_id)
        finally:
            try:
                if writer is not None:
                    await asyncio.to_thread(writer.close)
            finally:
                if client is not None:
                    await client.close()
                if self._run_recorded:
                    self._record_run(status)

    def _record_run(self, status: str) -> None:
        from workbench.analysis.report import run_summary

        store = self.store
        if status == "interrupted" and not has_rollouts(store.conn, self.run_id):
            store.delete_run(self.run_id)  # stopped before its rollout finished: nothing to keep or show
            return
        store.update_run(self.run_id, status=status, error=self.error, finished_at=time.time())
        summary = run_summary(store, self.run_id)
        summary["unpriced"] = self.price is None
        store.update_run(self.run_id, summary=summary)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)


async def debug_rollout(opts: EvalOptions, task_index: int, store: Store, *, max_turns: int | None = None,
                        on_turn: Callable[[DebugSession, Turn], None] | None = None) -> DebugSession:
    """``workbench debug``: run the rollout turn by turn (at most ``max_turns``), calling ``on_turn``
    after each; the session is closed on return (an unfinished rollout is not stored)."""
    session = DebugSession(opts, task_index, store)
    try:
        await session.start()
        ran = 0
        while not session.done and (max_turns is None or ran < max_turns):
            turn = await session.next_turn()
            ran += 1
            if turn is not None and on_turn is not None:
                on_turn(session, turn)
    finally:
        await session.close()
    if session.error and session.result is None:
        raise EndpointError(f"{session.error}; debug run {session.run_id} stopped")
    return session
