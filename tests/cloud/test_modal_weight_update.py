"""Full fine-tuning into vLLM through the adapter gate's ``/update_weights`` (``weight_update``),
against real aiohttp servers on 127.0.0.1 that stand in for ``vllm serve`` in dev mode: they follow
the request and response shapes of vLLM's ``/pause``, ``/collective_rpc``, ``/reset_prefix_cache``
and ``/resume`` routes. No real vLLM runs here."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.modal.inference import vllm_command
from workbench_cloud.modal.spec import ModalSpec
from workbench_cloud.vllm_gate import FANOUT_HEADER, AdapterGate
from workbench_cloud.vllm_weights import RELOAD_METHOD, check_request

BASE = "Qwen/Qwen3-8B"


class DevModeVllm:
    """The dev-mode routes a weight reload uses, as vLLM defines them; completions say which weights
    served them. A generation that arrives while paused waits for ``/resume`` (``mode=keep``)."""

    def __init__(self, name: str, *, fail_reload: bool = False) -> None:
        self.name, self.fail_reload = name, fail_reload
        self.weights = "startup"
        self.calls: list[str] = []
        self.rpc_bodies: list[dict[str, Any]] = []
        self.running = asyncio.Event()
        self.running.set()

    def app(self) -> Any:
        from aiohttp import web

        async def pause(request: web.Request) -> web.Response:
            self.calls.append(f"pause:{request.query.get('mode', 'abort')}")
            self.running.clear()
            return web.json_response({"status": "paused"})

        async def resume(_request: web.Request) -> web.Response:
            self.calls.append("resume")
            self.running.set()
            return web.json_response({"status": "resumed"})

        async def collective_rpc(request: web.Request) -> web.Response:
            body = await request.json()
            self.rpc_bodies.append(body)
            self.calls.append(f"rpc:{body.get('method')}")
            if body.get("method") is None:
                return web.json_response({"detail": "Missing 'method' in request body"}, status=400)
            path = Path(body.get("kwargs", {}).get("weights_path", ""))
            if self.fail_reload or not any(path.glob("*.safetensors")):
                return web.Response(status=500, text="Internal Server Error")
            self.weights = path.name
            return web.json_response({"results": [None, None]})  # one per worker (tensor parallel 2)

        async def reset_prefix_cache(request: web.Request) -> web.Response:
            self.calls.append(f"reset:{request.query.get('reset_running_requests', 'false')}")
            return web.json_response({"success": True})

        async def completions(request: web.Request) -> web.Response:
            body = await request.json()
            await self.running.wait()
            return web.json_response({"object": "text_completion", "model": body["model"],
                                      "choices": [{"index": 0, "text": f"{self.name} on {self.weights}"}]})

        async def health(_request: web.Request) -> web.Response:
            return web.Response(text="")

        app = web.Application()
        app.router.add_post("/pause", pause)
        app.router.add_post("/resume", resume)
        app.router.add_post("/collective_rpc", collective_rpc)
        app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/health", health)
        return app


def write_weights(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"stand-in weights")
    (path / "config.json").write_text("{}")
    return path


async def complete(session: Any, gate: str) -> dict[str, Any]:
    async with session.post(gate + "/v1/completions", json={"model": BASE, "prompt": "2+2="}) as r:
        assert r.status == 200
        return dict(await r.json())


async def test_update_weights_reloads_every_node_once_visible(tmp_path: Path, serve: Any) -> None:
    import aiohttp

    weights = tmp_path / "runs" / "r1" / "weights" / "step-1"
    syncs = {"head": 0}

    def head_sync() -> None:  # the second volume reload brings the trainer's committed weights
        syncs["head"] += 1
        if syncs["head"] == 2:
            write_weights(weights)

    a, b = DevModeVllm("a"), DevModeVllm("b")
    url_a, url_b = await serve(a.app()), await serve(b.app())
    peer = await serve(AdapterGate([url_b], sync=lambda: None, sync_interval_s=0.05, base_model=BASE).app())
    head = await serve(AdapterGate([url_a], peers=[peer], sync=head_sync, sync_interval_s=0.05,
                                   base_model=BASE).app())
    async with aiohttp.ClientSession() as s:
        before = await complete(s, head)
        assert before["policy_version"] == 0 and before["choices"][0]["text"] == "a on startup"

        async with s.post(head + "/update_weights", json={"weight_dir": str(weights), "policy_version": 1}) as r:
            answer = await r.json()
            assert r.status == 200, answer
        assert answer == {"status": "ok", "model": BASE, "policy_version": 1, "nodes": 2}
        assert syncs["head"] == 2
        for v in (a, b):  # vLLM's sequence on every node, resumed at the end
            assert v.calls == ["pause:keep", f"rpc:{RELOAD_METHOD}", "reset:true", "resume"]
            assert v.rpc_bodies == [{"method": "reload_weights",
                                     "kwargs": {"weights_path": str(weights), "is_checkpoint_format": True}}]
        after = await complete(s, head)
        assert after["policy_version"] == 1 and after["choices"][0]["text"] == "a on step-1"
        assert (await complete(s, peer))["policy_version"] == 1  # the peer heard the version too


async def test_a_generation_during_the_reload_waits_and_runs_on_the_new_weights(tmp_path: Path,
                                                                                serve: Any) -> None:
    import aiohttp

    weights = write_weights(tmp_path / "step-2")
    v = DevModeVllm("a")
    vllm = await serve(v.app())
    gate = await serve(AdapterGate([vllm], sync=lambda: None, base_model=BASE).app())
    async with aiohttp.ClientSession() as s:
        await s.post(f"{vllm}/pause?mode=keep")  # a generation arrives while vLLM is paused
        waiting = asyncio.ensure_future(complete(s, gate))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        async with s.post(gate + "/update_weights", json={"weight_dir": str(weights), "policy_version": 2}) as r:
            assert r.status == 200, await r.text()
        assert (await waiting)["choices"][0]["text"] == "a on step-2"


@pytest.mark.parametrize(("body", "status", "text"), [
    ({}, 400, "weight_dir"),
    ({"weight_dir": ""}, 400, "weight_dir"),
    ({"weight_dir": "WEIGHTS", "policy_version": "3"}, 400, "must be an integer"),
    ({"weight_dir": "WEIGHTS", "policy_version": True}, 400, "must be an integer"),
    ({"weight_dir": "MISSING"}, 404, "not visible on this inference node"),
    ({"weight_dir": "EMPTY"}, 400, "no weights at"),
    ({"weight_dir": "WEIGHTS", "fail": True}, 500, "collective_rpc reload_weights"),
], ids=["no-dir", "empty-dir-name", "version-text", "version-bool", "never-visible", "no-safetensors",
        "vllm-refuses"])
async def test_bad_updates_are_refused_and_the_version_stays(tmp_path: Path, serve: Any, body: dict[str, Any],
                                                             status: int, text: str) -> None:
    import aiohttp

    weights = write_weights(tmp_path / "step-3")
    (tmp_path / "empty").mkdir()
    paths = {"WEIGHTS": str(weights), "MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty")}
    v = DevModeVllm("a", fail_reload=bool(body.pop("fail", False)))
    gate = await serve(AdapterGate([await serve(v.app())], sync=lambda: None, visible_wait_s=0.2,
                                   sync_interval_s=0.05, base_model=BASE).app())
    if "weight_dir" in body:
        body["weight_dir"] = paths.get(body["weight_dir"], body["weight_dir"])
    async with aiohttp.ClientSession() as s:
        async with s.post(gate + "/update_weights", json=body) as r:
            answer = await r.json()
            assert r.status == status and text in answer["error"]["message"], answer
            assert "\n" not in answer["error"]["message"]
        assert v.calls in ([], ["pause:keep", f"rpc:{RELOAD_METHOD}", "resume"])  # resumed even when it failed
        assert (await complete(s, gate))["policy_version"] == 0


def test_check_request_matches_the_embedded_server() -> None:
    assert check_request({"weight_dir": "/w", "policy_version": 4}) == ("/w", 4)
    assert check_request({"weight_dir": "/w"}) == ("/w", None)
    with pytest.raises(ValueError, match="weight_dir"):
        check_request(["/w"])


def test_vllm_command_for_full_fine_tuning(tmp_path: Path) -> None:
    spec = ModalSpec(run_id="r1", base_model=BASE, bundle_dir=str(tmp_path), bundle_hash="h", full_weights=True)
    cmd = " ".join(vllm_command(spec))
    assert "--enable-lora" not in cmd and "--max-lora-rank" not in cmd
    assert ModalSpec.from_json(spec.to_json()).full_weights is True
    lora = " ".join(vllm_command(ModalSpec(run_id="r1", base_model=BASE, bundle_dir=str(tmp_path), bundle_hash="h")))
    assert "--enable-lora" in lora
    assert json.loads(spec.to_json())["full_weights"] is True
    assert FANOUT_HEADER == "X-Workbench-Fanout"
