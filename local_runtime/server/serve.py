"""The command line of the embedded server (``workbench serve`` and ``python -m workbench_local.server``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError, WorkbenchError
from workbench.fsutil import atomic_write


def default_threads() -> int:
    cpus = os.cpu_count() or 1
    return max(1, min(8, cpus // 2))


def build_parser(prog: str = "workbench serve") -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=prog, description="Serve a model with an OpenAI-compatible API (torch + "
                                 "transformers; LoRA adapters with peft).")
    ap.add_argument("-m", "--model", default="tiny",
                    help="tiny (the embedded model, built at first use), a Hugging Face id, or a local directory")
    ap.add_argument("--served-model-name", default=None, help="the name clients pass as model= (default: --model)")
    ap.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                    help="a LoRA adapter to load at startup (repeatable); select it with model=NAME")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --ready-file)")
    ap.add_argument("--max-batch", type=int, default=32, help="most sequences generated together")
    ap.add_argument("--max-queue", type=int, default=256, help="most sequences waiting; more get HTTP 429")
    ap.add_argument("--batch-wait-ms", type=float, default=4.0,
                    help="how long a new batch waits for near-simultaneous requests to join")
    ap.add_argument("--threads", type=int, default=default_threads(), help="torch CPU threads")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, mps")
    ap.add_argument("--max-model-len", type=int, default=None, help="context length (default: the model's)")
    ap.add_argument("--chat-template", default=None, metavar="FILE",
                    help="a Jinja chat template, for tokenizers without one")
    ap.add_argument("--logprobs-mode", default="raw", choices=["raw", "processed"],
                    help="raw: logprobs of the model's distribution (vLLM's default); processed: after "
                         "temperature, top-k and top-p")
    ap.add_argument("--allow-download", action="store_true", help="fetch a Hugging Face id that is not cached")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("--ready-file", default=None, help="write {host, port, pid, model} here once serving")
    ap.add_argument("--exit-when-idle", type=float, default=0.0, metavar="SECONDS",
                    help="exit after this long with no requests (0: never); the on-demand embedded server uses it")
    ap.add_argument("--access-log", action="store_true")
    return ap


def log(msg: str) -> None:
    print(f"workbench serve: {msg}", file=sys.stderr, flush=True)


def _parse_adapters(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ConfigError(f"--adapter {spec!r}: use NAME=PATH")
        out.append((name, path))
    return out


def build(args: argparse.Namespace) -> Any:
    """Load the model and adapters; return the aiohttp app (nothing is listening yet)."""
    import torch
    from workbench_local.models.loading import ModelLoadError, load
    from workbench_local.server.app import create_app
    from workbench_local.server.runner import AdapterError, Engine
    from workbench_local.server.scheduler import Scheduler

    if args.max_batch < 1 or args.max_queue < 1:
        raise ConfigError("--max-batch and --max-queue must be at least 1")
    adapters = _parse_adapters(args.adapter)
    torch.set_num_threads(max(1, args.threads))
    lm = load(args.model, served_name=args.served_model_name, dtype=args.dtype, device=args.device,
              chat_template=args.chat_template, max_model_len=args.max_model_len,
              allow_download=args.allow_download, trust_remote_code=args.trust_remote_code, log=log)
    if args.max_model_len and args.max_model_len > lm.context_len:
        lm.warnings.append(f"--max-model-len {args.max_model_len} is more than {lm.name} supports; its context "
                           f"is capped at {lm.context_len} tokens")
    for w in lm.warnings:
        log(f"warning: {w}")
    engine = Engine(lm, logprobs_mode=args.logprobs_mode)
    for name, path in adapters:
        try:
            engine.load_adapter(name, path)
        except AdapterError as e:
            raise ModelLoadError(f"--adapter {name}={path}: {e.message}") from None
    sched = Scheduler(engine, max_batch=args.max_batch, max_queue=args.max_queue,
                      batch_wait_s=args.batch_wait_ms / 1000.0, threads=max(1, args.threads))
    return create_app(engine, sched)


async def serve(app: Any, args: argparse.Namespace) -> None:
    import logging

    from aiohttp import web
    from workbench_local.server.state import STATE

    if args.access_log:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    runner = web.AppRunner(app, access_log=logging.getLogger("aiohttp.access") if args.access_log else None)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise ConfigError(f"cannot listen on {args.host}:{args.port} ({e.strerror or e}); pass another --port") from None
    server = getattr(site, "_server", None)
    port = server.sockets[0].getsockname()[1] if server and server.sockets else args.port
    lm = app[STATE].engine.lm
    log(f"serving {lm.name} at http://{args.host}:{port}/v1 (context {lm.context_len}, device {lm.device}, "
        f"max batch {args.max_batch}, {args.threads} thread{'s' if args.threads != 1 else ''})")
    if args.ready_file:
        atomic_write(Path(args.ready_file), json.dumps({"host": args.host, "port": port, "pid": os.getpid(),
                                                          "model": lm.name}))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    watcher = asyncio.create_task(_idle_watch(app[STATE].scheduler, args.exit_when_idle, stop)) if args.exit_when_idle > 0 else None
    try:
        await stop.wait()
    finally:
        if watcher:
            watcher.cancel()
        log("shutting down")
        await runner.cleanup()


async def _idle_watch(sched: Any, idle_s: float, stop: asyncio.Event) -> None:
    import time

    while True:
        await asyncio.sleep(max(0.05, min(30.0, idle_s / 4)))
        if not sched.running and not sched.queued and time.monotonic() - sched.last_activity > idle_s:
            log(f"no requests for {idle_s:g}s; exiting")
            stop.set()
            return


def run(argv: list[str] | None = None, prog: str = "workbench serve") -> None:
    """Parse, load, serve until SIGINT/SIGTERM. User errors raise :class:`WorkbenchError`."""
    args = build_parser(prog).parse_args(argv)
    app = build(args)
    asyncio.run(serve(app, args))


def main(argv: list[str] | None = None) -> int:
    try:
        run(argv, prog="python -m workbench_local.server")
    except WorkbenchError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    return 0
