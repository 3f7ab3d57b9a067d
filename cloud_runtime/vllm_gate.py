"""One vLLM inference node: the ``vllm serve`` command line and the adapter gate in front of it.

A Modal inference node (``workbench_cloud.modal.inference``) and a Ray GPU node (``workbench_cloud.ray.roles``)
run the same two things:

* ``vllm serve BASE --enable-lora --max-lora-rank R`` on ``127.0.0.1:PORT`` (:func:`vllm_argv`) with the
  environment :func:`vllm_env` gives: ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` so ``/v1/load_lora_adapter``
  works, and for full fine-tuning vLLM's development routes (``vllm_weights``);
* the **adapter gate** (:class:`AdapterGate`, aiohttp; :func:`run_gate` serves it from a thread). Everything is
  proxied (streaming included) to the least-busy vLLM; ``load_lora_adapter`` first makes the adapter the
  trainer just wrote visible here (``sync``: on Modal, reloading the run volume until it shows another
  container's commit), and on a head node it is fanned out to the peers' gates, so one call from the trainer
  loads the adapter everywhere; ``/update_weights`` (full fine-tuning) does the same for whole weights through
  vLLM's weight reload (``vllm_weights``), the protocol the embedded server accepts;
* ``/v1/chat/completions/tokens`` (token-in chat, which vLLM lacks) on top of vLLM's ``/v1/completions``
  (``vllm_tokens``), so multi-turn rollouts keep their sampled tokens exact; and the ``policy_version`` of the
  adapter a response came from (the trainer passes it with every load), in every whole (non-streamed) chat or
  completion response, as the embedded server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from workbench_cloud import vllm_weights
from workbench_cloud.vllm_tokens import PARSERS, serve_token_route

#: ``--max-lora-rank`` values vLLM accepts; an adapter's rank is rounded up to the next one.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
ADAPTER_OPS = ("load_lora_adapter", "unload_lora_adapter")
#: Set to "0" on a call a head node's gate fans out to its peers (they do not fan it out again).
FANOUT_HEADER = "X-Workbench-Fanout"
_ADAPTER_FIELDS = ("lora_name", "lora_path", "load_inplace")
_HOP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive",
                  "proxy-connection", "te", "trailer", "upgrade"})
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


def vllm_lora_rank(rank: int) -> int:
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank ({VLLM_LORA_RANKS[-1]})")


def vllm_argv(base_model: str, port: int, *, tensor_parallel: int = 1, lora_rank: int = 16, max_loras: int = 4,
              full_weights: bool = False, replicas: int = 1, max_model_len: int | None = None,
              tool_call_parser: str = "hermes", extra: tuple[str, ...] = ()) -> list[str]:
    """The ``vllm serve`` command line of one inference node on ``127.0.0.1:port`` (Modal's and a Ray GPU
    node's): LoRA hot-loading unless ``full_weights`` (then each step's whole weights replace vLLM's). Run it with
    :func:`vllm_env` in its environment."""
    cmd = ["vllm", "serve", base_model, "--host", "127.0.0.1", "--port", str(port),
           "--served-model-name", base_model, "--tensor-parallel-size", str(tensor_parallel)]
    if not full_weights:  # full fine-tuning replaces the base weights instead (vllm_weights)
        cmd += ["--enable-lora", "--max-lora-rank", str(vllm_lora_rank(lora_rank)), "--max-loras", str(max_loras)]
    cmd += ["--gpu-memory-utilization", "0.90"]
    if replicas > 1:
        cmd += ["--data-parallel-size", str(replicas)]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if tool_call_parser:
        cmd += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    return cmd + list(extra)


def vllm_env(full_weights: bool = False) -> dict[str, str]:
    """What the ``vllm serve`` of :func:`vllm_argv` needs in its environment: runtime LoRA loading, and for
    full fine-tuning the development routes the weight reload drives (``vllm_weights``)."""
    return {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", **(vllm_weights.DEV_MODE_ENV if full_weights else {})}


class AdapterGate:
    """The HTTP front of one inference node (see the module doc). ``upstreams[0]`` is this node's
    vLLM; on the head node the others are the peers' gates. ``sync`` makes newly committed files
    visible (``modal.Volume.reload``); ``peers`` get every adapter operation too."""

    def __init__(self, upstreams: Sequence[str], *, peers: Sequence[str] = (),
                 sync: Callable[[], None] | None = None, visible_wait_s: float = 120.0,
                 sync_interval_s: float = 1.0, base_model: str | None = None,
                 tool_call_parser: str | None = "hermes") -> None:
        if not upstreams:
            raise ValueError("an adapter gate needs at least one upstream")
        self.upstreams = [u.rstrip("/") for u in upstreams]
        self.peers = [p.rstrip("/") for p in peers]
        self.sync = sync
        self.visible_wait_s, self.sync_interval_s = visible_wait_s, sync_interval_s
        self.inflight = dict.fromkeys(self.upstreams, 0)
        self.served = dict.fromkeys(self.upstreams, 0)
        self.session: Any = None
        self._sync_lock: asyncio.Lock | None = None
        self.base_model = base_model  # policy version 0
        self.versions: dict[str, int] = {}  # adapter name -> policy version, from the loads
        self.base_version = 0  # the base model's, raised by /update_weights (full fine-tuning)
        self.weight_updates = 0
        self.tool_call_parser = tool_call_parser  # None: no token route (the probe then finds none)

    def version_of(self, model: str | None) -> int | None:
        if model is not None and model in self.versions:
            return self.versions[model]
        return self.base_version if model is not None and model == self.base_model else None

    # -- the aiohttp app -----------------------------------------------------------------------------
    def app(self) -> Any:
        from aiohttp import web

        app = web.Application(client_max_size=256 * 1024 * 1024)
        for op in ADAPTER_OPS:
            app.router.add_post(f"/v1/{op}", self._adapter_handler(op))
        app.router.add_post("/update_weights", self.update_weights)
        app.router.add_get("/health", self.health)
        if self.tool_call_parser in PARSERS:
            app.router.add_post("/v1/chat/completions/tokens", self.tokens)
        app.router.add_route("*", "/{tail:.*}", self.proxy)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _app: Any) -> None:
        import aiohttp

        self._sync_lock = asyncio.Lock()
        # No total timeout (a long generation streams for minutes); no decompression: bytes pass as sent.
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                                             auto_decompress=False)

    async def _close(self, _app: Any) -> None:
        if self.session is not None:
            await self.session.close()

    # -- routing ---------------------------------------------------------------------------------------
    def pick(self) -> str:
        """The upstream with the fewest requests in flight (ties: the one that served fewest)."""
        return min(self.upstreams, key=lambda u: (self.inflight[u], self.served[u]))

    async def health(self, request: Any) -> Any:
        from aiohttp import web

        try:
            async with self.session.get(self.upstreams[0] + "/health") as r:
                ok = r.status == 200
        except Exception:
            ok = False
        return web.Response(status=200 if ok else 503, text="ok" if ok else "vLLM is not ready")

    async def tokens(self, request: Any) -> Any:
        return await serve_token_route(self, request)

    async def proxy(self, request: Any) -> Any:
        from aiohttp import ClientError, web

        up = self.pick()
        self.inflight[up] += 1
        self.served[up] += 1
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
            data = await request.read()
            async with self.session.request(request.method, up + request.rel_url.path_qs, headers=headers,
                                            data=data) as r:
                version = self._version_for(request, data, r)
                if version is not None:  # a whole JSON response: add the policy version vLLM cannot know
                    body = orjson.loads(await r.read())
                    body.setdefault("policy_version", version)
                    return web.json_response(body, status=r.status, dumps=lambda o: orjson.dumps(o).decode())
                out = web.StreamResponse(status=r.status, reason=r.reason, headers={
                    k: v for k, v in r.headers.items() if k.lower() not in _HOP})
                await out.prepare(request)
                async for chunk in r.content.iter_any():
                    await out.write(chunk)
                await out.write_eof()
                return out
        except (ClientError, OSError) as e:
            return web.json_response({"error": {"message": f"inference upstream {up} failed: {e}",
                                                "type": "upstream_error"}}, status=502)
        finally:
            self.inflight[up] -= 1

    def _version_for(self, request: Any, data: bytes, response: Any) -> int | None:
        """The policy version to add to this response: a 200 JSON answer to a generation request
        whose model is the base model or a loaded adapter; None otherwise (streams pass untouched)."""
        if request.method != "POST" or request.path not in GENERATION_PATHS or response.status != 200 \
                or not response.headers.get("Content-Type", "").startswith("application/json"):
            return None
        try:
            model = orjson.loads(data).get("model")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return self.version_of(model)

    # -- adapters --------------------------------------------------------------------------------------
    async def ensure_visible(self, path: str) -> bool:
        """Reload the volume until ``path`` exists here, for at most ``visible_wait_s``."""
        deadline = time.monotonic() + self.visible_wait_s
        while True:
            if os.path.exists(path):
                return True
            if self.sync is not None:
                assert self._sync_lock is not None
                async with self._sync_lock:
                    if not os.path.exists(path):
                        try:
                            await asyncio.to_thread(self.sync)
                        except Exception:  # e.g. a transient reload conflict: the next tick retries
                            pass
                if os.path.exists(path):
                    return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(self.sync_interval_s)

    def _adapter_handler(self, op: str) -> Callable[[Any], Any]:
        async def handle(request: Any) -> Any:
            return await self.adapter(op, request)

        return handle

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> tuple[int, str]:
        try:
            async with self.session.post(url, json=body, headers=headers or {}) as r:
                return r.status, await r.text()
        except Exception as e:
            return 502, f"{type(e).__name__}: {e}"

    @staticmethod
    def _ok(op: str, status: int, text: str) -> bool:
        if 200 <= status < 300:
            return True
        low = text.lower()
        if op == "load_lora_adapter" and status == 400 and "already" in low:
            return True  # a retried load: the adapter is there, which is what was asked
        return op == "unload_lora_adapter" and status in (400, 404) and "found" in low  # already gone

    async def adapter(self, op: str, request: Any) -> Any:
        from aiohttp import web

        try:
            raw = await request.json()
        except (ValueError, UnicodeDecodeError):
            return web.json_response({"error": {"message": "the body is not JSON"}}, status=400)
        body = {k: raw[k] for k in _ADAPTER_FIELDS if k in raw}  # vLLM's fields; policy_version is ours
        version = raw.get("policy_version")
        if "lora_name" not in body or (op == "load_lora_adapter" and "lora_path" not in body):
            return web.json_response({"error": {"message": f"{op} needs lora_name"
                                                f"{' and lora_path' if op == 'load_lora_adapter' else ''}"}},
                                     status=400)
        if op == "load_lora_adapter" and not await self.ensure_visible(str(body["lora_path"])):
            return web.json_response({"error": {"message": f"adapter {body['lora_path']} is not visible on this "
                                                f"inference node after {self.visible_wait_s:.0f}s; was the run "
                                                "volume committed?"}}, status=404)
        calls = [self._post(f"{self.upstreams[0]}/v1/{op}", body),
                 *self.fan_out(request, f"/v1/{op}",
                               {**body, **({"policy_version": version} if version is not None else {})})]
        results = await asyncio.gather(*calls)
        bad = [(i, s, t) for i, (s, t) in enumerate(results) if not self._ok(op, s, t)]
        if bad:
            i, status, text = bad[0]
            where = "this node" if i == 0 else f"peer {self.peers[i - 1]}"
            return web.json_response({"error": {"message": f"{op} failed on {where} "
                                                f"({len(bad)} of {len(results)} nodes): {text[:300]}"}},
                                     status=status if 400 <= status < 600 else 502)
        if op == "load_lora_adapter" and isinstance(version, int):
            self.versions[str(body["lora_name"])] = version
        elif op == "unload_lora_adapter":
            self.versions.pop(str(body["lora_name"]), None)
        return web.Response(text=f"Success: {op} {body['lora_name']} on {len(results)} node(s)")


    def fan_out(self, request: Any, path: str, body: dict[str, Any]) -> list[Any]:
        """The call ``request`` made, to ``path`` of every peer's gate (awaitables of ``_post``); none when the
        call is itself a fan-out."""
        if request.headers.get(FANOUT_HEADER, "1") == "0":
            return []
        return [self._post(f"{peer}{path}", body, {FANOUT_HEADER: "0"}) for peer in self.peers]

    # -- whole weights (full fine-tuning) --------------------------------------------------------------
    async def update_weights(self, request: Any) -> Any:
        """``{"weight_dir": DIR, "policy_version": N}``: reload every node's vLLM from DIR once it is
        visible (``vllm_weights.handle``); then the base model answers with version N."""
        return await vllm_weights.handle(self, request)


def run_gate(gate: AdapterGate, host: str, port: int) -> Callable[[], None]:
    """Serve ``gate`` on ``host:port`` in a daemon thread with its own event loop; returns ``stop``.
    Raises here when it cannot listen (say, the port is taken)."""
    from aiohttp import web

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failed: list[BaseException] = []
    runner = web.AppRunner(gate.app())

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, host=host, port=port).start()

    def main() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as e:
            failed.append(e)
            with contextlib.suppress(Exception):
                loop.run_until_complete(runner.cleanup())
            loop.close()
            ready.set()
            return
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=main, name="adapter-gate", daemon=True)
    thread.start()
    if not ready.wait(30) or failed:
        raise RuntimeError(f"the adapter gate could not listen on {host}:{port}: {failed[0] if failed else 'timeout'}")

    def stop() -> None:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)

    return stop


def wait_healthy(url: str, deadline_s: float, alive: Callable[[], bool] = lambda: True, poll_s: float = 2.0) -> None:
    """Block until ``url`` answers 200; RuntimeError when ``alive()`` turns false or time runs out."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not alive():
            raise RuntimeError(f"the server behind {url} exited before it was ready")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as r:
            if r.status == 200:
                return
        time.sleep(poll_s)
    raise RuntimeError(f"{url} was not healthy after {deadline_s:.0f}s")


__all__ = ["ADAPTER_OPS", "FANOUT_HEADER", "VLLM_LORA_RANKS", "AdapterGate", "run_gate", "vllm_argv", "vllm_env",
           "vllm_lora_rank", "wait_healthy"]
