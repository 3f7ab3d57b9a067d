"""Benchmark: `workbench eval` of a verifiers SingleTurnEnv against verifiers' own `env.evaluate`, in one run.

Starts the instant OpenAI-compatible mock (workbench.testing.mock_openai, a fixed XML answer) in its own
process on 127.0.0.1, then measures, in alternating rounds on the same environment file
(tests/fixtures/verifiers_envs/vf_single.py: an XMLParser, a weighted rubric and a weight-0 metric),
  (a) verifiers: `env.evaluate(...)` with its chat-completions client over AsyncOpenAI, in its own process
      (tests/fixtures/verifiers_envs/vf_reference.py); rollouts/s over the evaluate call alone (the env
      loaded, the dataset built),
  (b) `workbench eval ENV` as a subprocess into a fresh SQLite store: rollouts/s is the run's (from before
      the first request to the last commit), every call recorded with its trace,
and prints the medians and their ratio (the median of each round's workbench/verifiers ratio). Run:
python scripts/bench_verifiers.py [--rollouts 2000] [-r 4] [-c 64] [--repeat 3] [--json]
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
ENV = ROOT / "tests" / "fixtures" / "verifiers_envs" / "vf_single.py"
REFERENCE = ROOT / "tests" / "fixtures" / "verifiers_envs" / "vf_reference.py"
REPLY = "<think>adding</think>\n<answer>3</answer>"


def start_mock() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "workbench.testing.mock_openai", "--mode", "instant", "--reply",
                             REPLY, "--port", "0"], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"mock server failed to start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def run_verifiers(base_url: str, n: int, r: int, c: int) -> tuple[float, float]:
    """verifiers' own evaluate: (rollouts/s, mean reward)."""
    from workbench.frameworks.legacy_source import DEFAULT
    from workbench.frameworks.verifiers_legacy import framework

    python = framework(DEFAULT).ensure()  # verifiers 0.3 lives in its own environment, as Workbench runs it
    cmd = [str(python), str(REFERENCE), str(ENV), base_url, str(n), str(r), str(c), orjson.dumps({"n": n}).decode()]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"verifiers evaluate failed ({out.returncode}): {out.stderr[-2000:]}")
    res = orjson.loads(out.stdout.strip().splitlines()[-1])
    rewards = [o["reward"] for o in res["outputs"]]
    if len(rewards) != n * r:
        raise SystemExit(f"verifiers evaluate made {len(rewards)} rollouts, not {n * r}")
    return len(rewards) / res["wall_s"], statistics.fmean(rewards)


def run_workbench(base_url: str, n: int, r: int, c: int, db: Path) -> tuple[float, float, float]:
    """`workbench eval`: (rollouts/s of the run, rollouts/s with the process start, mean reward)."""
    cmd = [sys.executable, "-m", "workbench.cli", "eval", str(ENV), "-a", orjson.dumps({"n": n}).decode(), "-n", str(n),
           "-r", str(r), "-c", str(c), "--base-url", base_url, "-m", "mock-model", "--db", str(db), "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"workbench eval failed ({out.returncode}): {out.stderr[-2000:]}")
    s = orjson.loads(out.stdout.strip().splitlines()[-1])
    if s["rollouts"] != n * r or s["errors"]:
        raise SystemExit(f"workbench eval did not complete cleanly: {s}")
    return s["rollouts_per_s"], s["rollouts"] / wall, s["mean_reward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=2000)
    ap.add_argument("-r", type=int, default=4, help="rollouts per task")
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of verifiers and workbench")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    n = max(1, a.rollouts // a.r)
    mock, base_url = start_mock()
    res: dict[str, list[float]] = {"verifiers": [], "workbench": [], "workbench_with_startup": [], "ratio": []}
    rewards: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.repeat):
                order = ["verifiers", "workbench"] if i % 2 == 0 else ["workbench", "verifiers"]
                got: dict[str, float] = {}
                for key in order:
                    if key == "verifiers":
                        got[key], rewards[key] = run_verifiers(base_url, n, a.r, a.concurrency)
                    else:
                        got[key], start, rewards[key] = run_workbench(base_url, n, a.r, a.concurrency,
                                                                      Path(tmp) / f"wb{i}.db")
                        res["workbench_with_startup"].append(start)
                    res[key].append(got[key])
                res["ratio"].append(got["workbench"] / got["verifiers"])
    finally:
        mock.terminate()
        mock.wait(10)
    if abs(rewards["verifiers"] - rewards["workbench"]) > 1e-9:
        raise SystemExit(f"the mean rewards differ: verifiers {rewards['verifiers']}, workbench {rewards['workbench']}")
    med = {k: statistics.median(v) for k, v in res.items()}
    if a.json:
        print(orjson.dumps({"rollouts": n * a.r, "concurrency": a.concurrency, "median": med, "rounds": res,
                            "mean_reward": rewards["workbench"]}).decode())
        return
    print(f"{n * a.r} rollouts ({n} tasks x {a.r}), concurrency {a.concurrency}, {a.repeat} rounds; "
          f"mean reward {rewards['workbench']:.4f} on both")
    print(f"  verifiers env.evaluate        {med['verifiers']:9.1f} rollouts/s")
    print(f"  workbench eval (into SQLite)  {med['workbench']:9.1f} rollouts/s   "
          f"({med['workbench_with_startup']:.1f}/s with the process start)")
    print(f"  workbench / verifiers         {med['ratio']:9.2f}x  (median of the rounds' ratios)")


if __name__ == "__main__":
    main()
