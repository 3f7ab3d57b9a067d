"""Benchmark: `workbench eval` end to end into SQLite against the bare-client ceiling, in one run.

Starts the instant OpenAI-compatible mock (workbench.testing.mock_openai) in its own process on
127.0.0.1, then measures, in alternating rounds,
  (a) the ceiling: a bare aiohttp client loop (same concurrency, the default asyncio event loop)
      posting chat requests to it,
  (b) `workbench eval ENV` as a subprocess, end to end into a fresh SQLite store (its rollouts/s is
      the run's: from before the first request to the last commit; the process start is reported
      separately),
  (c) for reference, the same bare loop on uvloop, the event loop `workbench eval` runs on,
and prints them and their ratios: the median of each round's eval/ceiling ratio (the headline; the
machine's speed drifts between rounds, a round's two figures are taken seconds apart) and the best
eval over the best ceiling. ``--compare CHECKOUT`` runs another checkout's eval in the same rounds
(an A/B on the same machine minutes apart). Run:
python scripts/bench_eval.py [--rollouts 8000] [-c 64] [--repeat 5] [--compare DIR] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent


def start_mock(mode: str = "arithmetic", *flags: str) -> tuple[subprocess.Popen[str], str]:
    """The mock OpenAI server in ``mode`` (with more ``flags``) on a free port: (its process, its base URL)."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench.testing.mock_openai", "--mode", mode, "--port", "0",
                             *flags],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"mock server failed to start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def bare_client_on_uvloop(base_url: str, total: int, concurrency: int) -> float:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(bare_client(base_url, total, concurrency))


async def bare_client(base_url: str, total: int, concurrency: int) -> float:
    import aiohttp

    payload = orjson.dumps({"model": "mock-model", "max_tokens": 16, "temperature": 1.0,
                            "messages": [{"role": "system", "content": "Answer with a number."},
                                         {"role": "user", "content": "What is 3 + 4? Answer with just the number."}]})
    url = base_url + "/chat/completions"
    headers = {"Content-Type": "application/json"}
    left = total

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(url, data=payload, headers=headers) as resp:
                    orjson.loads(await resp.read())

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return total / (time.perf_counter() - t0)


def run_eval(base_url: str, env: str, rollouts: int, r: int, concurrency: int, db: Path, root: Path = ROOT) -> dict:
    n = rollouts // r
    cmd = [sys.executable, "-m", "workbench.cli", "eval", env, "-a", orjson.dumps({"n": n}).decode(), "-n", str(n),
           "-r", str(r), "-c", str(concurrency), "--base-url", base_url, "-m", "mock-model", "--db", str(db), "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"eval failed ({out.returncode}): {out.stderr[-2000:]}")
    summary = orjson.loads(out.stdout.strip().splitlines()[-1])
    summary["wall_s_with_startup"] = wall
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=8000)
    ap.add_argument("-r", type=int, default=4, help="rollouts per task")
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("--env", default="arithmetic")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of ceiling, eval and uvloop ceiling")
    ap.add_argument("--compare", type=Path, default=None, metavar="CHECKOUT",
                    help="also run another checkout's eval in every round (e.g. `git worktree add /tmp/base REV`), "
                         "in alternating order with this one's, and report its ratio too")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.compare is not None and not (a.compare / "workbench" / "cli").is_dir():
        raise SystemExit(f"--compare {a.compare}: not a Workbench checkout")
    mock, base_url = start_mock()
    results: dict[str, list[float]] = {"ceiling": [], "eval": [], "eval_with_startup": [], "ceiling_uvloop": []}
    if a.compare is not None:
        results["compare"] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(bare_client(base_url, 500, a.concurrency))  # warm-up
            for i in range(a.repeat):
                results["ceiling"].append(asyncio.run(bare_client(base_url, a.rollouts, a.concurrency)))
                trees = [("eval", ROOT)] + ([("compare", a.compare)] if a.compare is not None else [])
                for key, root in trees if i % 2 == 0 else trees[::-1]:
                    s = run_eval(base_url, a.env, a.rollouts, a.r, a.concurrency, Path(tmp) / f"{key}{i}.db", root)
                    if s["rollouts"] != a.rollouts // a.r * a.r or s["errors"]:
                        raise SystemExit(f"eval ({root}) did not complete cleanly: {s}")
                    results[key].append(s["rollouts_per_s"])
                    if key == "eval":
                        results["eval_with_startup"].append(s["rollouts"] / s["wall_s_with_startup"])
                results["ceiling_uvloop"].append(bare_client_on_uvloop(base_url, a.rollouts, a.concurrency))
    finally:
        mock.terminate()
        mock.wait()
    ceiling, ev, ev_start = max(results["ceiling"]), max(results["eval"]), max(results["eval_with_startup"])
    uv = max(results["ceiling_uvloop"])

    def paired(key: str, base: str = "ceiling") -> float:
        return statistics.median(e / c for e, c in zip(results[key], results[base], strict=True))

    report = {"rollouts": a.rollouts, "concurrency": a.concurrency, "rounds": a.repeat,
              "ceiling_req_per_s": round(ceiling, 1), "eval_rollouts_per_s": round(ev, 1),
              "eval_rollouts_per_s_with_startup": round(ev_start, 1), "ceiling_uvloop_req_per_s": round(uv, 1),
              "ratio": round(paired("eval"), 3), "ratio_best": round(ev / ceiling, 3),
              "ratio_with_startup": round(paired("eval_with_startup"), 3),
              "ratio_to_uvloop_ceiling": round(paired("eval", "ceiling_uvloop"), 3),
              "rounds_detail": {k: [round(x, 1) for x in v] for k, v in results.items()}}
    if a.compare is not None:
        report["compare"] = str(a.compare)
        report["compare_ratio"] = round(paired("compare"), 3)
        report["compare_eval_rollouts_per_s"] = round(max(results["compare"]), 1)
    if a.json:
        print(orjson.dumps(report).decode())
    else:
        print(f"bare aiohttp ceiling        {ceiling:8.1f} req/s   (best of {a.repeat}; c={a.concurrency}, "
              f"{a.rollouts} requests)")
        print(f"workbench eval {a.env:12s} {ev:8.1f} rollouts/s into SQLite   ratio {report['ratio']:.2f} "
              f"(median of the rounds' ratios; best/best {report['ratio_best']:.2f})")
        print(f"  including process start   {ev_start:8.1f} rollouts/s            ratio {report['ratio_with_startup']:.2f}")
        print(f"bare aiohttp on uvloop      {uv:8.1f} req/s   eval/this ratio {report['ratio_to_uvloop_ceiling']:.2f} "
              "(reference: eval runs on uvloop)")
        if a.compare is not None:
            print(f"eval of {a.compare}  {report['compare_eval_rollouts_per_s']:8.1f} rollouts/s   "
                  f"ratio {report['compare_ratio']:.2f} (same rounds, alternating order)")


if __name__ == "__main__":
    main()
