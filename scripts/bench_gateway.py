"""Benchmark: `workbench gateway` against calling the same upstream directly, in one run.

Processes on 127.0.0.1: the instant mock upstream, the gateway (`workbench gateway`, its own process, with its
own config and store in a temporary folder: the mock registered as a model, one gateway key), and this client.
For chat completions, whole and streamed, measures (a) p50/p95 latency of sequential requests, the gateway's
against the direct call's (the added latency), (b) requests/s at concurrency 64 against the direct call's, each
with recording on (every exchange written to the store) and off (`--record-rate 0`); then (c) the gateway's
resident memory with 1,000 streamed calls open at once (an upstream that holds them), against its memory idle.
A bare forwarder is measured beside them: an aiohttp process (on the same event loop the gateway runs on) that
passes each request's bytes to the upstream and its answer back, streamed as it comes, and does nothing else, so
the figures say what any second process hop costs on this machine and what the gateway adds on top of that.
Run: python scripts/bench_gateway.py [--requests 4000] [--sequential 1000] [-c 64] [--streams 1000] [--rounds 3]
     [--json]
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

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BODY = {"model": "support", "max_tokens": 16, "messages": [{"role": "user", "content": "What is 3 + 4?"}]}


def _ready(what: str, *argv: str) -> tuple[subprocess.Popen[str], str]:
    """Start a server that prints ``READY <port>``; it and its base URL."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"the {what} did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}/v1"


def _mock(*flags: str) -> tuple[subprocess.Popen[str], str]:
    return _ready("mock", "-m", "workbench.testing.mock_openai", "--port", "0", *flags)


def _cli(env: dict[str, str], *args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=env, capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    if p.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args)}: {p.stderr.strip()}")
    return p.stdout


def _gateway(env: dict[str, str], *args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "gateway", "--port", "0", "--json",
                             "--route", "support=up", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip():
        proc.kill()
        raise SystemExit("the gateway did not start")
    return proc, json.loads(line)["base_url"]


def serve_forwarder(upstream: str) -> None:
    """The bare forwarder (see the module docstring); prints ``READY <port>``, serves until killed."""
    import aiohttp
    from aiohttp import web

    async def main() -> None:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            for attempt in (1, 2):  # a pooled connection the upstream closed is tried again once, as clients do
                try:
                    return await forward(request, body)
                except aiohttp.ClientConnectionError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        async def forward(request: web.Request, body: bytes) -> web.StreamResponse:
            async with session.post(upstream + "/chat/completions", data=body,
                                    headers={"Content-Type": "application/json"}) as up:
                if "text/event-stream" not in up.headers.get("Content-Type", ""):
                    return web.Response(body=await up.read(), status=up.status, content_type="application/json")
                out = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
                await out.prepare(request)
                async for chunk in up.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"READY {site._server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())


def _forwarder(upstream: str) -> tuple[subprocess.Popen[str], str]:
    return _ready("bare forwarder", __file__, "--serve-forwarder", upstream)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def sequential(url: str, n: int, payload: bytes, key: str) -> list[float]:
    import aiohttp

    out = []
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.post(url, data=payload, headers=headers) as r:
                await r.read()
                assert r.status == 200, await r.text()
            out.append(time.perf_counter() - t0)
    return out


async def concurrent(url: str, n: int, c: int, payload: bytes, key: str) -> float:
    import aiohttp

    left = n
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as s:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with s.post(url, data=payload, headers=headers) as r:
                    await r.read()
                    if r.status != 200:  # only answers count
                        raise SystemExit(f"{url} answered {r.status}: {await r.text()}")

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        return n / (time.perf_counter() - t0)


async def open_streams(url: str, n: int, key: str, held: str, gateway_pid: int) -> tuple[float, float]:
    """The gateway's memory idle, then with ``n`` streamed calls open at once (the upstream holds them)."""
    import aiohttp

    idle = _rss_mb(gateway_pid)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    payload = orjson.dumps({**BODY, "stream": True})
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=n + 8),
                                     timeout=aiohttp.ClientTimeout(total=600)) as s:
        async def one() -> None:
            async with s.post(url, data=payload, headers=headers) as r:
                await r.read()

        calls = [asyncio.ensure_future(one()) for _ in range(n)]
        root = held.removesuffix("/v1")
        while True:  # until every call waits at the upstream
            async with s.get(f"{root}/stats") as r:
                if int((await r.json())["requests"]) >= n:
                    break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        busy = _rss_mb(gateway_pid)
        async with s.post(f"{root}/release") as r:
            await r.read()
        await asyncio.gather(*calls)
    return idle, busy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--sequential", type=int, default=1000)
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every measurement; medians are reported")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve-forwarder", metavar="UPSTREAM", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_forwarder:
        serve_forwarder(a.serve_forwarder)
        return
    home = Path(tempfile.mkdtemp(prefix="wb-bench-gateway-"))
    env = {**os.environ, "XDG_CONFIG_HOME": str(home / "config"), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CACHE_HOME": str(home / "cache"), "WORKBENCH_DB": str(home / "store.db")}
    env.pop("VIRTUAL_ENV", None)
    mock, upstream = _mock("--mode", "instant")
    _cli(env, "models", "add", "up", "--base-url", upstream, "--model-id", "mock-model")
    key = json.loads(_cli(env, "gateway", "keys", "add", "bench", "--json").strip().splitlines()[-1])["key"]
    gateways = {"recording": _gateway(env), "not recording": _gateway(env, "--record-rate", "0")}
    forwarder, forwarder_url = _forwarder(upstream)
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for stream in (False, True):
            payload = orjson.dumps({**BODY, "stream": stream})
            direct_payload = orjson.dumps({**BODY, "model": "mock-model", "stream": stream})
            targets = {"direct": (upstream + "/chat/completions", direct_payload),
                       "bare forwarder": (forwarder_url + "/chat/completions", direct_payload)}
            targets.update({name: (base + "/chat/completions", payload) for name, (_, base) in gateways.items()})
            for _ in range(a.rounds):
                for name, (url, body) in targets.items():
                    asyncio.run(sequential(url, 100, body, key))  # warm-up
                    lat = asyncio.run(sequential(url, a.sequential, body, key))
                    rps = asyncio.run(concurrent(url, a.requests, a.concurrency, body, key))
                    got = results.setdefault(f"{name}{' streamed' if stream else ''}", {"p50": [], "p95": [], "rps": []})
                    got["p50"].append(statistics.median(lat) * 1000)
                    got["p95"].append(sorted(lat)[int(0.95 * (len(lat) - 1))] * 1000)
                    got["rps"].append(rps)
    finally:
        for proc, _ in [*gateways.values(), (forwarder, "")]:
            proc.terminate()
            proc.wait()
        mock.terminate()
        mock.wait()
    held, held_url = _mock("--mode", "instant", "--hold")
    _cli(env, "models", "add", "held", "--base-url", held_url, "--model-id", "mock-model")
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "gateway", "--port", "0", "--json",
                             "--route", "support=held"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, cwd=ROOT)
    assert proc.stdout is not None
    base = json.loads(proc.stdout.readline())["base_url"]
    try:
        idle, busy = asyncio.run(open_streams(base + "/chat/completions", a.streams, key, held_url, proc.pid))
    finally:
        proc.terminate()
        proc.wait()
        held.terminate()
        held.wait()
    med = statistics.median
    rows = []
    for name, got in results.items():
        if name.startswith("direct"):
            continue
        streamed = " streamed" if name.endswith("streamed") else ""
        direct = results[f"direct{streamed}"]
        bare = results[f"bare forwarder{streamed}"]
        rows.append({"through": name, "p50_ms": round(med(got["p50"]), 3),
                     "added_p50_ms": round(med([x - d for x, d in zip(got["p50"], direct["p50"], strict=True)]), 3),
                     "added_p95_ms": round(med([x - d for x, d in zip(got["p95"], direct["p95"], strict=True)]), 3),
                     "req_per_s": round(med(got["rps"]), 1),
                     "throughput_ratio": round(med([x / d for x, d in zip(got["rps"], direct["rps"], strict=True)]),
                                               3),
                     "of_bare_forwarder": round(med([x / b for x, b in zip(got["rps"], bare["rps"], strict=True)]), 3),
                     "direct_p50_ms": round(med(direct["p50"]), 3), "direct_req_per_s": round(med(direct["rps"]), 1)})
    memory = {"streams": a.streams, "idle_mb": round(idle, 1), "open_mb": round(busy, 1),
              "per_stream_kb": round((busy - idle) * 1024 / max(1, a.streams), 1)}
    if a.json:
        print(orjson.dumps({"rows": rows, "memory": memory, "concurrency": a.concurrency, "rounds": a.rounds}).decode())
        return
    print(f"chat completions, medians of {a.rounds} rounds; c={a.concurrency} for req/s")
    print(f"{'through':<30} {'p50 ms':>8} {'added p50':>10} {'added p95':>10} {'req/s':>8} {'ratio':>6} "
          f"{'of bare':>8} {'direct req/s':>13}")
    for r in rows:
        print(f"{r['through']:<30} {r['p50_ms']:>8.3f} {r['added_p50_ms']:>10.3f} {r['added_p95_ms']:>10.3f} "
              f"{r['req_per_s']:>8.0f} {r['throughput_ratio']:>6.2f} {r['of_bare_forwarder']:>8.2f} "
              f"{r['direct_req_per_s']:>13.0f}")
    print(f"memory: {memory['idle_mb']} MB idle, {memory['open_mb']} MB with {a.streams} streams open "
          f"({memory['per_stream_kb']} KB a stream)")
    print("goals: added p50 under 1 ms; at least 0.8 of direct req/s")


if __name__ == "__main__":
    main()
