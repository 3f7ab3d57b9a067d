"""The inference role: vLLM's OpenAI server with LoRA hot-loading, behind a small adapter gate.

``build_app`` registers :func:`serve_inference` as the ``inference`` function on
``{gpu}:{gpus_per_node}`` (``@modal.clustered(size=inference_nodes)`` for more than one node).
Each node runs the vLLM inference node of ``workbench_cloud.vllm_gate``: ``vllm serve`` on
``127.0.0.1:VLLM_PORT`` (tensor parallel over ``inference_tp`` GPUs, data parallel over the rest of the node)
and the adapter gate on ``[::]:INFERENCE_PORT``, whose ``sync`` reloads the run volume until the adapter or
weights the trainer just wrote are visible here (a Modal Volume shows another container's files only after it
commits and this one reloads); the head node's gate fans every load out to the other nodes' gates.

**How the orchestrator finds it.** The head node (cluster rank 0) puts
``http://[its i6pn address]:INFERENCE_PORT`` into the run's ``modal.Dict`` under ``inference_url``
once every node answers ``/health``. i6pn is Modal's workspace-private IPv6 network: the URL is
reachable from the orchestrator and trainer containers (also ``i6pn=True``) and from nowhere else,
so no token is needed and no public endpoint exists — unlike ``modal.forward`` (a public tunnel)
or a ``web_server`` (a public URL, a 150 s request limit, and no hook to reload the volume before a
load). The role ends when the Dict's ``done`` flag is set or the orchestrator cancels the call.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from typing import Any

from workbench_cloud.modal.spec import INFERENCE_PORT, VLLM_PORT, ModalSpec
from workbench_cloud.modal.trainer import cluster_view, url_host
from workbench_cloud.vllm_gate import AdapterGate, run_gate, vllm_argv, vllm_env, wait_healthy


def vllm_command(spec: ModalSpec, port: int = VLLM_PORT) -> list[str]:
    """The ``vllm serve`` command line of one Modal inference node."""
    return vllm_argv(spec.base_model, port, tensor_parallel=spec.tensor_parallel, lora_rank=spec.lora_rank,
                     max_loras=spec.max_loras, full_weights=spec.full_weights, replicas=spec.replicas_per_node,
                     max_model_len=spec.max_model_len, tool_call_parser=spec.tool_call_parser,
                     extra=spec.extra_vllm_args)


def i6pn_address() -> str:
    """This container's address on Modal's private network (``i6pn=True`` functions only)."""
    return str(socket.getaddrinfo("i6pn.modal.local", None, socket.AF_INET6)[0][4][0])


def serve_inference(spec_json: str) -> dict[str, Any]:
    """The ``inference`` Modal function (every node of the inference cluster; see the module doc)."""
    import modal

    spec = ModalSpec.from_json(spec_json)
    view = cluster_view()
    modal.Volume.from_name(spec.hf_cache_volume).reload()
    runs = modal.Volume.from_name(spec.volume_name)
    state = modal.Dict.from_name(spec.state_dict_name, create_if_missing=True)
    head = view.rank == 0
    peers = [f"http://{url_host(ip)}:{INFERENCE_PORT}" for i, ip in enumerate(view.ips) if i != view.rank] \
        if head and view.nodes > 1 else []
    print(f"inference node {view.rank}/{view.nodes}: {' '.join(vllm_command(spec))}", flush=True)
    # The orchestrator put the weights in the cache volume before spawning this: no hub calls (or cache
    # writes racing other containers) from here.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **vllm_env(spec.full_weights)}
    vllm = subprocess.Popen(vllm_command(spec), stdin=subprocess.DEVNULL, env=env)
    gate = AdapterGate([f"http://127.0.0.1:{VLLM_PORT}", *peers], peers=peers, sync=runs.reload,
                       base_model=spec.base_model, tool_call_parser=spec.tool_call_parser)
    stop_gate: Callable[[], None] | None = None
    try:
        stop_gate = run_gate(gate, "::", INFERENCE_PORT)
        wait_healthy(f"http://127.0.0.1:{VLLM_PORT}/health", spec.startup_timeout_s, lambda: vllm.poll() is None)
        for peer in peers:
            wait_healthy(peer + "/health", spec.startup_timeout_s)
        url = f"http://{url_host(i6pn_address())}:{INFERENCE_PORT}"
        if head:
            state.put("inference_url", url)
            print(f"inference ready at {url} ({view.nodes} node(s))", flush=True)
        while vllm.poll() is None and not state.get("done", False):
            time.sleep(5)
        if vllm.poll() is not None:
            raise RuntimeError(f"vLLM exited with code {vllm.returncode} (its log is above)")
        return {"node": view.rank, "url": url, "requests": sum(gate.served.values())}
    finally:
        if stop_gate is not None:
            stop_gate()
        if vllm.poll() is None:
            vllm.terminate()
            try:
                vllm.wait(timeout=60)
            except subprocess.TimeoutExpired:
                vllm.kill()


__all__ = ["i6pn_address", "serve_inference", "vllm_command"]
