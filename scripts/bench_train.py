"""Benchmark ``workbench train``: wall time of async against sync training to the same step count
when rollout latency is heavy-tailed (a slow verifier, a sandbox that sometimes hangs).

    python scripts/bench_train.py [--steps 10] [--groups-per-step 4] [--rollouts-per-task 4]
                                  [--median-s 0.2] [--p99-s 4] [--max-delay-s 30]
                                  [--async-level 1] [--max-off-policy-steps 2]
                                  [--model tiny] [--threads 1] [--seed 0] [--out bench_train.json]

The script writes an environment file into a temporary directory: the bundled ``arithmetic``
environment whose ``correct`` reward is wrapped in an async function that first sleeps a
lognormal time (median ``--median-s``, 99th percentile ``--p99-s``, capped at ``--max-delay-s``).
The delay of a rollout is a function of (seed, task id, sample index) only, so both modes see the
same delay for the same group of the (seeded, identical) task stream.

It then runs ``workbench train PATH --json`` twice into one fresh store, ``--sync`` first and then
async (``--loop.async_level``/``--loop.max_off_policy_steps``), with identical steps, sizes, seed and
model, and prints for each: the loop wall time (from the run's creation, after the inference
server is up, to its last step record: server start-up is the same in both modes and left out;
the trainer process's start-up, about 6 s, is in it), the seconds per step after the first, the
command's own wall time, the trainer's total wait for rollouts, the first/last batch reward,
and the rollouts dropped as too stale. The speed-up is sync loop time / async loop time; the goal
is at least 1.5x. ``--out`` gets every figure as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

Z99 = 2.3263478740408408  # the standard normal's 99th percentile

ENV_SOURCE = '''"""The bundled arithmetic environment behind a slow, heavy-tailed verifier (written by
scripts/bench_train.py)."""

from __future__ import annotations

import asyncio
import math
import random
from typing import Any

import workbench as wb
from workbench_envs.arithmetic import load_environment as load_arithmetic


def delay_s(seed: int, task_id: str, sample: int, median_s: float, sigma: float, max_s: float) -> float:
    """The verifier latency of one rollout: lognormal, a function of (seed, task, sample) only."""
    rng = random.Random(f"{seed}:{task_id}:{sample}")
    return min(max_s, median_s * math.exp(sigma * rng.gauss(0.0, 1.0)))


def load_environment(n: int = 200, seed: int = 0, median_s: float = 0.2, sigma: float = 1.2,
                     max_s: float = 30.0, delay_seed: int = 0) -> wb.Environment:
    base = load_arithmetic(n=n, seed=seed)
    rubric = wb.Rubric()
    for f in base.rubric.functions:
        if f.name == "correct":
            check = f.fn

            async def correct(completion: str, answer: str, task: wb.Task, trace: Any) -> float:
                """The arithmetic reward, after a heavy-tailed wait (a slow verifier)."""
                await asyncio.sleep(delay_s(delay_seed, task.id, trace.sample_index, median_s, sigma, max_s))
                return check(completion, answer)

            rubric.reward(correct, weight=f.weight)
        elif f.kind == "reward":
            rubric.reward(f.fn, weight=f.weight, name=f.name)
        elif f.kind == "metric":
            rubric.metric(f.fn, name=f.name)
        else:
            rubric.group_reward(f.fn, weight=f.weight, name=f.name)
    return wb.Environment(name="slow-arithmetic", tasks=base.tasks, harness=base.harness, rubric=rubric,
                          sampling=base.sampling,
                          description="arithmetic with a lognormal verifier latency (scripts/bench_train.py)")
'''


def sigma_for(median_s: float, p99_s: float) -> float:
    """The lognormal sigma whose 99th percentile is ``p99_s`` for the given median."""
    if not 0 < median_s < p99_s:
        raise SystemExit(f"need 0 < --median-s ({median_s}) < --p99-s ({p99_s})")
    return math.log(p99_s / median_s) / Z99


def delay_stats(median_s: float, sigma: float, max_s: float, n: int = 20_000) -> dict[str, float]:
    """Quantiles of the configured latency distribution (sampled), in seconds."""
    rng = random.Random(12345)
    xs = sorted(min(max_s, median_s * math.exp(sigma * rng.gauss(0.0, 1.0))) for _ in range(n))
    q = lambda p: xs[min(n - 1, int(p * n))]  # noqa: E731
    return {"mean": round(statistics.fmean(xs), 3), "p50": round(q(0.5), 3), "p90": round(q(0.9), 3),
            "p99": round(q(0.99), 3), "max_of_20k": round(xs[-1], 3)}


def run_train_command(cmd: list[str], label: str, *, verbose: bool) -> tuple[dict[str, Any], float]:
    """Run a ``workbench train ... --json`` command; (its JSON summary, the command's seconds). A failed
    run ends the benchmark with the tail of its stderr."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                          stderr=None if verbose else subprocess.PIPE)
    command_s = time.perf_counter() - t0
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-30:])
        raise SystemExit(f"{label} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1]), command_s


def train_once(mode: str, env_file: Path, db: Path, args: argparse.Namespace, sigma: float) -> dict[str, Any]:
    """One ``workbench train`` run; its JSON summary plus timings read back from the store."""
    from workbench.store import Store

    env_args = (f"{{n = {args.tasks}, seed = {args.seed}, median_s = {args.median_s}, sigma = {sigma}, "
                f"max_s = {args.max_delay_s}, delay_seed = {args.seed}}}")
    cmd = [sys.executable, "-m", "workbench.cli", "train", str(env_file), "--db", str(db), "--json",
           "--max-steps", str(args.steps), "--env.args", env_args,
           "--loop.groups_per_step", str(args.groups_per_step),
           "--loop.rollouts_per_task", str(args.rollouts_per_task),
           "--loop.concurrency", str(args.concurrency), "--loop.max_tokens", str(args.max_tokens),
           "--loop.seed", str(args.seed), "--loop.eval_tasks", "0", "--loop.checkpoint_every", "0",
           "--trainer.model", args.model, "--trainer.seed", str(args.seed)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if mode == "sync":
        cmd += ["--sync"]
    else:
        cmd += ["--loop.async_level", str(args.async_level),
                "--loop.max_off_policy_steps", str(args.max_off_policy_steps)]
    print(f"\n== {mode}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    summary, command_s = run_train_command(cmd, f"{mode} run", verbose=args.verbose)
    with Store(db) as store:
        run = store.get_run(summary["run_id"])
        steps = store.train_records(run["id"], "step")
    metrics = [s["metrics"] for s in steps]
    stale: dict[str, float] = {}
    for m in metrics:
        for k, v in m.items():
            lag = k.removeprefix("staleness_")
            if k.startswith("staleness_") and lag.isdigit():  # rollouts by policy lag (staleness_mean aside)
                stale[lag] = stale.get(lag, 0.0) + v
    return {
        "mode": mode, "run_id": run["id"], "steps": summary["steps"],
        "loop_s": round(steps[-1]["created_at"] - run["created_at"], 2) if steps else None,
        "s_per_step_after_first": round((steps[-1]["created_at"] - steps[0]["created_at"]) / (len(steps) - 1), 3)
        if len(steps) > 1 else None,
        "command_s": round(command_s, 2), "summary_wall_s": summary.get("wall_s"),
        "trainer_wait_s": round(sum(m.get("wait_s", 0.0) for m in metrics), 2),
        "train_s": round(sum(m.get("train_s", 0.0) for m in metrics), 2),
        "update_s": round(sum(m.get("update_s", 0.0) for m in metrics), 2),
        "reward_first": summary["reward_first"], "reward_last": summary["reward_last"],
        "reward_mean_all_steps": round(statistics.fmean(m.get("reward_mean", 0.0) for m in metrics), 4)
        if metrics else None,
        "dropped": summary["dropped"], "skipped_steps": summary["skipped_steps"],
        "staleness_histogram": {k: int(v) for k, v in sorted(stale.items(), key=lambda kv: int(kv[0]))},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="optimizer steps of each run")
    ap.add_argument("--groups-per-step", type=int, default=4)
    ap.add_argument("--rollouts-per-task", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=32, help="rollouts in flight at most")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--tasks", type=int, default=200, help="arithmetic tasks (n)")
    ap.add_argument("--median-s", type=float, default=0.2, help="median verifier latency per rollout")
    ap.add_argument("--p99-s", type=float, default=4.0, help="99th-percentile verifier latency")
    ap.add_argument("--max-delay-s", type=float, default=30.0, help="latency cap")
    ap.add_argument("--async-level", type=int, default=1)
    ap.add_argument("--max-off-policy-steps", type=int, default=2)
    ap.add_argument("--model", default="tiny", help="trainer.model: tiny or a model directory")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the server and of the trainer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--db", default=None, help="store file (default: a temporary one)")
    ap.add_argument("--out", default="bench_train.json", help="write the figures here as JSON")
    ap.add_argument("--verbose", action="store_true", help="show the train commands' logs")
    args = ap.parse_args(argv)

    sigma = sigma_for(args.median_s, args.p99_s)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        env_file = Path(tmp) / "slow_arithmetic.py"
        env_file.write_text(ENV_SOURCE)
        db = Path(args.db) if args.db else Path(tmp) / "bench.db"
        runs = {mode: train_once(mode, env_file, db, args, sigma) for mode in ("sync", "async")}

    sync, asyn = runs["sync"], runs["async"]
    speedup = sync["loop_s"] / asyn["loop_s"] if sync["loop_s"] and asyn["loop_s"] else None
    command_speedup = sync["command_s"] / asyn["command_s"]
    result: dict[str, Any] = {
        "config": {k: v for k, v in vars(args).items() if k not in ("verbose",)},
        "latency": {"distribution": "lognormal", "median_s": args.median_s, "sigma": round(sigma, 4),
                    "cap_s": args.max_delay_s, **delay_stats(args.median_s, sigma, args.max_delay_s)},
        "sync": sync, "async": asyn,
        "speedup": round(speedup, 3) if speedup else None,
        "speedup_command": round(command_speedup, 3),
        "goal": 1.5, "goal_met": bool(speedup and speedup >= 1.5),
    }
    lat = result["latency"]
    print(f"\nverifier latency: lognormal median {lat['p50']}s mean {lat['mean']}s p90 {lat['p90']}s "
          f"p99 {lat['p99']}s (cap {args.max_delay_s}s)")
    print(f"{args.steps} steps x {args.groups_per_step} groups x {args.rollouts_per_task} rollouts, "
          f"model {args.model}, async_level {args.async_level}, max_off_policy_steps {args.max_off_policy_steps}")
    print(f"{'mode':<6} {'loop s':>8} {'s/step':>7} {'command s':>10} {'wait s':>8} {'reward first':>13} "
          f"{'last':>6} {'mean':>6} {'dropped':>8}  staleness")
    for r in (sync, asyn):
        print(f"{r['mode']:<6} {r['loop_s']:>8.1f} {r['s_per_step_after_first'] or 0:>7.2f} {r['command_s']:>10.1f} "
              f"{r['trainer_wait_s']:>8.1f} "
              f"{r['reward_first']:>13.3f} {r['reward_last']:>6.3f} {r['reward_mean_all_steps']:>6.3f} "
              f"{r['dropped']:>8}  {r['staleness_histogram']}")
    verdict = "meets" if result["goal_met"] else "MISSES"
    print(f"speed-up (sync / async loop time): {result['speedup']}x  ({verdict} the 1.5x goal); "
          f"whole commands: {result['speedup_command']}x")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"figures written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
