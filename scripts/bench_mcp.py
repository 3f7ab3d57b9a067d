"""Benchmark: what MCP toolsets (wb.MCPTools) cost a run, on this machine, in one run.

Uses the stateful SDK test server (tests/fixtures/mcp_servers/counter_server.py) and the real code paths:
  1. added latency of one tool call: the same trivial tool (``increment``) called N times through
     ``Toolbox.call`` as (a) a plain Python function, (b) an MCP stdio server, (c) the same server over
     streamable HTTP; (b) and (c) go through ``RunToolsets`` / ``MCPSessions.call_for_model`` as in a run.
     Goal (the issue's): under 2 ms p50 added over the plain function.
  2. per-rollout server start cost: (a) unpooled, a stdio server's start + initialize + list_tools on the
     host (``ServerHandle.start(host_connector(...))``) and inside a Local (bubblewrap) sandbox through the
     relay (``sandbox_connector``); (b) pooled (``per_rollout=True, sandboxed=False, warm=W``): how long a
     rollout waits in ``for_rollout`` when rollouts arrive at concurrency C with ``--model-s`` of simulated
     model time each, and the rate at which the warm pool starts servers back to back.
     Goal (the issue's): a pooled per-rollout server costs under 20 ms per rollout.
  3. rollouts/s of ``workbench eval support_desk`` (a subprocess, fresh SQLite) against the instant mock
     (no tool calls), and against a ``--by-turn`` scripted mock whose first reply calls ``find_customer``
     (one MCP call per rollout; the env's CRM server runs per rollout in a Local sandbox).
Runs on uvloop, the event loop ``workbench eval`` runs on. Run:
python scripts/bench_mcp.py [--repeat 3] [--calls 2000] [--parts 1,2,3] [--quick] [--json]
(on 2 cores: part 1 ~70 s, part 2 ~55 s, part 3 ~3 min; `--parts 1,2` runs some of them)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_proxy import _spawn  # noqa: E402 (the mock-server helper of the other benchmarks)

COUNTER = ROOT / "tests" / "fixtures" / "mcp_servers" / "counter_server.py"
CALL = {"id": "c1", "type": "function", "function": {"name": "increment", "arguments": '{"by": 1}'}}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def _rollout(rid: str = "bench") -> Any:
    import workbench as wb
    from workbench.records.rollout import Rollout

    return Rollout(id=rid, task=wb.Task(prompt="x"), sample_index=0, client=None, base_url="", model="mock-model",
                   params={})


def _counter(**kw: Any) -> Any:
    import workbench as wb

    if "url" in kw:
        return wb.MCPTools(name="counter", **kw)
    return wb.MCPTools(command=[sys.executable, str(COUNTER)], name="counter", **kw)


# -- 1. latency of one call ----------------------------------------------------------------------------
async def _timed(call: Any, n: int, budget_s: float) -> list[float]:
    """Latencies of ``call()``: ``n`` calls, or fewer when they take more than ``budget_s`` in all."""
    for _ in range(min(5, n)):  # warm-up
        await call()
    out: list[float] = []
    end = time.perf_counter() + budget_s
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t0)
        if t0 > end:
            break
    return out


async def latency_round(n: int, http_url: str, budget_s: float) -> dict[str, list[float]]:
    """Per-call seconds: ``plain``, ``stdio``, ``http`` (through ``Toolbox.call``) and ``stdio_sdk``,
    ``http_sdk`` (the SDK's ``ClientSession.call_tool`` on the same session: the floor under Workbench)."""
    from workbench.authoring.toolbox import Toolbox
    from workbench.rollouts.mcp_sessions import RunToolsets

    count = {"n": 0}

    def increment(by: int = 1) -> int:
        """Add `by` to the counter; returns the new value."""
        count["n"] += by
        return count["n"]

    def through(toolbox: Any, rollout: Any) -> Any:
        async def call() -> None:
            msg = await toolbox.call(rollout, CALL)
            assert not str(msg["content"]).startswith("Error"), msg
            rollout.state.pop("mcp_calls", None)  # a run's rollout records tens of calls, not thousands

        return call

    out = {"plain": await _timed(through(Toolbox([increment], "ToolLoop"), _rollout()), n, budget_s)}
    for key, spec in (("stdio", _counter()), ("http", _counter(url=http_url))):
        run = await RunToolsets.open([spec], [], sandboxes=None, env_dir=None, concurrency=1)
        try:
            rollout = _rollout()
            rollout.mcp = await run.for_rollout(rollout)
            out[key] = await _timed(through(Toolbox([spec], "ToolLoop"), rollout), n, budget_s)
            session = run.shared[0].session
            out[key + "_sdk"] = await _timed(lambda s=session: s.call_tool("increment", {"by": 1}), n, budget_s)
            await rollout.mcp.close()
        finally:
            await run.close()
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_counter() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(COUNTER), "--http", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the HTTP counter server did not start")


# -- 2. server start cost ------------------------------------------------------------------------------
async def cold_host(k: int) -> dict[str, list[float]]:
    """Unpooled host starts: exec'd (``host_connector``), and forked from the zygote the warm pool uses."""
    from workbench.rollouts.mcp_transport import ServerHandle, forked_connector, host_connector
    from workbench.rollouts.mcp_zygote import Zygote

    spec = _counter(per_rollout=True, sandboxed=False)
    out: dict[str, list[float]] = {"exec": [], "exec_close": [], "fork": [], "fork_close": []}
    zygote = await Zygote(stderr=None).start()
    try:
        for _ in range(k):
            for key in ("exec", "fork"):
                h = ServerHandle(spec)
                connect = host_connector(spec, h, None) if key == "exec" else forked_connector(spec, h, zygote, None)
                t0 = time.perf_counter()
                await h.start(connect)
                t1 = time.perf_counter()
                await h.close()
                out[key].append(t1 - t0)
                out[key + "_close"].append(time.perf_counter() - t1)
    finally:
        await zygote.close()
    return out


async def cold_sandbox(k: int) -> dict[str, list[float]]:
    import workbench as wb
    from workbench.rollouts.mcp_transport import ServerHandle, install_relay, sandbox_connector

    spec = _counter(per_rollout=True, sandboxed=True)
    pool = await wb.Local(binds=spec.host_mounts()).pool(run_id="bench-mcp", size=2).start()
    out: dict[str, list[float]] = {"acquire": [], "start": [], "close": []}
    try:
        assert pool.bridge_dir is not None
        install_relay(pool.bridge_dir)
        for i in range(k + 1):
            t0 = time.perf_counter()
            sb = await pool.acquire(f"bench-{i}", None)
            t1 = time.perf_counter()
            h = ServerHandle(spec, "sandbox")
            await h.start(sandbox_connector(spec, h, sb, pool.bridge_dir))
            t2 = time.perf_counter()
            await h.close()
            await sb.close()
            if i:  # the first one pays for the pool's warm-up
                out["acquire"].append(t1 - t0)
                out["start"].append(t2 - t1)
                out["close"].append(time.perf_counter() - t2)
    finally:
        await pool.close()
    return out


async def pooled(rollouts: int, concurrency: int, warm: int, model_s: float) -> dict[str, Any]:
    """Rollouts at ``concurrency``, each: take its server (timed), one call, ``model_s`` of model time, close.
    With ``model_s`` 0 the rollouts/s is the rate at which the warm pool can start servers back to back."""
    from workbench.rollouts.mcp_sessions import RunToolsets

    spec = _counter(per_rollout=True, sandboxed=False, warm=warm)
    run = await RunToolsets.open([spec], [], sandboxes=None, env_dir=None, concurrency=concurrency)
    waits: list[float] = []
    left = rollouts
    try:
        while run.warm[0].ready.qsize() < warm:  # the run's start: the pool fills before the first rollout
            await asyncio.sleep(0.05)

        async def worker(w: int) -> None:
            nonlocal left
            while left > 0:
                left -= 1
                r = _rollout(f"r{left}")
                t0 = time.perf_counter()
                r.mcp = await run.for_rollout(r)
                waits.append(time.perf_counter() - t0)
                # a fresh server; the SDK's own call, so this times the pool, not Workbench's call path (part 1)
                assert (await r.mcp["counter"].call_tool("increment", {"by": 1})).structured_content == {"result": 1}
                await asyncio.sleep(model_s)
                await r.mcp.close()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall = time.perf_counter() - t0
    finally:
        await run.close()
    return {"waits": waits, "rollouts_per_s": rollouts / wall}


# -- 3. workbench eval support_desk -------------------------------------------------------------------
def start_mock(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc, port, _ = _spawn(["-m", "workbench.testing.mock_openai", "--port", "0", *args])
    return proc, f"http://127.0.0.1:{port}/v1"


def run_eval(base_url: str, n: int, c: int, db: Path, env_args: str = "{}") -> dict[str, Any]:
    cmd = [sys.executable, "-m", "workbench.cli", "eval", "support_desk", "--base-url", base_url, "-m", "mock-model",
           "-n", str(n), "-c", str(c), "-a", env_args, "--json"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "WORKBENCH_DB": str(db)})
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"eval failed ({out.returncode}): {out.stderr[-2000:]}")
    s = orjson.loads(out.stdout.strip().splitlines()[-1])
    if s["rollouts"] != n or s["errors"]:
        raise SystemExit(f"eval did not complete cleanly: {s}")
    s["wall_s_with_startup"] = wall
    return s


def eval_rounds(repeat: int, n: int, c: int) -> dict[str, list[float]]:
    script = [{"tool_calls": [{"id": "t1", "type": "function", "function": {
        "name": "find_customer", "arguments": '{"email": "ana@example.com"}'}}]}, "Thanks, that is sorted."]
    mocks = {"instant": start_mock("--mode", "instant"),
             "one_call": start_mock("--mode", "script", "--by-turn", "--script", orjson.dumps(script).decode())}
    # (mock, env args): the env as shipped (a server per rollout in its sandbox), and on the host (zygote)
    cases = {"instant": ("instant", "{}"), "one_call": ("one_call", "{}"),
             "one_call_host": ("one_call", '{"sandboxed": false}')}
    res: dict[str, list[float]] = {k: [] for k in cases}
    res.update({k + "_with_startup": [] for k in cases})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(repeat):
                for key, (mock, env_args) in cases.items():
                    s = run_eval(mocks[mock][1], n, c, Path(tmp) / f"{key}{i}.db", env_args)
                    res[key].append(s["rollouts_per_s"])
                    res[key + "_with_startup"].append(n / s["wall_s_with_startup"])
    finally:
        for p, _ in mocks.values():
            p.terminate()
            p.wait()
    return res


# -- report ---------------------------------------------------------------------------------------------
def _loop_run(coro: Any) -> Any:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def part_latency(a: argparse.Namespace) -> dict[str, Any]:
    med = statistics.median
    kinds = ("plain", "stdio", "stdio_sdk", "http", "http_sdk")
    lat: dict[str, dict[str, list[float]]] = {k: {"p50": [], "p95": [], "n": []} for k in kinds}
    http, url = start_http_counter()
    try:
        for _ in range(a.repeat):
            for key, xs in _loop_run(latency_round(a.calls, url, a.call_budget_s)).items():
                lat[key]["n"].append(len(xs))
                lat[key]["p50"].append(med(xs) * 1e3)
                lat[key]["p95"].append(pct(xs, 0.95) * 1e3)
    finally:
        http.terminate()
        http.wait()
    added = {k: round(med([m - p for m, p in zip(lat[k]["p50"], lat["plain"]["p50"], strict=True)]), 3)
             for k in kinds[1:]}
    added95 = {k: round(med([m - p for m, p in zip(lat[k]["p95"], lat["plain"]["p95"], strict=True)]), 3)
               for k in kinds[1:]}
    r = {"call_p50_ms": {k: round(med(v["p50"]), 4) for k, v in lat.items()},
         "call_p95_ms": {k: round(med(v["p95"]), 4) for k, v in lat.items()},
         "calls_timed": {k: int(med(v["n"])) for k, v in lat.items()}, "added_p50_ms": added, "added_p95_ms": added95,
         "goal_added_p50_under_2ms": max(added["stdio"], added["http"]) < 2.0}
    c, p95, n = r["call_p50_ms"], r["call_p95_ms"], r["calls_timed"]
    print(f"1. one `increment` call (up to {a.calls} calls or {a.call_budget_s:g} s per series, x {a.repeat} rounds, "
          "medians; uvloop)")
    print(f"   {'tool':<32} {'calls':>6} {'p50 ms':>9} {'p95 ms':>9} {'added p50':>10} {'added p95':>10}")
    print(f"   {'plain fn, Toolbox.call':<32} {n['plain']:>6} {c['plain']:>9.4f} {p95['plain']:>9.4f}")
    for k, name in (("stdio", "MCP stdio, Toolbox.call"), ("stdio_sdk", "  SDK call_tool alone (floor)"),
                    ("http", "MCP HTTP, Toolbox.call"), ("http_sdk", "  SDK call_tool alone (floor)")):
        print(f"   {name:<32} {n[k]:>6} {c[k]:>9.4f} {p95[k]:>9.4f} {added[k]:>10.3f} {added95[k]:>10.3f}")
    print(f"   goal < 2 ms p50 added: {'MET' if r['goal_added_p50_under_2ms'] else 'NOT MET'}", flush=True)
    return r


def part_start(a: argparse.Namespace) -> dict[str, Any]:
    med = statistics.median
    host: dict[str, list[float]] = {"exec": [], "exec_close": [], "fork": [], "fork_close": []}
    sbx: dict[str, list[float]] = {"acquire": [], "start": [], "close": []}
    waits: list[float] = []
    rates, burst = [], []
    for _ in range(a.repeat):
        for k, v in _loop_run(cold_host(a.starts)).items():
            host[k] += v
        for k, v in _loop_run(cold_sandbox(a.starts)).items():
            sbx[k] += v
        p = _loop_run(pooled(a.rollouts, a.concurrency, a.warm, a.model_s))
        waits += p["waits"]
        rates.append(p["rollouts_per_s"])
        burst.append(_loop_run(pooled(a.rollouts, a.concurrency, a.warm, 0.0))["rollouts_per_s"])
    r: dict[str, Any] = {**{f"host_{k}_ms": round(med(v) * 1e3, 1) for k, v in host.items()},
                         **{f"sandbox_{k}_ms": round(med(v) * 1e3, 1) for k, v in sbx.items()}}
    pl = r["pooled"] = {"concurrency": a.concurrency, "warm": a.warm, "model_s": a.model_s, "rollouts": a.rollouts,
                        "wait_p50_ms": round(med(waits) * 1e3, 2), "wait_p95_ms": round(pct(waits, 0.95) * 1e3, 2),
                        "rollouts_per_s": round(med(rates), 2),
                        "demand_per_s": round(a.concurrency / a.model_s, 2) if a.model_s else None,
                        "sustained_starts_per_s": round(med(burst), 2)}
    r["goal_pooled_wait_p50_under_20ms"] = pl["wait_p50_ms"] < 20.0
    r["goal_pooled_wait_p95_under_20ms"] = pl["wait_p95_ms"] < 20.0
    print(f"2. per-rollout server start (median of {a.starts} x {a.repeat})")
    print(f"   host stdio, unpooled, exec'd: start+initialize+list_tools {r['host_exec_ms']:.1f} ms, "
          f"close {r['host_exec_close_ms']:.1f} ms")
    print(f"   host stdio, unpooled, forked from the zygote: {r['host_fork_ms']:.1f} ms, "
          f"close {r['host_fork_close_ms']:.1f} ms")
    print(f"   Local sandbox (bwrap): acquire {r['sandbox_acquire_ms']:.1f} ms + start "
          f"{r['sandbox_start_ms']:.1f} ms, close {r['sandbox_close_ms']:.1f} ms")
    print(f"   pooled (warm={a.warm}, c={a.concurrency}, {a.model_s * 1000:.0f} ms model time/rollout): wait in "
          f"for_rollout p50 {pl['wait_p50_ms']:.2f} ms, p95 {pl['wait_p95_ms']:.2f} ms; "
          f"{pl['rollouts_per_s']:.1f} rollouts/s (demand {pl['demand_per_s']}/s)")
    print(f"   the pool starts servers back to back at {pl['sustained_starts_per_s']:.1f}/s on {os.cpu_count()} cpus")
    print(f"   goal < 20 ms per pooled rollout: p50 {'MET' if r['goal_pooled_wait_p50_under_20ms'] else 'NOT MET'}, "
          f"p95 {'MET' if r['goal_pooled_wait_p95_under_20ms'] else 'NOT MET'}", flush=True)
    return r


def part_eval(a: argparse.Namespace) -> dict[str, Any]:
    med = statistics.median
    ev = eval_rounds(a.repeat, a.eval_n, a.eval_c)
    e = {"n": a.eval_n, "c": a.eval_c, **{k: round(med(v), 2) for k, v in ev.items()},
         "rounds_detail": {k: [round(x, 2) for x in v] for k, v in ev.items()}}
    print(f"3. workbench eval support_desk -n {a.eval_n} -c {a.eval_c}, rollouts/s (median of {a.repeat}; "
          "in brackets: including the process start)")
    print(f"   instant mock (no tool calls)    {e['instant']:7.2f}  ({e['instant_with_startup']:.2f})")
    print(f"   scripted: one find_customer     {e['one_call']:7.2f}  ({e['one_call_with_startup']:.2f})")
    print(f"   the same, servers on the host   {e['one_call_host']:7.2f}  ({e['one_call_host_with_startup']:.2f})"
          "  (sandboxed=false: forked from the zygote)", flush=True)
    return {"eval": e}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of each measurement; medians are reported")
    ap.add_argument("--calls", type=int, default=2000, help="tool calls per latency round")
    ap.add_argument("--call-budget-s", type=float, default=4.0,
                    help="stop a latency series early after this many seconds (a slow path gets fewer calls)")
    ap.add_argument("--starts", type=int, default=6, help="unpooled server starts per round")
    ap.add_argument("--rollouts", type=int, default=32, help="simulated rollouts per pooled round")
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--warm", type=int, default=4, help="the warm pool's size (MCPTools(warm=...))")
    ap.add_argument("--model-s", type=float, default=0.2, help="simulated model time per rollout, seconds")
    ap.add_argument("--eval-n", type=int, default=28)
    ap.add_argument("--eval-c", type=int, default=8)
    ap.add_argument("--parts", default="1,2,3", help="which parts to run (1 latency, 2 start cost, 3 eval)")
    ap.add_argument("--quick", action="store_true", help="a smoke run: one round, few iterations")
    ap.add_argument("--json", action="store_true", help="the figures as one JSON line after the table")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.calls, a.starts, a.rollouts, a.eval_n = 1, 300, 3, 12, 8
        a.call_budget_s = min(a.call_budget_s, 2.0)
    report: dict[str, Any] = {"rounds": a.repeat, "cpus": os.cpu_count()}
    for part, fn in (("1", part_latency), ("2", part_start), ("3", part_eval)):
        if part in a.parts.split(","):
            t0 = time.perf_counter()
            report.update(fn(a))
            report[f"part{part}_s"] = round(time.perf_counter() - t0, 1)
    if a.json:
        print(orjson.dumps(report).decode())


if __name__ == "__main__":
    main()
