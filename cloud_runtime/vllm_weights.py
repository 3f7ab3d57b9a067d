"""Full fine-tuning's weights into a running vLLM, without a restart: the gate's ``/update_weights``.

The trainer publishes each step as it does to the embedded server: it writes the weights in Hugging
Face's layout onto the run volume (``workbench_local.training.export``: gathered shard by shard
under FSDP, so no rank holds the whole model) and POSTs ``/update_weights {"weight_dir": DIR,
"policy_version": N}`` to the inference role. The adapter gate (``vllm_gate.AdapterGate``) reloads
the volume (its ``sync``) until ``DIR`` is visible, drives the sequence below on its node's vLLM, fans the call out
to the other inference nodes, and from then on answers with ``policy_version`` N for the base model.

**vLLM's path.** ``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` serves its development routes
(``vllm/entrypoints/serve/dev``): ``/collective_rpc`` runs a worker method on every worker of the
engine, and ``reload_weights`` is the worker method that reloads the served model's weights in place
from a checkpoint directory (``kwargs: {"weights_path": DIR, "is_checkpoint_format": true}`` —
checkpoint format, so vLLM runs its own layer-wise post-processing after loading). ``/pause`` and
``/resume`` hold new tokens while the weights change (``mode=keep`` freezes the requests in flight;
they continue on the new weights) and ``/reset_prefix_cache`` drops the KV blocks the old weights
computed. Sources (vLLM 0.33 is pinned in ``image.py``):

* https://docs.vllm.ai/en/v0.32.0/training/weight_transfer/ — vLLM's weight-transfer system for RL and
  its HTTP control routes in dev mode; its backends (NCCL, CUDA IPC) need a communicator between the
  trainer's and vLLM's GPUs, which Modal's separate trainer and inference containers do not share;
  the run volume they do share, so this module loads from it;
* vllm/entrypoints/serve/dev/rpc/api_router.py — ``POST /collective_rpc {"method", "args", "kwargs",
  "timeout"}`` answers ``{"results": [one per worker]}`` (or an empty 200);
* vllm/entrypoints/serve/dev/rlhf/api_router.py — ``POST /pause?mode=keep`` -> ``{"status": "paused"}``,
  ``POST /resume`` -> ``{"status": "resumed"}``;
* vllm/entrypoints/serve/dev/cache/api_router.py — ``POST /reset_prefix_cache`` -> ``{"success": bool}``;
* https://github.com/vllm-project/vllm/pull/48284 — ``/collective_rpc`` with ``reload_weights`` and
  ``weights_path`` on a served model; https://github.com/vllm-project/vllm/issues/32718 — without a
  ``weights_path`` the reload re-reads the startup weights, so the path is always passed.

None of this has run against a real vLLM from this project: the tests drive the gate against a
stand-in that follows those routes' published request and response shapes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

RELOAD_METHOD = "reload_weights"
PAUSE_MODE = "keep"
#: The environment variable that opens vLLM's development routes (``/collective_rpc``, ``/pause``).
DEV_MODE_ENV = {"VLLM_SERVER_DEV_MODE": "1"}


def reload_body(weight_dir: str, timeout_s: float | None = None) -> dict[str, Any]:
    """The ``/collective_rpc`` body that reloads every worker's weights from ``weight_dir``."""
    body: dict[str, Any] = {"method": RELOAD_METHOD,
                            "kwargs": {"weights_path": weight_dir, "is_checkpoint_format": True}}
    if timeout_s is not None:
        body["timeout"] = timeout_s
    return body


def check_request(raw: Any) -> tuple[str, int | None]:
    """``(weight_dir, policy_version)`` of an ``/update_weights`` body; ValueError (the embedded
    server's wording) when it is not one."""
    if not isinstance(raw, dict) or not isinstance(raw.get("weight_dir"), str) or not raw["weight_dir"]:
        raise ValueError("send {\"weight_dir\": PATH} (and optionally \"policy_version\": INT)")
    version = raw.get("policy_version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValueError("policy_version must be an integer (the training step that produced the weights)")
    return raw["weight_dir"], version


def has_weights(weight_dir: str) -> bool:
    p = Path(weight_dir)
    return p.is_dir() and any(p.glob("*.safetensors"))


async def reload_vllm(session: Any, vllm: str, weight_dir: str, timeout_s: float | None = None) -> tuple[int, str]:
    """Pause ``vllm`` (keeping its requests), reload its weights from ``weight_dir``, drop its prefix
    cache and resume it — resumed whatever happened once paused. ``(status, what failed or "")``:
    200 when every step answered 2xx."""
    status, text = await _post(session, f"{vllm}/pause?mode={PAUSE_MODE}", None)
    if not 200 <= status < 300:
        return status, f"/pause: {text}"
    failed = (200, "")
    try:
        status, text = await _post(session, f"{vllm}/collective_rpc", reload_body(weight_dir, timeout_s))
        if not 200 <= status < 300:
            failed = (status, f"/collective_rpc {RELOAD_METHOD}: {text}")
        else:
            status, text = await _post(session, f"{vllm}/reset_prefix_cache?reset_running_requests=true", None)
            if not 200 <= status < 300 or '"success":false' in text.replace(" ", ""):
                failed = (status if status >= 400 else 500, f"/reset_prefix_cache: {text}")
    finally:
        status, text = await _post(session, f"{vllm}/resume", None)
        if not 200 <= status < 300 and failed[0] == 200:
            failed = (status, f"/resume: {text}")
    return failed


async def handle(gate: Any, request: Any) -> Any:
    """The gate's ``/update_weights`` (``gate``: a ``vllm_gate.AdapterGate``): once the weights are
    visible on this node, reload this node's vLLM from them and, unless the call is itself a fan-out,
    every peer's (their gates do the same); the base model's policy version changes only when every
    node succeeded."""
    from aiohttp import web

    def error(status: int, message: str) -> Any:
        return web.json_response({"error": {"message": message}}, status=status)

    try:
        raw = await request.json()
    except (ValueError, UnicodeDecodeError):
        return error(400, "the body is not JSON")
    try:
        weight_dir, version = check_request(raw)
    except ValueError as e:
        return error(400, str(e))
    if not await gate.ensure_visible(weight_dir):
        return error(404, f"weights {weight_dir} are not visible on this inference node after "
                          f"{gate.visible_wait_s:.0f}s; was the run volume committed?")
    if not has_weights(weight_dir):
        return error(400, f"no weights at {weight_dir} (expected a directory with *.safetensors, as written by "
                          "save_pretrained)")
    calls = [reload_vllm(gate.session, gate.upstreams[0], weight_dir), *gate.fan_out(request, "/update_weights", raw)]
    results = await asyncio.gather(*calls)
    bad = [(i, s, t) for i, (s, t) in enumerate(results) if not 200 <= s < 300]
    if bad:
        i, status, text = bad[0]
        where = "this node" if i == 0 else f"peer {gate.peers[i - 1]}"
        return error(status if 400 <= status < 600 else 502, f"update_weights failed on {where} "
                     f"({len(bad)} of {len(results)} nodes): {text[:300]}")
    gate.weight_updates += 1
    gate.base_version = gate.weight_updates if version is None else version
    return web.json_response({"status": "ok", "model": gate.base_model, "policy_version": gate.base_version,
                              "nodes": len(results)})


async def _post(session: Any, url: str, body: dict[str, Any] | None) -> tuple[int, str]:
    try:
        async with session.post(url, json=body) as r:
            return r.status, (await r.text())[:500]
    except Exception as e:  # a dead upstream: reported as the gate's own 502
        return 502, f"{type(e).__name__}: {e}"


__all__ = ["DEV_MODE_ENV", "PAUSE_MODE", "RELOAD_METHOD", "check_request", "handle", "has_weights", "reload_body",
           "reload_vllm"]
