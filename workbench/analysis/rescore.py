"""Re-scoring: run an environment's current rubric over its stored rollouts, without the model.

Edit a reward, re-score, and see the reward distribution before and after. Each stored rollout is
rebuilt as a :class:`~workbench.records.rollout.Rollout` (task, messages, state, usage; model calls and the
token trace when a function asks for ``trace``) and scored by the same ``Rubric.score_rollout`` /
``Rubric.score_group`` calls the engine makes at eval time, over the same groups (the successful
rollouts of one task in one run). A function that raises is counted against that function and the
rollout, as in a run; nothing stops.

Imported rollouts (``workbench import``, ``source = 'imported'``) are scored like the others; one the
file gave no reward has no "before" (it counts as changed, and its delta is its new reward). One
imported with ``--env`` whose first user turn matched none of the environment's tasks has no task to
be scored against: it is skipped, and counted with that reason.

What cannot be re-scored from messages alone is skipped and counted with its reason: rollouts that
failed before scoring (they never had a reward), and every rollout of an environment whose reward
asks for ``sandbox`` or ``mcp`` — the rollout's sandbox and MCP servers are gone after the run, and replaying the episode to
rebuild it would be a new eval (run ``workbench eval`` instead). Metrics that ask for a sandbox, and
``token_mismatch`` (a fact of the trace, not a rubric function), keep their stored values.

By default nothing is written. ``apply=True`` stores the new scores as a re-score record (tables
``rescore`` / ``rescore_rollout``, schema v5) tied to the environment version; the original
rewards and scores are never touched.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from array import array
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.analysis.reward_stats import Distribution, Histogram, shared_histogram
from workbench.authoring.environment import Environment
from workbench.authoring.harness import MultiTurn
from workbench.authoring.rubric import Rubric, Scores
from workbench.errors import ConfigError, NotFoundError, OptionError
from workbench.records.rollout import Rollout, Usage
from workbench.records.task import Task
from workbench.store import Store, dumps
from workbench.store.rescores import (
    ROW_ID,
    ROW_PK,
    ROW_REWARD,
    ROW_RUN,
    ROW_SOURCE,
    ROW_STATUS,
    RescoreRecord,
    Row,
    count_stored,
    env_runs,
    group_chunks,
    loads,
    stored_scores,
    stored_traces,
)
from workbench.store.run_kinds import USER_KINDS

EnvFactory = Callable[[dict[str, Any]], Environment]
ProgressFn = Callable[[int, int], None]

#: Arguments only a live rollout has, and what they are called in a skip reason.
_LIVE_ARGS = {"sandbox": "sandbox", "sandboxes": "sandbox", "mcp": "MCP session"}
_TRACE_ARGS = frozenset({"trace", "traces"})
_ENGINE_METRICS = ("token_mismatch",)  # added by the engine from the trace, not by the rubric
_TOP = 10
_FAILED = "failed before scoring (no reward to re-compute)"
_UNMATCHED = ("imported conversation that matches no task of the environment (its first user turn is none of its "
              "task prompts: no task to score it against)")


@dataclass(slots=True)
class RolloutRescore:
    """One rollout's weighted total and per-function values, as stored and as re-scored."""

    pk: int
    id: str
    run_id: str
    before: float | None  # None: an imported rollout the file gave no reward
    after: float
    before_values: dict[str, float]
    after_values: dict[str, float]
    errors: list[tuple[str, str]]  # (function, message)

    @property
    def delta(self) -> float:
        return self.after - (self.before or 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "before": self.before, "after": self.after,
                "before_values": self.before_values, "after_values": self.after_values,
                "errors": [list(e) for e in self.errors]}


@dataclass(slots=True)
class FunctionChange:
    """One reward or metric value name (``fn`` or ``fn.key``) across the re-scored rollouts."""

    name: str
    kind: str  # reward | group | metric (a function no longer in the rubric: as stored, reward | metric)
    before: Distribution
    after: Distribution
    changed: int  # rollouts whose value differs, appeared or disappeared
    errors: int  # rollouts where the function raised

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "before": self.before.as_dict(), "after": self.after.as_dict(),
                "changed": self.changed, "errors": self.errors}


@dataclass(slots=True)
class RescoreResult:
    env: str
    env_version: str
    run_id: str | None  # None: every run of the environment
    runs: list[str] = field(default_factory=list)
    considered: int = 0  # stored rollouts read
    rescored: int = 0
    changed: int = 0  # re-scored rollouts whose weighted total changed
    failed: int = 0  # re-scored rollouts where at least one function raised
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> rollouts
    kept: list[str] = field(default_factory=list)  # values carried over from the stored scores
    before: Distribution = field(default_factory=lambda: Distribution(0))
    after: Distribution = field(default_factory=lambda: Distribution(0))
    histogram: Histogram = field(default_factory=lambda: shared_histogram([], []))
    functions: list[FunctionChange] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # function -> rollouts where it raised
    error_examples: dict[str, str] = field(default_factory=dict)  # function -> its first error message
    top_changes: list[RolloutRescore] = field(default_factory=list)  # largest |after - before| first
    rollouts: list[RolloutRescore] = field(default_factory=list)  # every one, with keep_rollouts=True
    record_id: int | None = None  # the re-score record, with apply=True
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Everything but the per-rollout list, JSON-ready (``workbench rescore --json``)."""
        return {"env": self.env, "env_version": self.env_version, "run_id": self.run_id, "runs": self.runs,
                "considered": self.considered, "rescored": self.rescored, "changed": self.changed,
                "failed": self.failed, "skipped": self.skipped, "kept": self.kept, "before": self.before.as_dict(),
                "after": self.after.as_dict(), "histogram": self.histogram.as_dict(),
                "functions": [f.as_dict() for f in self.functions], "errors": self.errors,
                "error_examples": self.error_examples, "top_changes": [r.as_dict() for r in self.top_changes],
                "record_id": self.record_id, "applied": self.record_id is not None, "wall_s": self.wall_s}


# -- which rubric re-scores what --------------------------------------------------------------------
@dataclass(slots=True)
class RubricScorer:
    """The rubric to run for one set of environment arguments, or why its rollouts are skipped."""

    rubric: Rubric
    kept: list[str]  # metric names whose stored values are carried over
    skip: str | None  # the reason every rollout is skipped, when it cannot be re-scored
    multi_turn: bool
    needs_trace: bool
    concurrent: bool  # some function is async (a judge, an HTTP call): score rollouts concurrently

    @classmethod
    def of(cls, env: Environment) -> RubricScorer:
        bound = [f for f in env.rubric.functions if _LIVE_ARGS.keys() & set(f.args)]
        blocking = next((f for f in bound if f.kind != "metric"), None)
        skip = None
        if blocking is not None:
            kind = "group reward" if blocking.kind == "group" else "reward"
            live = _LIVE_ARGS[min(_LIVE_ARGS.keys() & set(blocking.args))]
            skip = (f"{kind} {blocking.name!r} needs the rollout's live {live}, which is gone after the run "
                    f"(re-run `workbench eval {env.name}` to score it)")
        rubric = env.rubric
        if bound:
            rubric = Rubric()
            rubric.functions = [f for f in env.rubric.functions if f not in bound]
        needs_trace = any(f.takes_kwargs or _TRACE_ARGS & set(f.args) for f in rubric.functions)
        return cls(rubric, [f.name for f in bound if f.kind == "metric"], skip, isinstance(env.harness, MultiTurn),
                   needs_trace, any(f.is_async for f in rubric.functions))


class _Scorers:
    """One scorer per distinct set of ``load_environment`` arguments the runs were made with."""

    def __init__(self, env: Environment, factory: EnvFactory | None) -> None:
        self.env, self.factory = env, factory
        self._by_args: dict[bytes, RubricScorer | str] = {}
        self.default = RubricScorer.of(env)
        self.kinds = {f.name: f.kind for f in env.rubric.functions}

    def get(self, env_args: dict[str, Any]) -> RubricScorer | str:
        """The scorer for these arguments, or why the environment would not load with them."""
        if self.factory is None:
            return self.default
        key = orjson.dumps(env_args, option=orjson.OPT_SORT_KEYS, default=repr)
        if key not in self._by_args:
            try:
                env = self.factory(env_args)
            except Exception as e:  # a run made with arguments this version no longer accepts
                self._by_args[key] = f"the environment does not load with the run's arguments {key.decode()}: {e}"
            else:
                scorer = self._by_args[key] = RubricScorer.of(env)
                self.kinds.update((f.name, f.kind) for f in env.rubric.functions)
                return scorer
        return self._by_args[key]


# -- rebuilding and scoring -----------------------------------------------------------------------
def _rollout(row: Row, multi_turn: bool) -> Rollout:
    """A stored rollout rebuilt as the object rewards see at eval time (no client: it never calls the model)."""
    (_pk, rid, _run, model, task_id, _ti, sample, _st, prompt, answer, info, messages, state, pt, ct, cost, turns,
     duration, _reward, _source) = row
    task = Task(prompt=loads(prompt, ""), answer=loads(answer, None), info=loads(info, {}), id=task_id)
    r = Rollout(id=rid, task=task, sample_index=sample, client=None, base_url="", model=model,  # type: ignore[arg-type]
                params={}, messages=loads(messages, []), state=loads(state, {}), usage=Usage(pt, ct, cost),
                turns=turns, duration_s=duration)
    if multi_turn:  # MultiTurn puts the task in the state; the store leaves it out
        r.state.setdefault("task", task)
    return r


async def _score_group(scorer: RubricScorer, rollouts: list[Rollout], sem: asyncio.Semaphore) -> list[Scores]:
    """What the engine does for one finished group: each rollout, then the group rewards over them."""
    ctxs = [r.score_context() for r in rollouts]

    async def one(ctx: dict[str, Any]) -> Scores:
        async with sem:
            return await scorer.rubric.score_rollout(ctx)

    if scorer.concurrent:
        scores = list(await asyncio.gather(*(one(c) for c in ctxs)))
    else:  # plain functions never wait: a task per rollout would only add overhead
        scores = [await scorer.rubric.score_rollout(c) for c in ctxs]
    if scorer.rubric.group_rewards:
        async with sem:
            await scorer.rubric.score_group(ctxs, scores)
    return scores


def _differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is not b
    return abs(a - b) > 1e-9 * max(1.0, abs(a), abs(b))


class _Tally:
    """Running totals of a re-score; per-rollout detail only for the top changes (or all, if asked)."""

    def __init__(self, keep_rollouts: bool) -> None:
        self.before, self.after = array("d"), array("d")
        self.fn_before: dict[str, array[float]] = defaultdict(lambda: array("d"))
        self.fn_after: dict[str, array[float]] = defaultdict(lambda: array("d"))
        self.fn_changed: Counter[str] = Counter()
        self.stored_kinds: dict[str, str] = {}
        self.errors: Counter[str] = Counter()
        self.examples: dict[str, str] = {}
        self.changed = self.failed = 0
        self.top: list[tuple[float, int, RolloutRescore]] = []
        self.rollouts: list[RolloutRescore] | None = [] if keep_rollouts else None

    def add(self, r: RolloutRescore) -> None:
        if r.before is not None:
            self.before.append(r.before)
        self.after.append(r.after)
        if _differs(r.before, r.after):
            self.changed += 1
        for name in r.before_values.keys() | r.after_values.keys():
            old, new = r.before_values.get(name), r.after_values.get(name)
            if old is not None:
                self.fn_before[name].append(old)
            if new is not None:
                self.fn_after[name].append(new)
            if _differs(old, new):
                self.fn_changed[name] += 1
        if r.errors:
            self.failed += 1
            for fn in {fn for fn, _ in r.errors}:  # a function that raised twice counts once per rollout
                self.errors[fn] += 1
            for fn, msg in r.errors:
                self.examples.setdefault(fn, msg)
        item = (abs(r.delta), -len(self.after), r)
        if len(self.top) < _TOP:
            heapq.heappush(self.top, item)
        elif item[:2] > self.top[0][:2]:
            heapq.heapreplace(self.top, item)
        if self.rollouts is not None:
            self.rollouts.append(r)

    def finish(self, res: RescoreResult, kinds: dict[str, str]) -> None:
        res.rescored, res.changed, res.failed = len(self.after), self.changed, self.failed
        res.before, res.after = Distribution.of(self.before), Distribution.of(self.after)
        res.histogram = shared_histogram(self.before, self.after)
        res.errors, res.error_examples = dict(self.errors.most_common()), self.examples
        res.top_changes = [r for _, _, r in sorted(self.top, key=lambda t: t[:2], reverse=True) if r.delta]
        res.rollouts = self.rollouts or []
        order = {n: i for i, n in enumerate(kinds)}
        names = sorted(self.fn_before.keys() | self.fn_after.keys() | self.errors.keys(),
                       key=lambda n: (order.get(n.split(".")[0], len(order)), n))
        res.functions = [FunctionChange(
            n, kinds.get(n.split(".")[0]) or self.stored_kinds.get(n, "reward"),
            Distribution.of(self.fn_before.get(n, ())), Distribution.of(self.fn_after.get(n, ())),
            self.fn_changed[n], self.errors.get(n.split(".")[0], 0)) for n in names]


# -- the entry point --------------------------------------------------------------------------------
def _runs(store: Store, env: Environment, run_id: str | None,
          kinds: tuple[str, ...] | None) -> list[tuple[str, dict[str, Any]]]:
    if run_id is None:
        return env_runs(store.conn, env.name, kinds)
    run = store.get_run(run_id)  # NotFoundError names `workbench runs`
    if run["env_name"] != env.name:
        raise ConfigError(f"run {run['id']} is a run of {run['env_name']!r}, not {env.name!r}; "
                          f"re-score it with `workbench rescore {run['env_name']} --run {run['id']}`")
    return [(run["id"], run["env_args"])]


async def rescore(store: Store, env: Environment, *, env_for_args: EnvFactory | None = None,
                  run_id: str | None = None, limit: int | None = None, apply: bool = False,
                  progress: ProgressFn | None = None, concurrency: int = 32, chunk_size: int = 2048,
                  keep_rollouts: bool = False, kinds: tuple[str, ...] | None = USER_KINDS) -> RescoreResult:
    """Re-score the stored rollouts of ``env`` (of one run, or all its runs) with ``env``'s rubric.

    With ``env_for_args``, each run is scored by the environment built with the arguments that run
    was made with (``-a`` of its eval), so a rubric that depends on them scores as it did then.
    ``limit`` stops after that many rollouts (finishing the group in progress, so group rewards see
    whole groups). ``progress(done, total)`` is called after each chunk. ``apply`` stores the new
    scores as a re-score record (the originals stay as they are). Without ``run_id``, the runs of ``kinds``
    (None: every kind; by default the user's own, not a probe's).
    """
    if limit is not None and limit < 1:
        raise OptionError("rescore.limit", limit, "at least 1")
    if chunk_size < 1 or concurrency < 1:
        raise ValueError("chunk_size and concurrency must be at least 1")
    t0 = time.perf_counter()
    runs = _runs(store, env, run_id, kinds)
    res = RescoreResult(env.name, env.version, runs[0][0] if run_id is not None else None, [r for r, _ in runs])
    total = count_stored(store.conn, env.name, res.run_id, kinds)
    if total == 0:
        what = f"run {res.run_id}" if res.run_id else f"environment {env.name!r}"
        raise NotFoundError(f"{what} has no stored rollouts in {store.path}; `workbench eval` stores some")
    total = min(total, limit) if limit is not None else total
    scorers = _Scorers(env, env_for_args)
    tally = _Tally(keep_rollouts)
    skipped: Counter[str] = Counter()
    kept: set[str] = set()
    sem = asyncio.Semaphore(concurrency)
    record = RescoreRecord(store.conn, env.name, env.version, res.run_id) if apply else None
    conn = store.conn
    status = "failed"
    try:
        for rid, env_args in runs:
            scorer = scorers.get(env_args)
            for groups in group_chunks(conn, rid, env.name, chunk_size):
                if limit is not None:
                    take = 0
                    for n, g in enumerate(groups):
                        take += len(g)
                        if res.considered + take >= limit:
                            groups = groups[:n + 1]
                            break
                rows = [r for g in groups for r in g]
                res.considered += len(rows)
                if isinstance(scorer, str):
                    skipped[f"run {rid}: {scorer}"] += len(rows)
                elif scorer.skip is not None:
                    skipped[scorer.skip] += len(rows)
                else:
                    kept.update(scorer.kept)
                    written = await _score_chunk(conn, scorer, groups, tally, skipped, sem)
                    if record is not None:
                        record.write(written)
                if progress is not None:
                    progress(res.considered, total)
                await asyncio.sleep(0)  # plain functions never yield: let a cancellation land between chunks
                if limit is not None and res.considered >= limit:
                    break
            if limit is not None and res.considered >= limit:
                break
        status = "completed"
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    finally:
        res.skipped = dict(skipped.most_common())
        res.kept = sorted(kept)
        tally.finish(res, scorers.kinds)
        res.wall_s = time.perf_counter() - t0
        if record is not None:
            res.record_id = record.id
            record.finish(status, res.rescored, res.changed, res.as_dict())
    return res


async def _score_chunk(conn: Any, scorer: RubricScorer, groups: list[list[Row]], tally: _Tally,
                       skipped: Counter[str], sem: asyncio.Semaphore) -> list[tuple[int, float, str, str | None]]:
    """Score one chunk of groups; add each rollout to ``tally``; return the rows a re-score record holds."""
    pks = [r[ROW_PK] for g in groups for r in g]
    stored, stored_kinds = stored_scores(conn, pks)
    tally.stored_kinds.update(stored_kinds)
    traces, calls = stored_traces(conn, pks) if scorer.needs_trace else ({}, {})
    jobs: list[tuple[list[Row], list[Rollout]]] = []
    for g in groups:
        ok_rows, rollouts = [], []
        for row in g:
            if row[ROW_STATUS] != "ok" or (row[ROW_REWARD] is None and row[ROW_SOURCE] != "imported"):
                skipped[_FAILED] += 1
                continue
            try:
                r = _rollout(row, scorer.multi_turn)
            except (ValueError, TypeError) as e:  # a row this version cannot read back
                skipped[f"stored rollout unreadable ({type(e).__name__}: {e})"] += 1
                continue
            if row[ROW_SOURCE] == "imported" and isinstance(r.state, dict) \
                    and (r.state.get("import") or {}).get("matched_task") is False:
                skipped[_UNMATCHED] += 1
                continue
            if row[ROW_PK] in traces:
                r.trace, r.calls = traces[row[ROW_PK]], calls.get(row[ROW_PK], [])
            ok_rows.append(row)
            rollouts.append(r)
        if rollouts:
            jobs.append((ok_rows, rollouts))
    if scorer.concurrent:
        results = await asyncio.gather(*(_score_group(scorer, rs, sem) for _, rs in jobs))
    else:
        results = [await _score_group(scorer, rs, sem) for _, rs in jobs]
    carried = (*_ENGINE_METRICS, *scorer.kept)
    written = []
    for (rows, _), scores in zip(jobs, results, strict=True):
        for row, sc in zip(rows, scores, strict=True):
            old = stored.get(row[ROW_PK], {})
            for name, value in old.items():  # what the rubric does not compute stays as stored
                if name.split(".")[0] in carried:
                    sc.metrics[name] = value
            new_values = {**sc.rewards, **sc.metrics}
            tally.add(RolloutRescore(row[ROW_PK], row[ROW_ID], row[ROW_RUN], row[ROW_REWARD], sc.total, old,
                                     new_values, sc.errors))
            written.append((row[ROW_PK], sc.total, dumps({"rewards": sc.rewards, "metrics": sc.metrics}),
                            dumps(sc.errors) if sc.errors else None))
    return written
