"""Benchmark: `workbench compare` on two runs of N rollouts each (default 100,000), in a fresh store.

The runs share their tasks (``--tasks`` of them, the rollouts spread evenly), rewards differ per task, a few
rollouts failed. Times the comparison in process (``workbench.analysis.compare.compare``) and the command end
to end (``workbench compare A B --json``, process start included), the median of ``--repeat`` rounds.
Goal (the issue's): under 2 s for two runs of 100,000 rollouts.

    python scripts/bench_compare.py [-n 100000] [--tasks 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from workbench.analysis.compare import compare  # noqa: E402
from workbench.store import Store  # noqa: E402

_COLS = ("id", "run_id", "env_name", "model", "task_id", "task_index", "sample_index", "status", "error_kind",
         "reward", "prompt_tokens", "completion_tokens", "cost_usd", "duration_s", "turns", "created_at", "prompt",
         "answer", "info", "completion", "messages", "state", "source")


def build(path: Path, n: int, tasks: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    store = Store(path)
    store.register_env("arithmetic", "v1", "", "")
    ids = []
    skill = {"model-a": 0.6, "model-b": 0.5}
    for model, p in skill.items():
        run_id = f"bench-{model}"
        store.create_run(run_id, kind="eval", env_name="arithmetic", env_version="v1", model=model, n_tasks=tasks,
                         rollouts_per_task=max(1, n // tasks))
        hard = [rng.random() for _ in range(tasks)]
        rows = []
        for i in range(n):
            t = i % tasks
            failed = rng.random() < 0.01
            reward = None if failed else float(rng.random() < p * (1.5 - hard[t]))
            rows.append((f"{run_id}.{t}.{i // tasks}", run_id, "arithmetic", model, f"task-{t:06d}", t, i // tasks,
                         "error" if failed else "ok", "model.server" if failed else None, reward, 40, 8, 0.0001,
                         rng.uniform(0.2, 2.0), 1, time.time(), "q", "a", "{}", "c", "[]", "{}", "model"))
        with store.conn:
            store.conn.executemany(f"INSERT INTO rollout ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})",
                                   rows)
        ids.append(run_id)
    store.close()
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=100_000, help="rollouts per run")
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.db"
        t0 = time.perf_counter()
        runs = build(path, a.n, a.tasks)
        print(f"built two runs of {a.n:,} rollouts over {a.tasks:,} tasks in {time.perf_counter() - t0:.1f} s")
        inproc, cli = [], []
        result = None
        for _ in range(a.repeat):
            store = Store(path)
            t0 = time.perf_counter()
            result = compare(store.conn, runs)
            inproc.append(time.perf_counter() - t0)
            store.close()
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "workbench.cli", "compare", *runs, "--json"], capture_output=True,
                                 text=True, env={**os.environ, "WORKBENCH_DB": str(path)}, cwd=ROOT)
            cli.append(time.perf_counter() - t0)
            if out.returncode != 0:
                raise SystemExit(out.stderr)
        assert result is not None
        p = result["models"][1]
        print(f"compare in process: {statistics.median(inproc):.2f} s (median of {a.repeat}); the command, process "
              f"start included: {statistics.median(cli):.2f} s")
        print(f"  delta {p['delta']:+.3f}, 95% CI {p['ci95'][0]:+.3f} to {p['ci95'][1]:+.3f} ({p['ci_method']}), "
              f"{len(p['regressions'])} regressions")
        ok = statistics.median(cli) < 2.0
        print(f"  goal under 2 s: {'MET' if ok else 'NOT MET'}")
        print(json.dumps({"rollouts_per_run": a.n, "tasks": a.tasks, "in_process_s": statistics.median(inproc),
                          "command_s": statistics.median(cli), "ci_method": p["ci_method"], "goal_met": ok}))


if __name__ == "__main__":
    main()
