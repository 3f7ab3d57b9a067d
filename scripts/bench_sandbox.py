"""Sandbox benchmark: sandboxed rollouts/s of the coding env and sandbox acquire latency, on both runtimes,
with the warm pool and cold (every rollout starts a fresh sandbox), with the exec agent and without it
(one bwrap / one docker exec per command: the baseline).

The model is the mock server in ``script`` mode. Its replies cycle across all rollouts, so every reply is
the same message (write the fix, then run the tests, as parallel tool calls) and the tool loop stops at
``max_turns=2``: each rollout makes 2 model calls, 4 tool calls (2 of them the test command) and is scored
with one more command (the hidden tests, the visible suite and the test-file listing, in one process),
whatever order the replies interleave in.

The machine is usually shared, so the configurations are measured alternately, ``--repeat`` times, and
the medians are reported with the load average before and after.

    python scripts/bench_sandbox.py                     # both runtimes, agent and baseline, warm and cold
    python scripts/bench_sandbox.py --runtimes local -n 64 -c 8 --agent on --json
    python scripts/bench_sandbox.py --cmd 'cat timefmt/duration.py'   # lighter commands: the sandbox's own cost
    python scripts/bench_sandbox.py --agent on --python both --pools warm  # warm Python against fresh interpreters
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import workbench_envs.coding as coding  # noqa: E402

import workbench as wb  # noqa: E402
from workbench.rollouts.client import ChatClient  # noqa: E402
from workbench.rollouts.engine import RolloutEngine  # noqa: E402
from workbench.store import Store  # noqa: E402

TASK = "durations"


def script(cmd: str) -> list[Any]:
    root = coding.TASKS_DIR / TASK / "solution"
    calls = [{"id": f"w{i}", "type": "function", "function": {"name": "write_file", "arguments": json.dumps(
        {"path": str(p.relative_to(root)), "content": p.read_text()})}} for i, p in enumerate(root.rglob("*.py"))]
    calls.append({"id": "r", "type": "function", "function": {"name": "run", "arguments": json.dumps(
        {"cmd": cmd})}})
    return [{"tool_calls": calls}]


def start_mock(cmd: str) -> tuple[subprocess.Popen[bytes], str]:
    p = subprocess.Popen([sys.executable, "-m", "workbench.testing.mock_openai", "--port", "0", "--mode", "script",
                          "--script", json.dumps(script(cmd))], stdout=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None
    line = p.stdout.readline().decode()
    assert line.startswith("READY"), line
    return p, f"http://127.0.0.1:{line.split()[1]}/v1"


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def make_runtime(kind: str, warm: bool, agent: bool = True, py: bool = False) -> Any:
    size = None if warm else 0
    return (wb.Local(timeout=30, pool_size=size, exec_agent=agent, warm_python=py) if kind == "local"
            else wb.Docker(timeout=30, pool_size=size, exec_agent=agent, warm_python=py))


async def _filled(pool: Any, want: int) -> None:
    """Let a warm pool fill before the clock starts, as it does while a run's first model calls are in flight."""
    for _ in range(400):
        idle = getattr(pool, "idle", [])
        if len(idle) >= want and not getattr(pool, "creating", 0):
            start = [s._agent_start for s in idle if getattr(s, "_agent_start", None) is not None]
            if start:
                await asyncio.gather(*start, return_exceptions=True)
            return
        await asyncio.sleep(0.05)


async def bench_rollouts(kind: str, warm: bool, n: int, c: int, base_url: str, tmp: Path, agent: bool = True,
                         py: bool = False) -> dict[str, Any]:
    env = coding.load_environment(tasks=[TASK], max_turns=2)
    env.runtime = make_runtime(kind, warm, agent, py)
    task = next(iter(env.tasks))
    store = Store(tmp / f"{kind}-{warm}-{agent}-{time.monotonic_ns()}.db")
    writer = store.writer()
    client = ChatClient(None, max_connections=c, request_timeout=120, max_retries=2)
    pool = await env.runtime.pool(run_id="bench", size=c).start()
    if warm:
        await _filled(pool, min(pool.size, n))
    async with client:
        engine = RolloutEngine(env=env, client=client, writer=writer, run_id="bench", model="mock-model",
                               base_url=base_url, rollouts_per_task=n, concurrency=c, timeout_s=300, sandboxes=pool)
        t0 = time.perf_counter()
        counters = await engine.run([task])
        wall = time.perf_counter() - t0
    await pool.close()
    writer.close()
    store.close()
    acq = pool.stats.acquire_s
    return {"runtime": kind, "agent": agent, "python": "warm" if py else "cold", "pool": "warm" if warm else "cold",
            "rollouts": counters.finished,
            "errors": counters.failed, "mean_reward": counters.reward_sum / max(1, counters.scored),
            "wall_s": round(wall, 2), "rollouts_per_s": round(counters.finished / wall, 2),
            "acquire_p50_ms": round(statistics.median(acq) * 1000, 1) if acq else None,
            "acquire_p95_ms": round(pct(acq, 0.95) * 1000, 1) if acq else None,
            "cold_starts": pool.stats.cold if warm else pool.stats.acquired}


async def bench_acquire(kind: str, warm: bool, k: int, agent: bool = True) -> dict[str, Any]:
    """Acquire (with the coding task's files seeded) and release, one at a time."""
    task = next(iter(coding.load_environment(tasks=[TASK]).tasks))
    pool = await make_runtime(kind, warm, agent).pool(size=2 if warm else 0).start()
    times = []
    for _ in range(k):
        if warm:
            for _ in range(200):  # the previous sandbox's reset runs in the background
                if len(getattr(pool, "idle", [])) >= 1:
                    break
                await asyncio.sleep(0.01)
        t0 = time.perf_counter()
        sb = await pool.acquire("bench", task)
        times.append(time.perf_counter() - t0)
        await sb.close()
    await pool.close()
    return {"runtime": kind, "agent": agent, "pool": "warm" if warm else "cold", "acquires": k,
            "p50_ms": round(statistics.median(times) * 1000, 1), "p95_ms": round(pct(times, 0.95) * 1000, 1)}


async def bench_exec(kind: str, c: int, k: int, agent: bool = True) -> dict[str, Any]:
    """Sandbox overhead alone: ``true`` in ``c`` sandboxes at once, ``k`` rounds."""
    async with make_runtime(kind, True, agent).pool(size=c) as pool:
        sbs = [await pool.acquire(f"x{i}") for i in range(c)]
        lat: list[float] = []

        async def one(sb: Any) -> None:
            t0 = time.perf_counter()
            r = await sb.exec("true")
            lat.append(time.perf_counter() - t0)
            assert r.ok, r

        await asyncio.gather(*(one(sb) for sb in sbs))  # warm-up
        lat.clear()
        t0 = time.perf_counter()
        for _ in range(k):
            await asyncio.gather(*(one(sb) for sb in sbs))
        wall = time.perf_counter() - t0
        for sb in sbs:
            await sb.close()
    return {"runtime": kind, "agent": agent, "concurrency": c, "execs": len(lat),
            "execs_per_s": round(len(lat) / wall, 1),
            "p50_ms": round(statistics.median(lat) * 1000, 1)}


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["bench"], r["runtime"], r["agent"], r.get("python"), r.get("pool"), r.get("concurrency"))


def medians(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration: the median of every number over the repeats (``runs``: how many)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(_key(r), []).append(r)
    out = []
    for rows in groups.values():
        row = dict(rows[0])
        for k, v in rows[0].items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                vals = [x[k] for x in rows if x.get(k) is not None]
                row[k] = round(statistics.median(vals), 2) if vals else None
        row["runs"] = len(rows)
        out.append(row)
    return out


def show(r: dict[str, Any]) -> str:
    head = f"{r['runtime']:6} {'agent' if r['agent'] else 'plain':5}"
    if r["bench"] == "exec":
        return f"{head} exec `true` x{r['concurrency']:<2}  {r['execs_per_s']:7.1f}/s  p50 {r['p50_ms']:6.1f} ms"
    if r["bench"] == "acquire":
        return f"{head} {r['pool']:4} acquire  p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms"
    return (f"{head} {r['python']:4}-py {r['pool']:4} rollouts {r['rollouts_per_s']:6.2f}/s  ({r['rollouts']} in {r['wall_s']} s, errors "
            f"{r['errors']}, reward {r['mean_reward']:.2f}, acquire p50 {r['acquire_p50_ms']} ms, cold starts "
            f"{r['cold_starts']})")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtimes", default="local,docker")
    ap.add_argument("--agent", choices=["both", "on", "off"], default="both",
                    help="with the exec agent, without it (the per-command baseline), or both, alternately")
    ap.add_argument("--pools", default="warm,cold")
    ap.add_argument("--python", choices=["both", "warm", "cold"], default="both",
                    help="python3 commands forked from a warm interpreter (warm_python=True), started fresh, or both")
    ap.add_argument("-n", type=int, default=64, help="rollouts per configuration")
    ap.add_argument("-c", type=int, default=8, help="concurrent rollouts")
    ap.add_argument("--acquires", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3, help="rounds over all configurations (medians reported)")
    ap.add_argument("--no-exec", action="store_true", help="skip the `true` exec benchmark")
    ap.add_argument("--cmd", default=coding.TEST_CMD,
                    help="the command the scripted model runs each turn (default: the test suite)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    agents = {"both": [False, True], "on": [True], "off": [False]}[a.agent]
    pythons = {"both": [False, True], "warm": [True], "cold": [False]}[a.python]
    pools = [p == "warm" for p in a.pools.split(",")]
    load0 = os.getloadavg()
    mock, url = start_mock(a.cmd)
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for _ in range(a.repeat):
                for kind in a.runtimes.split(","):
                    for agent in agents:
                        if not a.no_exec:
                            for c in (1, a.c):
                                results.append({"bench": "exec", **await bench_exec(kind, c, max(4, 64 // c), agent)})
                        for warm in pools:
                            results.append({"bench": "acquire", **await bench_acquire(kind, warm, a.acquires, agent)})
                            for py in pythons if agent else [False]:  # warm Python lives in the agent
                                results.append({"bench": "rollouts", **await bench_rollouts(
                                    kind, warm, a.n, a.c, url, Path(d), agent, py)})
    finally:
        mock.terminate()
        mock.wait()
    load1 = os.getloadavg()
    rows = medians(results)
    if a.json:
        for r in rows:
            print(json.dumps(r))
        print(json.dumps({"bench": "load", "before": load0, "after": load1, "cpus": os.cpu_count(), "repeat": a.repeat}))
        return
    print(f"medians of {a.repeat} alternating runs; load average {load0[0]:.1f} before, {load1[0]:.1f} after, "
          f"{os.cpu_count()} CPUs")
    for r in sorted(rows, key=lambda r: (r["runtime"], r["bench"], r.get("pool") or "", r["agent"])):
        print(show(r))


if __name__ == "__main__":
    asyncio.run(main())
