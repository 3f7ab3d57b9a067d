"""Benchmark: the prompt-optimisation gain of `workbench optimize` on the bundled `arithmetic` env, and
what it costs, against a scripted task model whose accuracy depends on its instruction.

The task model (a real mock endpoint on 127.0.0.1) answers 30% of the problems right by default; an
instruction that says "carefully" lifts it to 60%, "step by step" to 90%, "in words" drops it to 10%
(which problems it gets right is a fixed function of the problem, so a prompt always scores the same).
The reflection model is scripted too: it proposes, in turn, a worse instruction, a better one and the
best one, so the search has to tell them apart on the training split. Both are registered with list
prices (task $0.15/$0.60, reflection $3/$15 per Mtok) so the cost is what such a search would be billed.

Prints the held-out reward before and after with their 95% CIs, the paired difference and its CI, the
candidates, the number of rollouts and reflection calls, the cost and the wall time.

    python scripts/bench_optimize.py [--tasks 150] [--heldout 50] [--max-evals 400] [--json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from bench_eval import start_mock  # noqa: E402
from bench_multi_eval import cli_json  # noqa: E402

ACCURACY = {"in words": 0.1, "carefully": 0.6, "step by step": 0.9}
PROPOSALS = [
    "Write the answer in words, never in digits.",
    "Read the problem carefully and answer with a number.",
    "Answer with a number. Work it out step by step, then give only the final integer.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=150)
    ap.add_argument("--heldout", type=int, default=50)
    ap.add_argument("--max-evals", type=int, default=400)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    replies = [f"Here is a revised instruction:\n```\n{p}\n```" for p in PROPOSALS]
    task = start_mock("arithmetic", "--accuracy", "0.3", "--instruction-accuracy", orjson.dumps(ACCURACY).decode())
    reflector = start_mock("script", "--script", orjson.dumps(replies).decode())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(Path(tmp) / "config"),
                   "XDG_DATA_HOME": str(Path(tmp) / "data"), "WORKBENCH_DB": str(Path(tmp) / "bench.db")}
            for name, url, (pin, pout) in (("task", task[1], ("0.15", "0.6")), ("reflector", reflector[1], ("3", "15"))):
                cli_json(["models", "add", name, "--base-url", url, "--model-id", "mock-model", "--input-price", pin,
                      "--output-price", pout, "--json"], env)
            t0 = time.perf_counter()
            out = cli_json(["optimize", "arithmetic", "-a", orjson.dumps({"n": a.tasks}).decode(), "-m", "task",
                        "--reflection-model", "reflector", "--max-evals", str(a.max_evals), "--heldout",
                        str(a.heldout), "--json"], env)
            wall = time.perf_counter() - t0
    finally:
        for p, _ in (task, reflector):
            p.terminate()
            p.wait()
    b, f = out["heldout_before"], out["heldout_after"]
    print(f"arithmetic, {a.tasks - a.heldout} training tasks, {a.heldout} held out, --max-evals {a.max_evals}")
    for c in sorted(out["candidates"], key=lambda c: -(c["score"] or -1)):
        score = "-" if c["score"] is None else f"{c['score']:.3f}"
        print(f"  candidate {c['index']} (from {c['parent']}): train score {score}  {c['prompt']!r}")
    print(f"  held-out before {b['mean_reward']:.3f} (95% CI {b['ci95'][0]:.3f}–{b['ci95'][1]:.3f}), "
          f"after {f['mean_reward']:.3f} (95% CI {f['ci95'][0]:.3f}–{f['ci95'][1]:.3f})")
    lo, hi = out["delta_ci95"]
    print(f"  gain {out['delta']:+.3f} (paired 95% CI {lo:+.3f} to {hi:+.3f}, "
          f"{'significant' if out['significant'] else 'not significant'})")
    print(f"  {out['evals']} search rollouts; cost ${out['cost_usd']:.4f} (reflection ${out['reflection_cost_usd']:.4f});"
          f" {wall:.1f} s wall, process start included; stopped by {out['stopped_by']}")
    if a.json:
        print(orjson.dumps({"before": b, "after": f, "delta": out["delta"], "delta_ci95": out["delta_ci95"],
                            "cost_usd": out["cost_usd"], "reflection_cost_usd": out["reflection_cost_usd"],
                            "evals": out["evals"], "wall_s": wall, "candidates": out["candidates"]}).decode())


if __name__ == "__main__":
    main()
