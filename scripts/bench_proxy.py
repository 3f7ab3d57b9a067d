"""Benchmark: interception-proxy overhead against direct calls to an instant upstream, in one run.

Three processes on 127.0.0.1: the instant mock upstream (token mode, like vLLM), the proxy (its
own process, recording every call into a rollout trace, as in a run), and this client.
For each API the proxy serves — chat completions, the Responses API, the Anthropic Messages API, each
translated to the same chat call upstream — measures (a) p50/p90 latency of sequential requests against
the direct chat call (the added latency), (b) throughput at concurrency 64 against the direct chat call;
and the same for the cheapest aiohttp forwarder (no parsing, no recording), what any proxy on this
stack and machine costs.
Run: python scripts/bench_proxy.py [--requests 4000] [--apis chat,responses,messages] [--stream] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _spawn(args: list[str]) -> tuple[subprocess.Popen[str], int, str]:
    """Start a server; its ``READY PORT [BASE_URL]`` line gives the port and, for the proxy, the rollout's URL."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise SystemExit(f"{args} failed to start: {line!r}")
    words = line.split()
    return proc, int(words[1]), words[2] if len(words) > 2 else ""


async def serve_proxy(upstream: str) -> None:
    """The proxy process: one registered rollout that every request records into."""
    import workbench as wb
    from workbench.records.rollout import Rollout
    from workbench.rollouts.client import ChatClient
    from workbench.rollouts.proxy import InterceptionProxy

    client = ChatClient(None, max_connections=128)
    params = {"logprobs": True, "return_token_ids": True, "temperature": 1.0}
    proxy = await InterceptionProxy(client, upstream, "mock-model", params).start()
    rollout = Rollout(id="bench", task=wb.Task(prompt="x"), sample_index=0, client=client,
                      base_url=proxy.url_for("bench"), model="mock-model", params=params)
    proxy.register(rollout)
    print(f"READY {proxy.port} {proxy.url_for('bench')}", flush=True)  # the URL holds the rollout's secret
    while True:  # keep the trace from growing without bound: a run records one rollout's calls
        await asyncio.sleep(0.5)
        rollout.calls.clear()
        rollout.trace = type(rollout.trace)()


async def serve_forwarder(upstream: str) -> None:
    """The cheapest aiohttp forwarder (no parsing, no recording): what any proxy on this stack costs."""
    import aiohttp
    from aiohttp import web

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=128))

    async def forward(request: web.Request) -> web.Response:
        async with session.post(upstream + "/chat/completions", data=await request.read(),
                                headers={"Content-Type": "application/json"}) as r:
            return web.Response(body=await r.read(), content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    print(f"READY {site._server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
    await asyncio.Event().wait()


SYSTEM, USER = "Answer with a number.", "What is 3 + 4? Answer with just the number."
#: The same conversation in each API: (route under /v1, body).
APIS = {
    "chat": ("/chat/completions", {"model": "mock-model", "max_tokens": 16, "messages": [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]}),
    "responses": ("/responses", {"model": "mock-model", "max_output_tokens": 16, "instructions": SYSTEM,
                                 "input": USER}),
    "messages": ("/messages", {"model": "mock-model", "max_tokens": 16, "system": SYSTEM,
                               "messages": [{"role": "user", "content": USER}]}),
}
PAYLOAD = orjson.dumps(APIS["chat"][1])


async def sequential(url: str, n: int, payload: bytes = PAYLOAD) -> list[float]:
    import aiohttp

    out = []
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            t0 = time.perf_counter()
            async with s.post(url, data=payload, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                assert r.status == 200, await r.text()
            out.append(time.perf_counter() - t0)
    return out


async def concurrent(url: str, n: int, c: int, payload: bytes = PAYLOAD) -> float:
    import aiohttp

    left = n
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=c)) as s:
        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with s.post(url, data=payload, headers={"Content-Type": "application/json"}) as r:
                    await r.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(c)))
        return n / (time.perf_counter() - t0)


def _measure(url: str, payload: bytes, a: argparse.Namespace) -> tuple[list[float], float]:
    asyncio.run(sequential(url, 100, payload))  # warm-up
    return asyncio.run(sequential(url, a.sequential, payload)), asyncio.run(
        concurrent(url, a.requests, a.concurrency, payload))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--sequential", type=int, default=1000)
    ap.add_argument("-c", "--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every measurement; medians are reported")
    ap.add_argument("--apis", default="chat,responses,messages")
    ap.add_argument("--stream", action="store_true", help="streamed calls (each API's own events)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--serve-proxy", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--serve-forwarder", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve_proxy or a.serve_forwarder:
        import uvloop

        uvloop.run(serve_proxy(a.serve_proxy) if a.serve_proxy else serve_forwarder(a.serve_forwarder))
        return
    apis = [x for x in a.apis.split(",") if x]
    unknown = [x for x in apis if x not in APIS]
    if unknown:
        raise SystemExit(f"unknown API {unknown[0]!r}; choose from {', '.join(APIS)}")
    mock, mport, _ = _spawn(["-m", "workbench.testing.mock_openai", "--mode", "instant", "--tokens", "--port", "0"])
    upstream = f"http://127.0.0.1:{mport}/v1"
    proxy, _, rollout_url = _spawn([str(Path(__file__)), "--serve-proxy", upstream])
    forwarder, fport, _ = _spawn([str(Path(__file__)), "--serve-forwarder", upstream])
    direct = orjson.dumps({**APIS["chat"][1], "stream": a.stream})
    targets = {"direct": (upstream + "/chat/completions", direct)}
    if not a.stream:  # the forwarder passes bytes through: a stream would be the same bytes
        targets["bare-forwarder"] = (f"http://127.0.0.1:{fport}/v1/chat/completions", direct)
    for api in apis:
        route, body = APIS[api]
        targets[api] = (f"{rollout_url}{route}", orjson.dumps({**body, "stream": a.stream}))
    p50: dict[str, list[float]] = {k: [] for k in targets}
    p90: dict[str, list[float]] = {k: [] for k in targets}
    tput: dict[str, list[float]] = {k: [] for k in targets}
    try:
        for _ in range(a.rounds):  # every target in each round, so drift hits them alike
            for name, (url, payload) in targets.items():
                lat, rps = _measure(url, payload, a)
                p50[name].append(statistics.median(lat) * 1000)
                p90[name].append(sorted(lat)[int(0.9 * (len(lat) - 1))] * 1000)
                tput[name].append(rps)
    finally:
        for p in (proxy, forwarder, mock):
            p.terminate()
            p.wait()
    med = statistics.median
    rows = []
    for name in targets:
        if name == "direct":
            continue
        rows.append({
            "api": name, "stream": a.stream, "proxied_p50_ms": round(med(p50[name]), 3),
            "added_p50_ms": round(med([x - d for x, d in zip(p50[name], p50["direct"], strict=True)]), 3),
            "added_p90_ms": round(med([x - d for x, d in zip(p90[name], p90["direct"], strict=True)]), 3),
            "req_per_s": round(med(tput[name]), 1),
            "throughput_ratio": round(med([x / d for x, d in zip(tput[name], tput["direct"], strict=True)]), 3),
            "direct_p50_ms": round(med(p50["direct"]), 3), "direct_req_per_s": round(med(tput["direct"]), 1),
            "concurrency": a.concurrency, "rounds": a.rounds})
    if a.json:
        print(orjson.dumps(rows).decode())
        return
    print(f"direct chat{' (streamed)' if a.stream else ''}: p50 {rows[0]['direct_p50_ms']:.3f} ms, "
          f"c={a.concurrency} {rows[0]['direct_req_per_s']:.0f} req/s (medians of {a.rounds} rounds)")
    print(f"{'through':<15} {'p50 ms':>8} {'added p50':>10} {'added p90':>10} {'req/s':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['api']:<15} {r['proxied_p50_ms']:>8.3f} {r['added_p50_ms']:>10.3f} {r['added_p90_ms']:>10.3f} "
              f"{r['req_per_s']:>8.0f} {r['throughput_ratio']:>6.2f}")


if __name__ == "__main__":
    main()
