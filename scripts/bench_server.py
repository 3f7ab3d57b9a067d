"""Embedded server throughput: generated tokens/s for N concurrent requests (batched) against the
same N requests one at a time.

    python scripts/bench_server.py                    # the tiny model, 16 requests x 64 tokens
    python scripts/bench_server.py --model PATH --concurrency 32 --max-tokens 128 --threads 2

Starts its own server subprocess on a free port (``--base-url`` to measure a running one instead).
Every request sets ``ignore_eos`` so each generates exactly ``--max-tokens`` tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _health(root: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(root + "/health", timeout=2) as r:
            return json.loads(r.read())
    except OSError:
        return None


def start(model: str, threads: int, max_batch: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "workbench_local.server", "--model", model, "--port", str(port),
                             "--threads", str(threads), "--max-batch", str(max_batch)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    root = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while _health(root) is None:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("server did not start")
        time.sleep(0.2)
    return proc, root


async def run(base: str, model: str, n: int, max_tokens: int, concurrent: bool) -> tuple[float, int]:
    import openai

    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="x", max_retries=0, timeout=600)

    async def one(i: int) -> int:
        r = await client.chat.completions.create(
            model=model, seed=i, max_tokens=max_tokens, temperature=1.0, extra_body={"ignore_eos": True},
            messages=[{"role": "system", "content": "Answer with a number."},
                      {"role": "user", "content": f"What is {i % 21} + {(i * 7) % 21}? Answer with just the number."}])
        return r.usage.completion_tokens

    t0 = time.perf_counter()
    if concurrent:
        tokens = sum(await asyncio.gather(*(one(i) for i in range(n))))
    else:
        tokens = 0
        for i in range(n):
            tokens += await one(i)
    await client.close()
    return time.perf_counter() - t0, tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--base-url", default=None, help="a running server's root URL (no /v1)")
    ap.add_argument("--served-name", default=None)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    proc = None
    root = args.base_url
    if root is None:
        proc, root = start(args.model, args.threads, max(32, args.concurrency))
    try:
        h = _health(root) or {}
        name = args.served_name or h.get("model", args.model)
        asyncio.run(run(root, name, 2, 4, False))  # warm up
        seq_s, seq_tok = asyncio.run(run(root, name, args.concurrency, args.max_tokens, False))
        before = _health(root) or {}
        con_s, con_tok = asyncio.run(run(root, name, args.concurrency, args.max_tokens, True))
        after = _health(root) or {}
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    seq_tps, con_tps = seq_tok / seq_s, con_tok / con_s
    result = {"model": name, "requests": args.concurrency, "max_tokens": args.max_tokens, "threads": args.threads,
              "sequential_tok_s": round(seq_tps, 1), "sequential_wall_s": round(seq_s, 2),
              "batched_tok_s": round(con_tps, 1), "batched_wall_s": round(con_s, 2),
              "speedup": round(con_tps / seq_tps, 2),
              "batches_for_concurrent": after.get("batches", 0) - before.get("batches", 0),
              "max_batch_seen": after.get("max_batch_seen")}
    print(f"one at a time: {seq_tok} tokens in {seq_s:.2f}s = {seq_tps:.0f} tok/s")
    print(f"{args.concurrency} concurrent: {con_tok} tokens in {con_s:.2f}s = {con_tps:.0f} tok/s "
          f"({result['batches_for_concurrent']} batches)")
    print(f"batching speedup: {con_tps / seq_tps:.2f}x")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
