"""``workbench eval`` as a function: the CLI and the TUI both call :func:`evaluate`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import math
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.analysis.report import run_summary
from workbench.authoring import discovery
from workbench.authoring.environment import Environment
from workbench.errors import ConfigError, EndpointError, OptionError, StoreError
from workbench.rollouts.client import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_STALL_S,
    ChatClient,
    check_base_url,
    preflight,
    training_params,
)
from workbench.rollouts.engine import FatalRunError, RolloutEngine, RunCounters
from workbench.runs.context_fit import check_first_prompts_fit
from workbench.runs.endpoint import Endpoint, StatusCallback, is_registered, resolve_endpoint
from workbench.store import Store, run_lookups
from workbench.store.costs import add_cost_event
from workbench.store.prices import match_price
from workbench.store.run_lock import run_lock


@dataclass(slots=True)
class EvalOptions:
    env: str
    env_args: dict[str, Any] = field(default_factory=dict)
    n: int | None = None
    rollouts_per_task: int = 1
    concurrency: int = 32
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = 600.0
    max_retries: int = 4
    harness: str | None = None
    runtime: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    pass_threshold: float = 1.0
    stall_timeout_s: float = DEFAULT_STALL_S  # a model response that sends nothing this long is a timeout
    max_response_mb: float = DEFAULT_MAX_RESPONSE_BYTES / (1 << 20)  # a larger response is a bad_response
    resume: str | None = None
    comparison_id: str | None = None  # set for each run of `eval -m A -m B` (workbench/runs/multi_eval.py)
    comparison_index: int | None = None  # this run's place among the comparison's models (the -m order)
    tokens: bool | None = None  # ask the upstream for token ids + logprobs (None: where it supports them)
    render_prompts: bool = False  # let the server re-render follow-up prompts instead of continuing exact tokens
    task_indices: list[int] | None = None  # only these tasks (by index in the task set), instead of the first -n
    system_prompt: str | None = None  # the harness's system prompt for this run (a candidate of `optimize`)
    pipeline: dict[str, Any] | None = None  # {"id", "kind", "stage"}: the run is one stage of optimize/distill
    kind: str = "eval"  # the run's kind (workbench.runs.kinds): validate's token check is kind validate
    endpoint: Endpoint | None = None  # resolved from model/base_url/api_key once (resolve()); a given one is used

    def resolve(self, on_status: StatusCallback | None = None) -> Endpoint:
        """The endpoint of the run, resolved on first use (``on_status`` hears about the embedded model's
        first build and start)."""
        if self.endpoint is None:
            self.endpoint = resolve_endpoint(self.model, self.base_url, self.api_key, on_status)
        return self.endpoint

    def validate(self) -> None:
        """Every option in its range, and an endpoint that can work, before anything starts."""
        def check(name: str, ok: bool, allowed: str) -> None:
            if not ok:
                raise OptionError(f"EvalOptions.{name}", getattr(self, name), allowed)

        def positive(x: float) -> bool:
            return math.isfinite(x) and x > 0

        check("n", self.n is None or self.n >= 1, "at least 1")
        check("rollouts_per_task", self.rollouts_per_task >= 1, "at least 1")
        check("concurrency", self.concurrency >= 1, "at least 1")
        check("timeout_s", positive(self.timeout_s), "a positive number of seconds")
        check("max_retries", self.max_retries >= 0, "0 or more")
        check("temperature", self.temperature is None or (math.isfinite(self.temperature)
                                                          and 0 <= self.temperature <= 5), "a number from 0 to 5")
        check("max_tokens", self.max_tokens is None or self.max_tokens >= 1, "at least 1")
        check("stall_timeout_s", positive(self.stall_timeout_s), "a positive number of seconds")
        check("max_response_mb", positive(self.max_response_mb), "a positive number")
        check("task_indices", self.task_indices is None or bool(self.task_indices) and min(self.task_indices) >= 0,
              "at least one task index, each 0 or more")
        check("pass_threshold", math.isfinite(self.pass_threshold), "a finite number")
        if self.base_url:
            self.base_url = check_base_url(self.base_url)


@dataclass(slots=True)
class EvalOutcome:
    run_id: str
    summary: dict[str, Any]
    counters: RunCounters
    wall_s: float
    interrupted: bool = False


def new_run_id() -> str:
    return time.strftime("%m%d") + "-" + secrets.token_hex(3)


def apply_hot_swaps(env: Environment, opts: EvalOptions) -> None:
    """Override the environment's harness, runtime or sampling from the command line."""
    if opts.harness:
        from workbench.authoring.hotswap import load_harness

        env.harness = load_harness(opts.harness)
    if opts.runtime:
        from workbench.authoring.hotswap import load_runtime

        env.runtime = load_runtime(opts.runtime, env.runtime)
    if opts.temperature is not None:
        env.sampling.temperature = opts.temperature
    if opts.max_tokens is not None:
        env.sampling.max_tokens = opts.max_tokens
    if opts.system_prompt is not None:
        if not hasattr(env.harness, "system_prompt"):
            raise ConfigError(f"the harness of {env.name!r} ({env.harness.describe()}) has no system prompt to set")
        env.harness.system_prompt = opts.system_prompt


def select_tasks(env: Environment, opts: EvalOptions) -> list[tuple[int, Any]]:
    """(index, task) of the run: ``opts.task_indices`` where given, else the first ``-n``."""
    if opts.task_indices is None:
        return list(enumerate(env.tasks.take(opts.n)))
    tasks = list(itertools.islice(env.tasks, max(opts.task_indices) + 1))  # no more than the run asks for
    bad = [i for i in opts.task_indices if i >= len(tasks)]
    if bad:
        raise ConfigError(f"task index {bad[0]} is out of range: {env.name!r} has {len(tasks)} tasks")
    return [(i, tasks[i]) for i in opts.task_indices]


async def evaluate(
    opts: EvalOptions,
    store: Store,
    *,
    on_start: Callable[[str, int], None] | None = None,
    counters_cb: Callable[[RunCounters], None] | None = None,
    on_status: StatusCallback | None = None,
) -> EvalOutcome:
    opts.validate()
    run = store.get_run(opts.resume) if opts.resume else None
    run_id = run["id"] if run is not None else new_run_id()
    with run_lock(store.path, run_id):  # a second --resume of the same run refuses up front
        return await _evaluate(opts, store, run_id, run, on_start, counters_cb, on_status)


async def _evaluate(opts: EvalOptions, store: Store, run_id: str, run: dict[str, Any] | None,
                    on_start: Callable[[str, int], None] | None, counters_cb: Callable[[RunCounters], None] | None,
                    on_status: StatusCallback | None) -> EvalOutcome:
    if run is not None:
        cfg = run["config"]
        opts.env, opts.env_args = cfg["env"], cfg.get("env_args", {})
        opts.n, opts.rollouts_per_task = cfg.get("n"), cfg["rollouts_per_task"]
        registered = not opts.model and not opts.base_url and is_registered(cfg.get("model_name"))
        if registered:
            # Made with a registered model: resolved again, so its endpoint, key, API and price are this run's.
            opts.model = cfg["model_name"]
        else:
            opts.model, opts.base_url = opts.model or cfg.get("model"), opts.base_url or cfg.get("base_url")
        opts.harness, opts.runtime = opts.harness or cfg.get("harness"), opts.runtime or cfg.get("runtime")
        if opts.temperature is None:
            opts.temperature = cfg.get("temperature")
        if opts.max_tokens is None:
            opts.max_tokens = cfg.get("max_tokens")
        if opts.task_indices is None:
            opts.task_indices = cfg.get("task_indices")
        if opts.system_prompt is None:
            opts.system_prompt = cfg.get("system_prompt")
    env = discovery.load(opts.env, opts.env_args)
    apply_hot_swaps(env, opts)
    groups = select_tasks(env, opts)
    tasks = [t for _, t in groups]
    if not tasks:
        raise OptionError("EvalOptions.env_args", opts.env_args, template="environment {env!r} has no tasks (with "
                          "{field} {given})", env=env.name, given=opts.env_args or {})
    # The writer process starts now, while the endpoint, the preflight and the sandboxes are set up:
    # its start-up (an interpreter and the store) then costs the run nothing.
    writer = store.writer()
    try:
        endpoint = opts.resolve(on_status)
        base_url, model = endpoint.base_url, endpoint.model
        store.register_env(env.name, env.version, env.source, env.description)
        prices = store.prices()
        price = endpoint.price or match_price(model, prices)

        if run is None:
            config: dict[str, Any] = {"env": opts.env, "env_args": opts.env_args, "n": opts.n,
                      "rollouts_per_task": opts.rollouts_per_task, "model": model, "base_url": base_url,
                      "harness": opts.harness, "runtime": opts.runtime, "temperature": opts.temperature,
                      "max_tokens": opts.max_tokens}
            if opts.comparison_id:
                config["comparison_id"] = opts.comparison_id
            if opts.comparison_index is not None:
                config["comparison_index"] = opts.comparison_index
            name = endpoint.name  # a registered name (or the spec the embedded server resolved)
            if name and name != model:
                config["model_name"] = name
            if opts.task_indices is not None:
                config["task_indices"] = opts.task_indices
            if opts.system_prompt is not None:
                config["system_prompt"] = opts.system_prompt
            if opts.pipeline:
                config["pipeline"] = opts.pipeline
            skip: set[tuple[int, int]] = set()
        else:
            if run["env_version"] != env.version:
                # The run goes on with the current files; the change is recorded, not hidden.
                store.update_run(run_id, error=f"resumed with env version {env.version} "
                                                f"(started with {run['env_version']})")
            skip = store.done_slots(run_id)

        # No timer per request: every call runs inside a rollout, which the engine cuts at its timeout.
        client = ChatClient(endpoint.api_key, provider=endpoint.provider, max_connections=opts.concurrency, request_timeout=None,
                            max_retries=opts.max_retries, stall_timeout=opts.stall_timeout_s,
                            max_response_bytes=int(opts.max_response_mb * (1 << 20)))
        await client.open()  # imports the HTTP stack (~0.2 s): start-up, like the interpreter's, not the run's time
        t0 = time.perf_counter()
        interrupted = False
        async with client:
            info = await preflight(client, base_url, model)
            await check_first_prompts_fit(client, base_url, model, env, tasks)  # said once, not per rollout
            extra_params = training_params(info) if opts.tokens is not False else {}
            # Sandboxes first: an engine that is not running fails here, before the run is recorded.
            sandboxes = await open_sandboxes(env, tasks, run_id, opts.concurrency, opts.rollouts_per_task)
            try:
                if run is None:
                    store.create_run(run_id, kind=opts.kind, env_name=env.name, env_version=env.version,
                                     env_source=env.source, env_args=opts.env_args, model=model, base_url=base_url,
                                     harness=env.harness.describe(),
                                     runtime=getattr(env.runtime, "spec", getattr(env.runtime, "kind", "")),
                                     n_tasks=len(tasks), rollouts_per_task=opts.rollouts_per_task,
                                     concurrency=opts.concurrency, sampling=asdict(env.sampling), config=config)
                else:
                    store.update_run(run_id, status="running", finished_at=None)
                if on_start:
                    on_start(run_id, len(tasks) * opts.rollouts_per_task - len(skip))
                engine = RolloutEngine(env=env, client=client, writer=writer, run_id=run_id, model=model,
                                       base_url=base_url, rollouts_per_task=opts.rollouts_per_task,
                                       concurrency=opts.concurrency, timeout_s=opts.timeout_s, price=price,
                                       provider=price.provider if price else "", extra_params=extra_params,
                                       sandboxes=sandboxes)
                if extra_params and not opts.render_prompts:
                    from workbench.rollouts.continuation import continuation_for

                    engine.continuation = await continuation_for(client, base_url, model, info)
                if getattr(env.harness, "needs_proxy", False):
                    from workbench.rollouts.proxy import InterceptionProxy

                    engine.proxy = await InterceptionProxy(client, base_url, model, {
                        **env.sampling.to_params(), **extra_params}).start()
                    await engine.proxy.bridge_into(engine.sandboxes)
            except BaseException:
                if sandboxes is not None:
                    await sandboxes.close()
                raise
            ticker = asyncio.create_task(_tick(engine, counters_cb)) if counters_cb else None
            # A run is completed only when every rollout ran and was committed; anything else that
            # ends it (a fatal error, Ctrl-C, the writer process dying) leaves it failed or interrupted.
            status, error = "failed", ""
            try:
                await engine.run_groups(groups, skip)
                status = "completed"
            except FatalRunError as e:
                error = e.error.message
            except (asyncio.CancelledError, KeyboardInterrupt):
                status, interrupted = "interrupted", True
            except BaseException as e:
                error = f"the run stopped: {type(e).__name__}: {e}"
                raise
            finally:
                if ticker:
                    ticker.cancel()
                try:
                    if engine.proxy is not None:
                        await engine.proxy.close()
                    if engine.sandboxes is not None:
                        await close_sandboxes(engine.sandboxes, store, run_id)
                finally:
                    try:
                        writer.close()
                    except BaseException as e:
                        if status == "completed":
                            status = "failed"
                        error = error or f"the store's writer stopped: {e}"
                        raise
                    finally:
                        status, error = _record_end(store, run_id, status, error, len(tasks) * opts.rollouts_per_task)
            wall = time.perf_counter() - t0
    except BaseException:
        with contextlib.suppress(Exception):
            writer.close()  # a no-op where the run's own clean-up closed it
        raise
    summary = run_summary(store, run_id, opts.pass_threshold)
    summary["rollouts_per_s"] = engine.counters.finished / wall if wall > 0 else 0.0
    summary["retries"] = client.retries
    summary["unpriced"] = price is None
    store.update_run(run_id, summary=summary)
    if status == "failed":
        raise EndpointError(f"{error}; run {run_id} stopped, {summary['rollouts']} rollouts kept")
    return EvalOutcome(run_id, summary, engine.counters, wall, interrupted)


def _record_end(store: Store, run_id: str, status: str, error: str, expected: int) -> tuple[str, str]:
    """Record how the run ended: ``completed`` only with every rollout stored. A store that cannot take
    even that (a full disk) leaves the run as it was, never completed; the error that stopped the run is
    the one reported."""
    import sqlite3

    try:
        stored = run_lookups.rollout_count(store.conn, run_id)
        if status == "completed" and stored < expected:
            status, error = "failed", f"only {stored} of {expected} rollouts were stored"
        store.update_run(run_id, status=status, error=error, finished_at=time.time())
    except sqlite3.Error as e:
        if status == "completed":
            raise StoreError(f"the run's end could not be recorded in {store.path} ({e}); its rollouts are kept, "
                             "`workbench eval --resume RUN` finishes it") from None
    return status, error


def _has_field(obj: object, name: str) -> bool:
    """Whether ``obj`` is a dataclass instance with a field ``name``."""
    return (dataclasses.is_dataclass(obj) and not isinstance(obj, type)
            and name in {f.name for f in dataclasses.fields(obj)})


def run_runtime(env: Environment) -> Any:
    """The environment's runtime as a run opens it: with the host paths its harness must see mounted
    (an agent program's interpreter and files, the commands of sandboxed MCP servers)."""
    runtime = env.runtime
    mounts = getattr(env.harness, "host_mounts", None)
    if mounts is not None and _has_field(runtime, "binds"):
        extra = mounts(runtime.kind)
        if extra:
            runtime = dataclasses.replace(runtime, binds=[*runtime.binds, *extra])
    return runtime


async def open_sandboxes(env: Environment, tasks: list[Any], run_id: str, concurrency: int,
                         rollouts_per_task: int) -> Any:
    """The run's sandbox pool, when a tool or reward of the environment (or a task) needs a sandbox."""

    from workbench.authoring.environment import needs_sandbox

    if not needs_sandbox(env) and not any(t.sandbox is not None for t in tasks):
        return None
    opener = getattr(run_runtime(env), "pool", None)
    if opener is None:
        raise ConfigError(f"environment {env.name!r}: runtime {env.runtime!r} cannot open sandboxes; use wb.Local() "
                          "or wb.Docker(...)")
    size = max(1, min(concurrency, len(tasks) * rollouts_per_task))
    pool = await opener(run_id=run_id, size=size, env_dir=env.folder).start()
    try:
        prepare = getattr(pool, "prepare", None)  # a pool of a runtime's own making may have none
        if prepare is not None:
            await prepare(tasks)
    except BaseException:
        await pool.close()
        raise
    return pool


async def close_sandboxes(pool: Any, store: Store, run_id: str) -> None:
    """Remove the run's sandboxes and record the sandbox-seconds it used as a cost event."""
    try:
        await asyncio.shield(pool.close())
    finally:
        seconds = pool.stats.sandbox_seconds
        if seconds > 0:
            add_cost_event(store.conn, run_id, "sandbox_seconds", provider=pool.kind, model="", quantity=seconds,
                           unit="seconds", usd=0.0)


async def _tick(engine: RolloutEngine, cb: Callable[[RunCounters], None]) -> None:
    while True:
        engine.counters.oldest_in_flight_s = engine.oldest_in_flight_s()
        cb(engine.counters)
        await asyncio.sleep(0.1)
