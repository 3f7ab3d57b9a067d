"""Benchmark: `workbench eval ENV -m A -m B -m C` against three instant mocks in one process, next to
`workbench eval ENV -m A` alone, in alternating rounds on this machine.

Each model is a registered name (`workbench models add`) pointing at its own instant mock (one process
each). Reports the single-model rollouts/s, the per-model rollouts/s inside the three-model eval (each
run's own figure, as its summary gives it), and their ratio. Goal (the issue's): the three-model eval keeps
at least 80% of the single-model rollouts/s per model. The machine has 2 cores shared by the eval and
the mocks, so three models at once compete for them: say so when the goal is missed.

    python scripts/bench_multi_eval.py [--rollouts 4000] [-c 64] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_eval import start_mock  # noqa: E402


def cli_json(args: list[str], env: dict[str, str]) -> dict:
    """Run ``workbench ARGS`` and return the JSON object its last stdout line holds (exit on failure)."""
    out = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                         env=env)
    if out.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args[:3])} failed ({out.returncode}): {out.stderr[-2000:]}")
    lines = out.stdout.strip().splitlines()
    return orjson.loads(lines[-1]) if lines else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=4000, help="rollouts per model")
    ap.add_argument("-c", type=int, default=64, help="concurrency per model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    mocks = [start_mock("arithmetic") for _ in range(3)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(Path(tmp) / "config")}
            names = ["model-a", "model-b", "model-c"]
            for name, (_, url) in zip(names, mocks, strict=True):
                cli_json(["models", "add", name, "--base-url", url, "--model-id", "mock-model", "--json"], env)
            n = str(a.rollouts)
            common = ["eval", "arithmetic", "-a", orjson.dumps({"n": a.rollouts}).decode(), "-n", n, "-c", str(a.c),
                      "--json"]
            single, multi, wall = [], [], []
            for i in range(a.repeat):
                s = cli_json([*common, "-m", names[0], "--db", str(Path(tmp) / f"single{i}.db")], env)
                single.append(s["rollouts_per_s"])
                t0 = time.perf_counter()
                m = cli_json([*common, *[x for nm in names for x in ("-m", nm)], "--db", str(Path(tmp) / f"multi{i}.db")],
                         env)
                wall.append(time.perf_counter() - t0)
                multi.append(statistics.median(r["rollouts_per_s"] for r in m["runs"]))
    finally:
        for p, _ in mocks:
            p.terminate()
            p.wait()
    med = statistics.median
    ratio = med(multi) / med(single)
    print(f"arithmetic, {a.rollouts:,} rollouts per model, -c {a.c} (median of {a.repeat} rounds)")
    print(f"  one model alone:                {med(single):8.0f} rollouts/s")
    print(f"  each of three models at once:   {med(multi):8.0f} rollouts/s  ({ratio:.2f} of alone; "
          f"{3 * a.rollouts / med(wall):.0f} rollouts/s in all, process start included)")
    print(f"  the three together: {3 * med(multi) / med(single):.2f} of one model alone's rollouts/s")
    print(f"  goal at least 0.80 of alone per model: {'MET' if ratio >= 0.8 else 'NOT MET'}"
          + ("" if ratio >= 0.8 else f" (2 cores shared by the eval and {len(mocks)} mock processes)"))
    if a.json:
        print(orjson.dumps({"single_rollouts_per_s": med(single), "per_model_rollouts_per_s": med(multi),
                            "ratio": ratio,
                            "aggregate_ratio": 3 * med(multi) / med(single), "rounds": {"single": single, "multi": multi}}).decode())


if __name__ == "__main__":
    main()
