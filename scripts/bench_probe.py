"""Benchmark: `workbench probe` (the model-free battery; the simulated user's model for support_desk) on each
bundled environment, each a fresh `workbench` process timed end to end, with the probe's own wall time.
Goal: under 30 s each.

    python scripts/bench_probe.py [--model tiny] [-n 8] [--json]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
ENVS = sorted(p.name for p in (ROOT / "envs").iterdir() if (p / "__init__.py").is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="the simulated user's model (default: the embedded model)")
    ap.add_argument("-n", type=int, default=8)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DB": str(Path(tmp) / "bench.db")}
        cases = [(e, []) for e in ENVS] + [("support_desk", ["-a", '{"sandboxed": false}'])]
        for name, extra in cases:
            label = name + (" (sandboxed=false)" if extra else "")
            args = ["probe", name, "-n", str(a.n), "--json", *extra, *(["-m", a.model] if a.model else [])]
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                                 env=env, cwd=ROOT)
            wall = time.perf_counter() - t0
            if out.returncode not in (0, 1):
                raise SystemExit(f"probe {name} failed: {out.stderr[-1500:]}")
            res = orjson.loads(out.stdout.strip().splitlines()[-1])
            rows[label] = {"wall_s": wall, "probe_s": res["wall_s"], "policies": len(res["policies"]),
                           "exploitable": res["exploitable"]}
    print(f"workbench probe, {a.n} tasks per policy (a fresh process each)")
    for label, r in rows.items():
        goal = "MET" if r["wall_s"] < 30 else "NOT MET"
        print(f"  {label:<30} {r['wall_s']:6.1f} s ({r['probe_s']:.1f} s probing), {r['policies']} policies, "
              f"{r['exploitable']} exploitable; goal under 30 s: {goal}")
    if a.json:
        print(orjson.dumps(rows).decode())


if __name__ == "__main__":
    main()
