"""Benchmark the token view: how long ``workbench show ROLLOUT --tokens`` takes (what the app's token view
does: read the trace, load the tokenizer, decode every token, re-render with the chat template), with the
fast tokenizer (``tokenizer.json`` + jinja2) against transformers' ``AutoTokenizer`` (the baseline,
``WORKBENCH_TOKENIZER_BACKEND=transformers``), in the same run.

    python scripts/bench_tokens.py [--model DIR] [--repeat 3] [--json]

Without ``--model`` it builds the tiny model with the fast recipe into a temporary folder. It starts the
embedded server on it, stores a short single-turn rollout (``arithmetic``) and a long multi-turn one
(``wordle``, six turns), then times the command on each, ``--repeat`` times per backend (alternating), and
reports the medians. Goals: under 0.3 s in-process for a short rollout, under 1 s for a long one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _env(tmp: Path, backend: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}
    env.update(XDG_DATA_HOME=str(tmp / "data"), XDG_CONFIG_HOME=str(tmp / "config"), XDG_CACHE_HOME=str(tmp / "cache"),
               HF_HUB_OFFLINE="1", NO_COLOR="1", PYTHONPATH=str(ROOT))
    if backend == "transformers":
        env["WORKBENCH_TOKENIZER_BACKEND"] = "transformers"
    return env


def _workbench(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


IN_PROCESS = """
import sys, time
t0 = time.perf_counter()
from workbench.analysis.token_report import stored_report
from workbench.store import Store
from workbench.store.queries import get_rollout
store = Store(sys.argv[1], readonly=True)
report = stored_report(store, get_rollout(store.conn, sys.argv[2]), sys.argv[3])
print(time.perf_counter() - t0, report.tokens, len(report.mismatches))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="wb-bench-tokens-"))
    model = args.model
    if model is None:
        from workbench_local.models.tiny_model import build_tiny_model

        model = build_tiny_model(tmp / "models" / "workbench-tiny-v1", seed=0, fast=True)
    from tests.local_runtime.helpers import run_server

    db = tmp / "store.db"
    env = _env(tmp, "fast")
    rollouts: dict[str, str] = {}
    with run_server(model, "--served-model-name", "workbench-tiny") as root:
        for name, env_name, extra in (("single-turn", "arithmetic", []),
                                      ("multi-turn", "wordle", ["-a", '{"max_turns": 6}'])):
            res = _workbench(["eval", env_name, *extra, "-n", "1", "--base-url", root + "/v1", "-m", "workbench-tiny",
                              "--db", str(db), "--json"], env)
            if res.returncode not in (0, 2):
                raise SystemExit(f"eval {env_name} failed: {res.stderr[-2000:]}")
            run_id = json.loads(res.stdout.strip().splitlines()[-1])["run_id"]
            import sqlite3

            rollouts[name] = sqlite3.connect(db).execute("SELECT id FROM rollout WHERE run_id=? LIMIT 1",
                                                         (run_id,)).fetchone()[0]
    results: dict[str, dict[str, float]] = {}
    for name, rid in rollouts.items():
        times: dict[str, list[float]] = {"fast": [], "transformers": [], "fast_cli": [], "transformers_cli": []}
        tokens = 0
        for _ in range(args.repeat):
            for backend in ("fast", "transformers"):
                e = _env(tmp, backend)
                p = subprocess.run([sys.executable, "-c", IN_PROCESS, str(db), rid, str(model)], env=e,
                                   capture_output=True, text=True, timeout=600, cwd=ROOT)
                if p.returncode != 0:
                    raise SystemExit(p.stderr[-2000:])
                secs, tokens_s, _ = p.stdout.split()
                times[backend].append(float(secs))
                tokens = int(tokens_s)
                t0 = time.perf_counter()
                res = _workbench(["show", rid, "--tokens", "--tokenizer", str(model), "--db", str(db), "--json"], e)
                times[f"{backend}_cli"].append(time.perf_counter() - t0)
                if res.returncode != 0:
                    raise SystemExit(res.stderr[-2000:])
        med = {k: statistics.median(v) for k, v in times.items()}
        results[name] = {**{f"{k}_s": round(v, 3) for k, v in med.items()}, "tokens": tokens,
                         "speedup_in_process": round(med["transformers"] / med["fast"], 1),
                         "speedup_cli": round(med["transformers_cli"] / med["fast_cli"], 1)}
        print(f"{name:12} ({tokens} tokens): report in process {med['fast']:.3f}s fast vs {med['transformers']:.3f}s "
              f"transformers ({results[name]['speedup_in_process']}x); `show --tokens` {med['fast_cli']:.2f}s vs "
              f"{med['transformers_cli']:.2f}s ({results[name]['speedup_cli']}x)")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
