"""Benchmark the store: ingest through BatchWriter, and the trace browser's queries on a big store.

    python scripts/bench_store.py [PATH] [-n N] [--ingest N] [--repeat 5] [--json]

(a) ingest: realistic rollouts (from gen_store) submitted to ``BatchWriter`` in groups of 8, as the
engine does; reports committed rollouts/s into a fresh store next to PATH. (b) queries: each query
of ``workbench.store.queries`` the browser issues, timed on the store at PATH (generated with
gen_store if missing, N rollouts, default 1,000,000): one warm-up run (reported as ``first``), then
the median and best of ``--repeat`` runs. The goal is under 50 ms each; ``[info]`` marks the
queries outside that goal (the browser never issues them on a big store).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gen_store  # noqa: E402

from workbench.store import Store  # noqa: E402
from workbench.store.db import connect  # noqa: E402
from workbench.store.queries import (  # noqa: E402
    RolloutFilter,
    count_rollouts,
    distinct_values,
    get_rollout,
    list_runs,
    page_rollouts,
)

GOAL_MS = 50.0


def bench_ingest(n: int, directory: Path, seed: int = 11) -> dict[str, Any]:
    """Committed rollouts/s through ``BatchWriter.submit`` in groups of 8 (records built beforehand)."""
    runs = gen_store.plan_runs(n, seed)
    gen = gen_store.Generator(seed)
    groups: list[list[Any]] = []
    for i, a, b in gen_store.work_units(runs):
        batch = [gen_store.record(s) for s in gen.chunk(runs[i], a, b)]
        groups += [batch[k:k + 8] for k in range(0, len(batch), 8)]
    path = directory / f"ingest-{os.getpid()}.db"
    try:
        store = Store(path)
        for run in runs:
            store.create_run(run.id, env_name=run.env, model=run.model)
        writer = store.writer()
        t0 = time.perf_counter()
        for g in groups:
            writer.submit(g)
        t_submit = time.perf_counter() - t0
        writer.close()
        dt = time.perf_counter() - t0
        store.close()
        return {"rollouts": writer.committed, "seconds": dt, "rollouts_per_s": writer.committed / dt,
                "batches": writer.batches, "submit_s": t_submit}
    finally:
        for p in directory.glob(path.name + "*"):
            p.unlink()


def _time(fn: Callable[[], Any], repeat: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    out = fn()
    first = (time.perf_counter() - t0) * 1000
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    rows = out if isinstance(out, int) else len(out) if hasattr(out, "__len__") else 1
    return {"first_ms": first, "median_ms": statistics.median(times), "best_ms": min(times), "rows": rows}


def query_cases(conn: Any) -> list[tuple[str, Callable[[], Any]]]:
    """The browser's queries, with arguments picked from the store itself."""
    runs = list_runs(conn, limit=1000)
    mid_run = sorted(runs, key=lambda r: r["created_at"])[len(runs) // 2]["id"]
    n = count_rollouts(conn, RolloutFilter())
    deep = (int(n * 0.9), int(n * 0.9))
    F = RolloutFilter  # noqa: N806
    # a cursor deep in the -reward order of one env: the row 80% of the way down its first page walk
    env_page = page_rollouts(conn, F(env="wordle", sort="-reward", min_reward=0.3, max_reward=0.31), limit=1) or \
        page_rollouts(conn, F(env="wordle", sort="-reward"), limit=1)
    env_cursor = env_page[0].cursor("-reward")
    some_id = page_rollouts(conn, F(env="doc_search"), limit=1, after=(n // 2, n // 2))[0].id
    single = [r["id"] for r in runs if r["rollouts_per_task"] == 1]  # there "RUN.TASK." names one rollout
    prefix = page_rollouts(conn, F(run_id=single[0]), limit=1, offset=7)[0].id.rsplit(".", 1)[0] + "." if single \
        else some_id
    return [
        ("browse: first page, no filter", lambda: page_rollouts(conn, F())),
        ("browse: first page, newest first", lambda: page_rollouts(conn, F(sort="-created"))),
        ("browse: deep keyset page (pk 90%)", lambda: page_rollouts(conn, F(), after=deep)),
        ("filter: env=doc_search", lambda: page_rollouts(conn, F(env="doc_search"))),
        ("filter: env=wordle, deep keyset", lambda: page_rollouts(conn, F(env="wordle"), after=deep)),
        ("filter: run (mid-store run)", lambda: page_rollouts(conn, F(run_id=mid_run))),
        ("filter: model=claude-3-5-haiku", lambda: page_rollouts(conn, F(model="claude-3-5-haiku"))),
        ("filter: reward in [0.4, 0.6]", lambda: page_rollouts(conn, F(min_reward=0.4, max_reward=0.6))),
        ("filter: error_kind=timeout", lambda: page_rollouts(conn, F(error_kind="timeout"))),
        ("filter: error_kind=any", lambda: page_rollouts(conn, F(error_kind="any"))),
        ("filter: env=wordle + error any", lambda: page_rollouts(conn, F(env="wordle", error_kind="any"))),
        ("filter: status=error", lambda: page_rollouts(conn, F(status="error"))),
        ("sort: -reward, no filter", lambda: page_rollouts(conn, F(sort="-reward"))),
        ("sort: reward (failed first)", lambda: page_rollouts(conn, F(sort="reward"))),
        ("sort: -reward, run", lambda: page_rollouts(conn, F(run_id=mid_run, sort="-reward"))),
        ("sort: -reward, env=wordle, deep keyset",
         lambda: page_rollouts(conn, F(env="wordle", sort="-reward"), after=env_cursor)),
        ("fts: common word 'answer'", lambda: page_rollouts(conn, F(text="answer"))),
        ("fts: rare word 'xylophone'", lambda: page_rollouts(conn, F(text="xylophone"))),
        ("fts: 'answer' + env=wordle", lambda: page_rollouts(conn, F(text="answer", env="wordle"))),
        ("fts: 'answer' sorted -reward", lambda: page_rollouts(conn, F(text="answer", sort="-reward"))),
        ("fts: hostile input", lambda: page_rollouts(conn, F(text='foo"bar OR('))),
        ("get_rollout (messages, scores, calls)", lambda: get_rollout(conn, some_id)),
        ("get_rollout by id prefix", lambda: get_rollout(conn, prefix)),
        ("count: no filter", lambda: count_rollouts(conn, F())),
        ("count: env=wordle", lambda: count_rollouts(conn, F(env="wordle"))),
        ("count: run", lambda: count_rollouts(conn, F(run_id=mid_run))),
        ("count: error_kind=any", lambda: count_rollouts(conn, F(error_kind="any"))),
        ("count: error_kind=none", lambda: count_rollouts(conn, F(error_kind="none"))),
        ("count: reward in [0.4, 0.6]", lambda: count_rollouts(conn, F(min_reward=0.4, max_reward=0.6))),
        ("count: fts rare word", lambda: count_rollouts(conn, F(text="xylophone"))),
        ("count: fts common word", lambda: count_rollouts(conn, F(text="answer"))),
        ("count: env=wordle + reward >= 0.5", lambda: count_rollouts(conn, F(env="wordle", min_reward=0.5))),
        ("count: status=error (not indexed) [info]", lambda: count_rollouts(conn, F(status="error"))),
        ("list_runs (50)", lambda: list_runs(conn, limit=50)),
        ("distinct_values env+model+error_kind",
         lambda: [distinct_values(conn, c) for c in ("env", "model", "error_kind")]),
        ("offset page (offset 100,000) [info]", lambda: page_rollouts(conn, F(), offset=100_000)),
        ("sort: duration", lambda: page_rollouts(conn, F(sort="duration"))),
        ("sort: -duration + env=wordle", lambda: page_rollouts(conn, F(sort="-duration", env="wordle"))),
    ]


def bench_queries(path: Path, repeat: int) -> list[dict[str, Any]]:
    conn = connect(path, readonly=True)
    out = []
    for name, fn in query_cases(conn):
        out.append({"query": name, **_time(fn, repeat)})
    conn.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("path", type=Path, nargs="?", default=Path(tempfile.gettempdir()) / "workbench-bench-1m.db")
    ap.add_argument("-n", type=int, default=1_000_000, help="rollouts to generate when PATH is missing")
    ap.add_argument("--ingest", type=int, default=50_000, help="rollouts for the ingest benchmark (0: skip)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    a = ap.parse_args(argv)
    report: dict[str, Any] = {"store": str(a.path), "load_avg": os.getloadavg(), "cpus": os.cpu_count()}
    if not a.path.exists():
        print(f"generating {a.n:,} rollouts into {a.path} ...", file=sys.stderr)
        t0 = time.perf_counter()
        gen_store.generate(a.path, a.n)
        report["generate_s"] = time.perf_counter() - t0
    if a.ingest:
        ing = bench_ingest(a.ingest, a.path.parent)
        report["ingest"] = ing
        print(f"ingest: {ing['rollouts']:,} rollouts in {ing['seconds']:.2f}s through BatchWriter.submit (groups of 8)"
              f" = {ing['rollouts_per_s']:,.0f} committed rollouts/s ({ing['batches']} transactions)")
    c = connect(a.path, readonly=True)
    report["rollouts"] = c.execute("SELECT COUNT(*) FROM rollout").fetchone()[0]
    c.close()
    report["queries"] = qs = bench_queries(a.path, a.repeat)
    print(f"\nqueries on {report['rollouts']:,} rollouts ({a.path}); median of {a.repeat} after one warm-up")
    print(f"{'query':<50} {'median':>9} {'best':>9} {'first':>9} {'rows':>8}")
    for q in qs:
        info = "[info]" in q["query"]
        mark = "" if info else ("ok" if q["median_ms"] < GOAL_MS else "SLOW")
        print(f"{q['query']:<50} {q['median_ms']:>7.2f}ms {q['best_ms']:>7.2f}ms {q['first_ms']:>7.2f}ms "
              f"{q['rows']:>8} {mark}")
    goal = [q for q in qs if "[info]" not in q["query"] and "+ix_" not in q["query"]]
    report["all_under_goal"] = all(q["median_ms"] < GOAL_MS for q in goal)
    if a.json:
        import orjson

        sys.stdout.write(orjson.dumps(report).decode() + "\n")


if __name__ == "__main__":
    main()
