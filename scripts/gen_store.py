"""Generate a realistic Workbench store of N synthetic rollouts (for benchmarks and tests).

    python scripts/gen_store.py PATH [-n N] [--seed S] [--via direct|writer] [--workers W]

Three environments (arithmetic, wordle, doc_search), up to 40 runs over four models, rewards with a
spread, ~3% failed rollouts of six kinds, ~0.5% reward-function errors, 1-6 messages per rollout
drawn from a Zipf vocabulary (so full-text search has common and rare words; the needles
"xylophone", "quokka" and "zeppelin" each sit in about 1 rollout in 30,000), 2-3 scores and 1-3 model
calls per rollout, ``created_at`` increasing with pk. Environments and runs are written through
``Store`` (register_env, create_run, update_run with a summary for finished runs; the last run is
left "running" without one). Rollouts go in either with the exact SQL of
``workbench.store.writer`` in large executemany transactions while worker processes generate the
rows (``--via direct``, the default and fastest), or through ``BatchWriter`` itself
(``--via writer``). The content depends only on N and the seed, not on the path or worker count.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.authoring.rubric import Scores  # noqa: E402
from workbench.records.rollout import ModelCall, RolloutError, Usage, searchable_text  # noqa: E402
from workbench.records.task import Task  # noqa: E402
from workbench.store import Store  # noqa: E402
from workbench.store.writer import (  # noqa: E402
    _CALL_SQL,
    _COST_SQL,
    _ERROR_SQL,
    _FTS_SQL,
    _ROLLOUT_SQL,
    _SCORE_SQL,
    RolloutRecord,
    dumps,
)

ENVS = ("arithmetic", "wordle", "doc_search")
MODELS = {  # name -> (provider, $/Mtok in, $/Mtok out, skill)
    "gpt-4o-mini": ("openai", 0.15, 0.60, 0.75),
    "claude-3-5-haiku": ("anthropic", 0.80, 4.00, 0.8),
    "local/qwen2.5-0.5b-instruct": ("local", 0.0, 0.0, 0.35),
    "workbench-tiny": ("local", 0.0, 0.0, 0.15),
}
ERROR_KINDS = ["timeout"] * 6 + ["model.rate_limit"] * 4 + ["model.server_error"] * 3 + \
    ["model.context_length"] * 2 + ["harness"] * 3 + ["tool"] * 2
ERROR_RATE = 0.03
REWARD_ERROR_RATE = 0.005
NEEDLES = ("xylophone", "quokka", "zeppelin")
NEEDLE_RATE = 1e-5  # per sentence
COMMON = ("the", "answer", "is", "of", "and", "to", "search", "result", "document", "value", "number", "we",
          "check", "first", "then", "because", "so", "this", "that", "with", "for", "a", "in", "it")
WEIGHTS = {"arithmetic": {"correct": 1.0, "format": 0.2}, "wordle": {"solved": 1.0, "partial": 0.5},
           "doc_search": {"answer_f1": 1.0, "cited": 0.3}}
METRICS = frozenset({"words", "guesses", "tool_calls"})
CHUNK = 5000  # rollouts per unit of work (and per transaction, roughly)


@dataclass(frozen=True, slots=True)
class RunPlan:
    id: str
    env: str
    model: str
    size: int  # rollouts
    n_tasks: int
    r: int
    created_at: float
    first_pk: int
    status: str = "completed"


@dataclass(slots=True)
class Synth:
    """One synthetic rollout, in the shape both insert paths need."""

    pk: int
    id: str
    run: RunPlan
    task_id: str
    prompt: Any
    answer: Any
    info: dict[str, Any]
    task_index: int
    sample_index: int
    status: str
    error_kind: str | None
    reward: float | None
    ptoks: int
    ctoks: int
    cost: float
    duration_s: float
    turns: int
    completion: str
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    rewards: dict[str, float]
    metrics: dict[str, float]
    calls: list[tuple[int, int, str | None, int, int, float, dict[str, Any] | None]]
    errors: list[tuple[str, str, str]]  # (kind, source, message), reward errors included
    created_at: float


class Generator:
    def __init__(self, seed: int) -> None:
        rng = random.Random(f"vocab:{seed}")
        cons, vows = "bcdfghjklmnprstvwz", "aeiou"
        words, seen = list(COMMON), set(COMMON) | set(NEEDLES)
        while len(words) < 6000:
            w = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(2, 4)))
            if w not in seen:
                seen.add(w)
                words.append(w)
        cum = list(_accumulate(1.0 / (i + 1) ** 1.05 for i in range(len(words))))
        self.sentences = [" ".join(rng.choices(words, cum_weights=cum, k=rng.randint(5, 14))).capitalize() + "."
                          for _ in range(12000)]
        self.sixes = [w for w in words if len(w) == 6][:400]
        self.seed = seed
        self.rng = rng
        self.rand = rng.random

    def pick(self, seq: Any) -> Any:
        return seq[int(self.rand() * len(seq))]

    def sentence(self) -> str:
        s = self.sentences[int(self.rand() * 12000)]
        if self.rand() < NEEDLE_RATE:
            s += f" A {self.pick(NEEDLES)} appears."
        return s

    def chunk(self, run: RunPlan, start: int, stop: int) -> list[Synth]:
        """Rollouts ``start..stop-1`` (by position in the run) of ``run``; seeded by (seed, run, start)."""
        self.rng.seed(f"{self.seed}:{run.id}:{start}")
        self.rand = self.rng.random
        return [self.rollout(run, k) for k in range(start, stop)]

    def rollout(self, run: RunPlan, k: int) -> Synth:
        rand = self.rand
        ti, si = divmod(k, run.r)
        skill = MODELS[run.model][3]
        make = self._arith if run.env == "arithmetic" else self._wordle if run.env == "wordle" else self._docs
        task_id, prompt, answer, info, msgs, rewards, metrics, calls, state = make(ti, skill)
        errors: list[tuple[str, str, str]] = []
        kind: str | None = None
        if rand() < ERROR_RATE:
            kind = self.pick(ERROR_KINDS)
            msgs = msgs[: 1 + int(rand() * 2)]
            calls = calls[: max(0, len(msgs) - 1)]
            rewards, metrics = {}, {}
            errors.append((kind, "synthetic", f"{kind} after {1 + int(rand() * 600)}s: {self.sentence()}"))
        elif rand() < REWARD_ERROR_RATE:
            name = next(iter(rewards))
            del rewards[name]
            errors.append(("reward", name, "ZeroDivisionError: division by zero"))
        w = WEIGHTS[run.env]
        reward = None if kind else round(sum(w[n] * v for n, v in rewards.items()), 6)
        ptoks = sum(c[3] for c in calls)
        ctoks = sum(c[4] for c in calls)
        _, pin, pout, _ = MODELS[run.model]
        completion = ""
        for m in reversed(msgs):
            if m["role"] == "assistant":
                completion = m["content"] or ""
                break
        duration = round(math.exp((0.3 if run.env == "arithmetic" else 1.5) + 0.8 * self.rng.gauss(0.0, 1.0)), 4)
        return Synth(run.first_pk + k, f"{run.id}.{ti}.{si}", run, task_id, prompt, answer, info, ti, si,
                     "error" if kind else "ok", kind, reward, ptoks, ctoks, (ptoks * pin + ctoks * pout) / 1e6,
                     duration, len(calls), completion, msgs, state, rewards, metrics, calls, errors,
                     run.created_at + 0.02 * k + 0.015 * rand())

    def _call(self, i: int, n_msgs: int, finish: str, text: str) -> tuple[Any, ...]:
        rand = self.rand
        extra = {"policy_version": int(rand() * 40)} if rand() < 0.1 else None
        return (i, n_msgs, finish, 40 + 9 * n_msgs + int(rand() * 60), len(text) // 4 + 3,
                0.05 + 2.5 * rand(), extra)

    def _arith(self, ti: int, skill: float) -> tuple[Any, ...]:
        rand = self.rand
        a, b = 2 + int(rand() * 998), 2 + int(rand() * 998)
        op = "+-*"[ti % 3]
        ans = a + b if op == "+" else a - b if op == "-" else a * b
        prompt = f"What is {a} {op} {b}?"
        ok = rand() < skill
        said = ans if ok else ans + self.pick((-10, -1, 1, 2, 100))
        fmt = rand() < 0.8
        text = f"{self.sentence()} The answer is {said}." if fmt else f"{said} {self.sentence()}"
        msgs = [{"role": "system", "content": "You are a careful calculator. Answer with a number."},
                {"role": "user", "content": prompt}, {"role": "assistant", "content": text}]
        if rand() < 0.3:
            msgs = msgs[1:]
        return (f"arith-{ti}", prompt, str(ans), {"op": op}, msgs, {"correct": float(ok), "format": float(fmt)},
                {"words": float(len(text.split()))}, [self._call(0, len(msgs) - 1, "stop", text)], {"attempts": 1})

    def _wordle(self, ti: int, skill: float) -> tuple[Any, ...]:
        rand = self.rand
        target = self.sixes[ti % len(self.sixes)]
        prompt = "Guess the secret six-letter word. Reply with GUESS: word."
        msgs: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        calls, solved, greens = [], 0.0, 0
        turns = 1 + int(rand() * 3)
        for turn in range(turns):
            guess = target if rand() < skill * 0.5 else self.pick(self.sixes)
            text = f"GUESS: {guess}. {self.sentence()}"
            calls.append(self._call(turn, len(msgs), "stop", text))
            msgs.append({"role": "assistant", "content": text})
            greens = sum(x == y for x, y in zip(guess, target, strict=True))
            if guess == target:
                solved = 1.0
                break
            if turn == turns - 1:
                break
            fb = "".join("G" if x == y else "Y" if x in target else "B" for x, y in zip(guess, target, strict=True))
            msgs.append({"role": "user", "content": f"Feedback for {guess}: {fb}. Try again."})
        return (f"wordle-{ti}", prompt, target, {"length": 6}, msgs, {"solved": solved, "partial": greens / 6.0},
                {"guesses": float(len(calls))}, calls, {"guesses": len(calls), "solved": bool(solved)})

    def _docs(self, ti: int, skill: float) -> tuple[Any, ...]:
        rand = self.rand
        q = self.sentence().rstrip(".") + "?"
        doc = 1 + int(rand() * 99999)
        prompt = [{"role": "user", "content": f"Question: {q}"}]
        call = {"id": f"c{ti}", "type": "function",
                "function": {"name": "search", "arguments": dumps({"query": " ".join(q.split()[:4]).lower()})}}
        found = " ".join(self.sentence() for _ in range(2 + int(rand() * 3)))
        cited = rand() < skill
        text = f"{self.sentence()} Source: doc-{doc if cited else doc + 1}."
        msgs: list[dict[str, Any]] = [
            {"role": "system", "content": "Answer using the search tool. Cite the document id."},
            {"role": "user", "content": f"Question: {q}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{ti}", "name": "search", "content": f"[doc-{doc}] {found}"},
            {"role": "assistant", "content": text}]
        if rand() < 0.2:
            msgs = msgs[1:]
        f1 = min(1.0, self.rng.betavariate(1 + 4 * skill, 2))
        calls = [self._call(0, len(msgs) - 3, "tool_calls", "search"), self._call(1, len(msgs) - 1, "stop", text)]
        return (f"docs-{ti}", prompt, f"doc-{doc}", {"doc": doc}, msgs, {"answer_f1": round(f1, 4),
                "cited": float(cited)}, {"tool_calls": 1.0}, calls, {"searches": 1})


def _accumulate(xs: Iterator[float]) -> Iterator[float]:
    acc = 0.0
    for x in xs:
        acc += x
        yield acc


def plan_runs(n: int, seed: int) -> list[RunPlan]:
    """Split ``n`` rollouts into runs of uneven sizes over envs, models and group sizes (1, 4 or 8)."""
    rng = random.Random(f"plan:{seed}")
    n_runs = max(1, min(40, n // 200))
    shares = [rng.lognormvariate(0, 0.8) for _ in range(n_runs)]
    total = sum(shares)
    runs: list[RunPlan] = []
    left, t, pk = n, 1_760_000_000.0 + seed * 100_000.0, 1
    models = list(MODELS)
    for i, s in enumerate(shares):
        size = left if i == n_runs - 1 else max(1, min(left - (n_runs - i - 1), round(n * s / total)))
        left -= size
        r = rng.choice((1, 4, 8)) if size >= 8 else 1
        env = ENVS[i % len(ENVS)] if i < 6 else rng.choice(ENVS)
        model = models[i % len(models)] if i < 8 else rng.choice(models)
        status = "running" if i == n_runs - 1 and n_runs > 2 else "interrupted" if i == n_runs // 2 and n_runs > 2 \
            else "completed"
        run_id = time.strftime("%m%d", time.gmtime(t)) + f"-{rng.getrandbits(24):06x}"
        runs.append(RunPlan(run_id, env, model, size, math.ceil(size / r), r, t, pk, status))
        pk += size
        t += 60 + size * 0.02
    return runs


def work_units(runs: list[RunPlan]) -> list[tuple[int, int, int]]:
    return [(i, a, min(a + CHUNK, run.size)) for i, run in enumerate(runs) for a in range(0, run.size, CHUNK)]


def rows(batch: list[Synth], now: float) -> tuple[list[tuple[Any, ...]], ...]:
    """The six insert lists of ``writer.BatchWriter._write`` for ``batch`` (same columns, same order)."""
    rollouts, scores, calls, errors, fts = [], [], [], [], []
    cost: dict[tuple[str, str, str], list[float]] = {}
    for s in batch:
        pk = s.pk
        rollouts.append((pk, s.id, s.run.id, s.run.env, s.run.model, s.task_id, s.task_index, s.sample_index,
                         s.status, s.error_kind, s.reward, s.ptoks, s.ctoks, s.cost, s.duration_s, s.turns,
                         s.created_at, dumps(s.prompt), dumps(s.answer), dumps(s.info), s.completion,
                         dumps(s.messages), dumps(s.state), "model"))
        scores.extend((pk, k, "reward", v) for k, v in s.rewards.items())
        scores.extend((pk, k, "metric", v) for k, v in s.metrics.items())
        calls.extend((pk, i, n, fin, p, c, lat * 1000.0, dumps(x) if x else None) for i, n, fin, p, c, lat, x in s.calls)
        errors.extend((pk, s.run.id, k, src, msg) for k, src, msg in s.errors)
        fts.append((pk, searchable_text(s.messages)))
        if s.ptoks or s.ctoks or s.cost:
            acc = cost.setdefault((s.run.id, MODELS[s.run.model][0], s.run.model), [0.0, 0.0])
            acc[0] += s.ptoks + s.ctoks
            acc[1] += s.cost
    costs = [(k[0], k[1], k[2], v[0], v[1], now) for k, v in cost.items()]
    return rollouts, scores, calls, errors, fts, costs


def record(s: Synth) -> RolloutRecord:
    """The same rollout as the engine would hand to ``BatchWriter``."""
    sc = Scores(rewards=s.rewards, metrics=s.metrics,
                errors=[(src, msg) for k, src, msg in s.errors if k == "reward"], total=s.reward or 0.0)
    return RolloutRecord(
        id=s.id, run_id=s.run.id, env_name=s.run.env, model=s.run.model,
        task=Task(prompt=s.prompt, answer=s.answer, info=s.info, id=s.task_id), task_index=s.task_index,
        sample_index=s.sample_index, status=s.status, error_kind=s.error_kind, reward=s.reward,
        usage=Usage(s.ptoks, s.ctoks, s.cost), duration_s=s.duration_s, turns=s.turns, completion=s.completion,
        messages=s.messages, state=s.state, scores=sc,
        calls=[ModelCall(i, n, None, fin, p, c, lat, None, x) for i, n, fin, p, c, lat, x in s.calls],
        errors=[RolloutError(k, src, msg) for k, src, msg in s.errors if k != "reward"],
        created_at=s.created_at, provider=MODELS[s.run.model][0])


class RunStats:
    """Per-run aggregates for the run summary, accumulated from generated rollouts."""

    def __init__(self) -> None:
        self.n = self.errors = self.n_scored = self.ptoks = self.ctoks = 0
        self.reward_sum = self.cost = self.dur = 0.0
        self.kinds: dict[str, int] = {}
        self.scores: dict[str, list[float]] = {}

    def add(self, s: Synth) -> None:
        self.n += 1
        self.ptoks += s.ptoks
        self.ctoks += s.ctoks
        self.cost += s.cost
        self.dur += s.duration_s
        for kind, _, _ in s.errors:
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if s.status == "error":
            self.errors += 1
        else:
            self.n_scored += 1
            self.reward_sum += s.reward or 0.0
        for name, v in (s.rewards | s.metrics).items():
            acc = self.scores.setdefault(name, [0.0, 0.0])
            acc[0] += v
            acc[1] += 1

    def merge(self, o: RunStats) -> None:
        for k in ("n", "errors", "n_scored", "ptoks", "ctoks", "reward_sum", "cost", "dur"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        for k, c in o.kinds.items():
            self.kinds[k] = self.kinds.get(k, 0) + c
        for k, (v, c) in o.scores.items():
            acc = self.scores.setdefault(k, [0.0, 0.0])
            acc[0] += v
            acc[1] += c

    def summary(self, run: RunPlan) -> dict[str, Any]:
        means = {k: v / c for k, (v, c) in sorted(self.scores.items()) if c}
        return {"run_id": run.id, "env": run.env, "env_version": "synthetic", "model": run.model,
                "status": run.status, "tasks": run.n_tasks, "rollouts": self.n, "errors": self.errors,
                "error_kinds": dict(sorted(self.kinds.items(), key=lambda kv: -kv[1])),
                "mean_reward": self.reward_sum / self.n_scored if self.n_scored else None,
                "rewards": {k: v for k, v in means.items() if k not in METRICS},
                "metrics": {k: v for k, v in means.items() if k in METRICS},
                "prompt_tokens": self.ptoks, "completion_tokens": self.ctoks, "cost_usd": self.cost,
                "mean_rollout_s": self.dur / self.n if self.n else None}


_GEN: Generator | None = None


def _make_rows(seed: int, runs: list[RunPlan], unit: tuple[int, int, int]) -> tuple[Any, ...]:
    global _GEN
    if _GEN is None or _GEN.seed != seed:
        _GEN = Generator(seed)
    i, a, b = unit
    batch = _GEN.chunk(runs[i], a, b)
    st = RunStats()
    for s in batch:
        st.add(s)
    return i, st, rows(batch, time.time())


def generate(path: Path | str, n: int = 1_000_000, seed: int = 0, *, via: str = "direct", workers: int | None = None,
             progress: Callable[[int], None] | None = None) -> list[RunPlan]:
    """Write ``n`` synthetic rollouts into a new store at ``path``; returns the runs.

    ``workers=0`` generates in this process (what tests use); the default uses ``cpu_count - 1``
    (at least 1) worker processes while this process inserts.
    """
    runs = plan_runs(n, seed)
    stats = [RunStats() for _ in runs]
    store = Store(path)
    try:
        if store.conn.execute("SELECT 1 FROM rollout LIMIT 1").fetchone():
            raise SystemExit(f"{path} already holds rollouts; pass a new path")
        for env in ENVS:
            store.register_env(env, "synthetic", f"envs/{env}", f"synthetic {env} environment")
        for run in runs:
            store.create_run(run.id, kind="eval", env_name=run.env, env_version="synthetic", env_source=f"envs/{run.env}",
                             model=run.model, base_url="http://127.0.0.1:8000/v1", harness="synthetic",
                             runtime="local", n_tasks=run.n_tasks, rollouts_per_task=run.r, concurrency=64,
                             created_at=run.created_at, config={"env": run.env, "n": run.n_tasks})
        if via == "writer":
            _via_writer(store, seed, runs, stats, progress)
        else:
            _via_direct(store, seed, runs, stats, progress, workers)
        for run, st in zip(runs, stats, strict=True):
            if run.status != "running":
                store.update_run(run.id, status=run.status, finished_at=run.created_at + 60 + run.size * 0.02,
                                 summary=st.summary(run))
    finally:
        store.close()
    return runs


def _via_direct(store: Store, seed: int, runs: list[RunPlan], stats: list[RunStats],
                progress: Callable[[int], None] | None, workers: int | None) -> None:
    conn = store.conn
    # A bulk load into a new file: index pages stay in a 1 GiB cache, and no fsync per checkpoint
    # (a crash here leaves a half-written synthetic store, which nobody needs to keep).
    conn.execute("PRAGMA cache_size=-1048576")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA wal_autocheckpoint=16384")
    units = work_units(runs)
    sqls = (_ROLLOUT_SQL, _SCORE_SQL, _CALL_SQL, _ERROR_SQL, _FTS_SQL, _COST_SQL)

    def insert(results: Iterator[tuple[Any, ...]]) -> None:
        for i, st, lists in results:
            stats[i].merge(st)
            conn.execute("BEGIN IMMEDIATE")
            for sql, data in zip(sqls, lists, strict=True):
                if data:
                    conn.executemany(sql, data)
            conn.execute("COMMIT")
            if progress:
                progress(len(lists[0]))

    if workers is None:
        workers = max(1, min(4, (os.cpu_count() or 2) - 1))
    if workers == 0:
        insert(_make_rows(seed, runs, u) for u in units)
        return
    with ProcessPoolExecutor(workers) as pool:
        insert(pool.map(_make_rows, [seed] * len(units), [runs] * len(units), units, chunksize=1))


def _via_writer(store: Store, seed: int, runs: list[RunPlan], stats: list[RunStats],
                progress: Callable[[int], None] | None) -> None:
    gen = Generator(seed)
    writer = store.writer(on_commit=progress)
    try:
        for i, a, b in work_units(runs):
            batch = gen.chunk(runs[i], a, b)
            group: list[Synth] = []
            for s in batch:
                stats[i].add(s)
                group.append(s)
                if s.sample_index == runs[i].r - 1 or s is batch[-1]:
                    writer.submit([record(x) for x in group])
                    group = []
    finally:
        writer.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("-n", type=int, default=1_000_000, help="number of rollouts (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--via", choices=("direct", "writer"), default="direct",
                    help="executemany in large transactions from generated rows (default) or BatchWriter")
    ap.add_argument("--workers", type=int, default=None, help="generator processes (0: in this process)")
    a = ap.parse_args(argv)
    if a.path.exists():
        ap.error(f"{a.path} exists; remove it or pick another path")
    t0 = last = time.perf_counter()
    done = 0

    def progress(k: int) -> None:
        nonlocal done, last
        done += k
        now = time.perf_counter()
        if now - last > 10:
            last = now
            print(f"  {done:>9,} rollouts  {done / (now - t0):>8,.0f}/s", file=sys.stderr)

    runs = generate(a.path, a.n, a.seed, via=a.via, workers=a.workers, progress=progress)
    dt = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in a.path.parent.glob(a.path.name + "*")) / 2**20
    print(f"wrote {a.n:,} rollouts in {len(runs)} runs to {a.path} in {dt:.1f}s "
          f"({a.n / dt:,.0f} rollouts/s, {size:,.0f} MiB, via {a.via})")


if __name__ == "__main__":
    main()
