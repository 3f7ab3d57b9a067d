"""The Modal app, offline: its definition (functions, GPUs, cluster sizes, volumes, secrets, image
steps) built with the network blocked and no token, and the parts of each role that run without
Modal — the trainer's rank derivation and process launch (real torch.distributed, gloo on CPU),
the inference node's adapter gate (real aiohttp servers standing in for vLLM), the volume
committer, the orchestrator's wait for the inference URL.

Nothing here runs on Modal: Modal cannot be reached from the machines that run these tests.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.modal.inference import vllm_command
from workbench_cloud.modal.orchestrator import CloudRun, wait_for_url
from workbench_cloud.modal.spec import BUNDLE_PATH, HF_CACHE_PATH, RUNS_PATH, ModalSpec
from workbench_cloud.modal.trainer import ClusterView, VolumeCommitter, node_command, run_node, url_host
from workbench_cloud.vllm_gate import AdapterGate, vllm_lora_rank

from workbench.errors import ConfigError

try:
    import modal  # noqa: F401

    HAVE_MODAL = True
except ImportError:
    HAVE_MODAL = False

needs_modal = pytest.mark.skipif(not HAVE_MODAL, reason="modal is not installed (pip install 'rl-workbench[cloud]')")

SECRET_VALUES = {"HF_TOKEN": "hf_do_not_print_0123456789", "OPENAI_API_KEY": "sk-do-not-print-abcdef"}


def make_spec(bundle: Path, **kw: Any) -> ModalSpec:
    args: dict[str, Any] = {"run_id": "0101-abc123", "base_model": "Qwen/Qwen3-8B", "bundle_dir": str(bundle),
                            "bundle_hash": "sha256:" + "ab" * 32, "gpu": "H200", "gpus_per_node": 8,
                            "trainer_nodes": 2, "inference_nodes": 1, "lora_rank": 16,
                            "secrets": dict(SECRET_VALUES), "secret_names": ("wandb",)}
    args.update(kw)
    return ModalSpec(**args)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    d = tmp_path / "bundle"
    d.mkdir()
    (d / "manifest.json").write_text('{"hash": "x"}')
    (d / "env.whl").write_bytes(b"PK")
    return d


# -- the spec -----------------------------------------------------------------------------------------
def test_spec_checks_and_keeps_secret_values_out(bundle: Path) -> None:
    spec = make_spec(bundle)
    assert spec.gpu_request == "H200:8" and spec.app_name == "workbench-0101-abc123"
    for text in (repr(spec), spec.to_json(), json.dumps(spec.redacted())):
        for value in SECRET_VALUES.values():
            assert value not in text
    back = ModalSpec.from_json(spec.to_json())
    assert back.secret_keys == ["HF_TOKEN", "OPENAI_API_KEY"] and back.trainer_nodes == 2
    assert back.secret_names == ("wandb",) and back.bundle_hash == spec.bundle_hash
    bad = [{"gpu": "H200:8"}, {"gpus_per_node": 4}, {"timeout_s": 3 * 86400}, {"run_id": "a b"},
           {"inference_tp": 3}, {"bundle_hash": ""}, {"secrets": {"not a name": "v"}}]
    for kw in bad:
        with pytest.raises(ConfigError):
            make_spec(bundle, **kw)
    with pytest.raises(ConfigError, match="unknown field"):
        ModalSpec.from_dict({**json.loads(spec.to_json()), "gpus": 8})


# -- the trainer's torch.distributed environment ----------------------------------------------------------
IPS = ("fdaa:1:2::a", "fdaa:1:2::b")


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_node_command_two_nodes_of_eight_gpus() -> None:
    node0 = node_command(ClusterView(0, IPS), gpus_per_node=8, argv=["m", "--run", "r"], rdzv_id="run-1",
                         master_port=29500)
    node1 = node_command(ClusterView(1, IPS), gpus_per_node=8, argv=["m", "--run", "r"], rdzv_id="run-1",
                         master_port=29500)
    for rank, cmd in enumerate((node0, node1)):
        assert cmd[1:3] == ["-m", "torch.distributed.run"]
        assert _flag(cmd, "--nnodes") == "2" and _flag(cmd, "--nproc-per-node") == "8"
        assert _flag(cmd, "--rdzv-backend") == "c10d"
        assert _flag(cmd, "--rdzv-endpoint") == f"[{IPS[0]}]:29500"  # node 0 is the rendezvous
        assert _flag(cmd, "--local-addr") == IPS[rank] and _flag(cmd, "--rdzv-id") == "run-1"
        assert json.loads(cmd[-1]) == ["m", "--run", "r"]  # the worker's own command line, as one argument
    assert _flag(node0, "--rdzv-conf") == "is_host=1" and _flag(node1, "--rdzv-conf") == "is_host=0"


def test_node_command_one_node_and_bad_input() -> None:
    cmd = node_command(ClusterView(0, ("10.0.0.5",)), gpus_per_node=8, argv=["m"], rdzv_id="r")
    assert _flag(cmd, "--rdzv-endpoint").startswith("127.0.0.1:") and _flag(cmd, "--local-addr") == "127.0.0.1"
    with pytest.raises(ValueError):
        node_command(ClusterView(2, IPS), gpus_per_node=8, argv=["m"], rdzv_id="r")
    with pytest.raises(ValueError):
        node_command(ClusterView(0, IPS), gpus_per_node=0, argv=["m"], rdzv_id="r")
    assert url_host(IPS[0]) == f"[{IPS[0]}]" and url_host("10.0.0.1") == "10.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _loopback_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1",
            "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}


@pytest.mark.slow
def test_two_nodes_form_one_group_through_torchrun(tmp_path: Path) -> None:
    """Two 'nodes' of two ranks each (all on this machine, gloo on the loopback interface): every
    process joins one group of four through the command the cloud nodes run."""
    pytest.importorskip("torch")
    port = _free_port()
    view = ("127.0.0.1", "127.0.0.1")
    codes: dict[int, int] = {}

    def node(rank: int) -> None:
        cmd = node_command(ClusterView(rank, view), gpus_per_node=2, argv=[__name__, "probe", str(tmp_path)],
                           rdzv_id="test-two-nodes", master_port=port)
        codes[rank] = run_node(cmd, base_env=_loopback_env(), log=tmp_path / f"node{rank}.log")

    threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("node*.log")))
    assert codes == {0: 0, 1: 0}, logs
    seen = sorted((json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")), key=lambda d: d["rank"])
    assert [d["rank"] for d in seen] == [0, 1, 2, 3]
    assert sorted(d["local_rank"] for d in seen) == [0, 0, 1, 1]
    assert {d["master"] for d in seen} == {"127.0.0.1"}
    assert all(d["world"] == 4 and d["sum"] == 1 + 2 + 3 + 4 for d in seen)  # an all-reduce over all four


@pytest.mark.slow
def test_a_failed_rank_stops_the_node(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cmd = node_command(ClusterView(0, ("127.0.0.1",)), gpus_per_node=2, argv=[__name__, "fail", str(tmp_path)],
                       rdzv_id="test-fail", master_port=_free_port())
    code = run_node(cmd, base_env=_loopback_env(), log=tmp_path / "node0.log")
    assert code != 0  # rank 1 exited with 3; the agent stopped rank 0 (asleep for ten minutes) and failed
    assert "exitcode" in (tmp_path / "node0.log").read_text()


def _probe(mode: str, out: str) -> int:
    """Run as ``__main__`` by each rank (``workbench_local.training.launcher.rank_main``) in the tests above."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "fail":
        if rank == 1:
            return 3
        time.sleep(600)
        return 0
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "rank": rank, "world": world, "local_rank": int(os.environ["LOCAL_RANK"]), "sum": int(t.item()),
        "master": os.environ["MASTER_ADDR"]}))
    return 0


# -- the volume committer ------------------------------------------------------------------------------
def test_volume_committer_commits_only_changes(tmp_path: Path) -> None:
    commits: list[int] = []
    fail = {"n": 1}

    def commit() -> None:
        if fail["n"]:
            fail["n"] -= 1
            raise RuntimeError("transient")
        commits.append(1)

    messages: list[str] = []
    c = VolumeCommitter(tmp_path, commit, log=messages.append)
    assert c.poll() is False  # an empty folder: nothing to commit
    (tmp_path / "adapters" / "step-1").mkdir(parents=True)
    (tmp_path / "adapters" / "step-1" / "adapter_model.safetensors").write_bytes(b"w" * 10)
    assert c.poll() is False and messages  # the commit failed: retried on the next tick
    assert c.poll() is True and c.poll() is False  # committed once; unchanged since
    (tmp_path / "adapters" / "step-1" / "adapter_model.safetensors").write_bytes(b"w" * 11)
    assert c.poll() is True and len(commits) == 2
    with c:
        (tmp_path / "checkpoint").mkdir()
        (tmp_path / "checkpoint" / "trainer_state.pt").write_bytes(b"s")
    assert len(commits) == 3  # leaving the block commits what is new


# -- vLLM's command line ------------------------------------------------------------------------------
def test_vllm_command(bundle: Path) -> None:
    cmd = vllm_command(make_spec(bundle, lora_rank=4, max_model_len=131072, extra_vllm_args=("--seed", "1")))
    assert cmd[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    joined = " ".join(cmd)
    for part in ("--enable-lora", "--max-lora-rank 8", "--max-loras 4", "--tensor-parallel-size 8",
                 "--host 127.0.0.1", "--served-model-name Qwen/Qwen3-8B", "--max-model-len 131072", "--seed 1"):
        assert part in joined
    assert "--data-parallel-size" not in joined
    dp = " ".join(vllm_command(make_spec(bundle, inference_tp=2)))
    assert "--tensor-parallel-size 2" in dp and "--data-parallel-size 4" in dp
    assert vllm_lora_rank(16) == 16 and vllm_lora_rank(17) == 32
    with pytest.raises(ValueError):
        vllm_lora_rank(1024)


# -- the adapter gate, against real aiohttp servers standing in for vLLM -------------------------------------
class FakeVllm:
    """Enough of vLLM's HTTP API: adapters (which must exist on disk), chat (plain and streamed)."""

    def __init__(self, name: str, delay_s: float = 0.0) -> None:
        self.name, self.delay_s = name, delay_s
        self.loaded: set[str] = set()
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> Any:
        from aiohttp import web

        async def load(request: web.Request) -> web.Response:
            body = await request.json()
            self.bodies.append(body)
            if body["lora_name"] in self.loaded:
                return web.Response(status=400, text=f"The lora adapter '{body['lora_name']}' has already been loaded.")
            if not os.path.isdir(body["lora_path"]):
                return web.Response(status=404, text="no such adapter path")
            self.loaded.add(body["lora_name"])
            return web.Response(text="Success")

        async def unload(request: web.Request) -> web.Response:
            body = await request.json()
            if body["lora_name"] not in self.loaded:
                return web.Response(status=404, text=f"The lora adapter '{body['lora_name']}' cannot be found.")
            self.loaded.discard(body["lora_name"])
            return web.Response(text="Success")

        async def chat(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            await asyncio.sleep(self.delay_s)
            if not body.get("stream"):
                return web.json_response({"served_by": self.name, "query": request.query_string})
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            for i in range(3):
                await out.write(f"data: {json.dumps({'i': i, 'by': self.name})}\n\n".encode())
                await asyncio.sleep(0.01)
            await out.write(b"data: [DONE]\n\n")
            return out

        async def health(_request: web.Request) -> web.Response:
            return web.Response(text="")

        app = web.Application()
        app.router.add_post("/v1/load_lora_adapter", load)
        app.router.add_post("/v1/unload_lora_adapter", unload)
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/health", health)
        return app


async def test_gate_loads_an_adapter_on_every_node_once_visible(tmp_path: Path, serve: Any) -> None:
    import aiohttp

    path = tmp_path / "runs" / "r1" / "adapters" / "step-1"
    syncs = {"head": 0}

    def head_sync() -> None:  # the second reload brings the trainer's committed adapter
        syncs["head"] += 1
        if syncs["head"] == 2:
            path.mkdir(parents=True)

    a, b = FakeVllm("a"), FakeVllm("b")
    url_a, url_b = await serve(a.app()), await serve(b.app())
    peer = await serve(AdapterGate([url_b], sync=lambda: None, sync_interval_s=0.05).app())
    head = await serve(AdapterGate([url_a, peer], peers=[peer], sync=head_sync, sync_interval_s=0.05).app())
    body = {"lora_name": "step-1", "lora_path": str(path), "policy_version": 1}
    async with aiohttp.ClientSession() as s:
        async with s.post(head + "/v1/load_lora_adapter", json=body) as r:
            assert r.status == 200, await r.text()
            assert "2 node(s)" in await r.text()
        assert syncs["head"] == 2
        assert a.loaded == b.loaded == {"step-1"}
        assert a.bodies[0] == b.bodies[0] == {"lora_name": "step-1", "lora_path": str(path)}  # vLLM's fields only
        async with s.post(head + "/v1/load_lora_adapter", json=body) as r:  # a retried call: already there
            assert r.status == 200
        for _ in range(2):  # the second time it is already gone everywhere: still done
            async with s.post(head + "/v1/unload_lora_adapter", json={"lora_name": "step-1"}) as r:
                assert r.status == 200
        assert a.loaded == b.loaded == set()
        async with s.post(head + "/v1/load_lora_adapter", json={"lora_name": "x"}) as r:
            assert r.status == 400 and "lora_path" in await r.text()


async def test_gate_refuses_an_adapter_that_never_appears(tmp_path: Path, serve: Any) -> None:
    import aiohttp

    a = FakeVllm("a")
    gate = await serve(AdapterGate([await serve(a.app())], sync=lambda: None, visible_wait_s=0.3,
                                   sync_interval_s=0.05).app())
    async with aiohttp.ClientSession() as s, s.post(gate + "/v1/load_lora_adapter",
                      json={"lora_name": "step-9", "lora_path": str(tmp_path / "missing")}) as r:
        assert r.status == 404
        assert "not visible" in (await r.json())["error"]["message"]
    assert a.bodies == []  # vLLM was never asked


async def test_gate_proxies_and_spreads_requests(serve: Any) -> None:
    import aiohttp

    a, b = FakeVllm("a", delay_s=0.3), FakeVllm("b", delay_s=0.3)
    gate = await serve(AdapterGate([await serve(a.app()), await serve(b.app())]).app())
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        async def one(stream: bool) -> Any:
            async with s.post(gate + "/v1/chat/completions?x=1", json={**chat, "stream": stream}) as r:
                assert r.status == 200
                return await r.text() if stream else await r.json()

        plain = await asyncio.gather(one(False), one(False))
        assert sorted(p["served_by"] for p in plain) == ["a", "b"]  # two at once: one each
        assert all(p["query"] == "x=1" for p in plain)
        streamed = await one(True)
        events = [line for line in streamed.split("\n\n") if line]
        assert len(events) == 4 and events[-1] == "data: [DONE]"
        async with s.get(gate + "/health") as r:
            assert r.status == 200


async def test_gate_reports_a_dead_upstream(serve: Any) -> None:
    import aiohttp

    gate = await serve(AdapterGate([f"http://127.0.0.1:{_free_port()}"]).app())
    async with aiohttp.ClientSession() as s:
        async with s.post(gate + "/v1/chat/completions", json={}) as r:
            assert r.status == 502 and "failed" in (await r.json())["error"]["message"]
        async with s.get(gate + "/health") as r:
            assert r.status == 503


def test_run_gate_serves_in_a_thread_and_reports_a_taken_port() -> None:
    from workbench_cloud.vllm_gate import run_gate, wait_healthy

    port = _free_port()
    upstream = f"http://127.0.0.1:{_free_port()}"  # nothing there: the gate answers 503 for /health
    stop = run_gate(AdapterGate([upstream]), "127.0.0.1", port)
    try:
        with pytest.raises(RuntimeError, match="not healthy"):
            wait_healthy(f"http://127.0.0.1:{port}/health", deadline_s=0.3, poll_s=0.1)
        with pytest.raises(RuntimeError, match="could not listen"):
            run_gate(AdapterGate([upstream]), "127.0.0.1", port)
    finally:
        stop()


# -- the orchestrator's wait for the inference URL ----------------------------------------------------------
def test_wait_for_url() -> None:
    answers = iter([None, None, "http://[fdaa::1]:8000"])
    assert wait_for_url(lambda: next(answers), lambda: None, timeout_s=5, poll_s=0.01) == "http://[fdaa::1]:8000"

    def dead() -> None:
        raise RuntimeError("the inference function failed: OOM")

    with pytest.raises(RuntimeError, match="OOM"):
        wait_for_url(lambda: None, dead, timeout_s=5, poll_s=0.01)
    with pytest.raises(TimeoutError):
        wait_for_url(lambda: None, lambda: None, timeout_s=0.05, poll_s=0.01)


def test_cloud_run_config_and_trainer_spawn(bundle: Path) -> None:
    spawned: list[tuple[Any, ...]] = []

    class FakeFunction:
        def spawn(self, *args: Any) -> str:
            spawned.append(args)
            return "fc-1"

    run = CloudRun(make_spec(bundle), "http://[fdaa::1]:8000", FakeFunction())
    cfg = run.cloud_config()
    assert cfg["base_url"] == "http://[fdaa::1]:8000/v1" and cfg["world_size"] == 16
    assert cfg["run_dir"] == f"{RUNS_PATH}/0101-abc123" and cfg["bundle_path"] == BUNDLE_PATH
    json.dumps(cfg)
    assert run.start_trainer(["workbench_local.training.worker", "--run", "r"]) == "fc-1" and run.calls == ["fc-1"]
    spec_json, argv = spawned[0]
    assert ModalSpec.from_json(spec_json).run_id == "0101-abc123" and argv == ["workbench_local.training.worker", "--run", "r"]
    assert all(v not in spec_json for v in SECRET_VALUES.values())


# -- the app's definition, built with no network and no token -------------------------------------------------
@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Any connection attempt or Modal client creation fails the test (and is recorded)."""
    attempts: list[str] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(repr(args[:2]))
        raise AssertionError(f"network access while building the app: {args[:2]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    for var in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MODAL_SERVER_URL", "https://modal.invalid")
    monkeypatch.setenv("MODAL_CONFIG_PATH", "/nonexistent/.modal.toml")
    if HAVE_MODAL:
        from modal.client import _Client

        monkeypatch.setattr(_Client, "from_env", classmethod(refuse))
        monkeypatch.setattr(_Client, "from_credentials", classmethod(refuse))
    yield attempts
    assert attempts == []


@needs_modal
def test_app_definition(bundle: Path, offline: list[str]) -> None:
    from workbench_cloud.modal.app import app_functions, build_app, describe_app
    from workbench_cloud.modal.image import GPU_PINS

    spec = make_spec(bundle)
    app = build_app(spec)
    assert app.name == "workbench-0101-abc123" and app.app_id is None  # defined, never sent
    d = describe_app(app)
    fns = d["functions"]
    assert set(fns) == {"inference", "trainer", "orchestrator"}
    assert fns["inference"]["gpu"] == "H200:8" and fns["inference"]["nodes"] == 1 and not fns["inference"]["clustered"]
    assert fns["trainer"]["gpu"] == "H200:8" and fns["trainer"]["nodes"] == 2 and fns["trainer"]["clustered"]
    assert fns["trainer"]["rdma"] is True
    assert fns["orchestrator"]["gpu"] is None and fns["orchestrator"]["cpu"] == 8.0
    for f in fns.values():
        assert f["volumes"] == {RUNS_PATH: "workbench-runs", HF_CACHE_PATH: "workbench-hf-cache"}
        assert f["secrets"] == ["HF_TOKEN", "OPENAI_API_KEY", "wandb"]
        assert f["timeout_s"] == 86400 and f["startup_timeout_s"] == 3600
    assert d["secrets"] == ["HF_TOKEN", "OPENAI_API_KEY", "wandb"]
    assert d["gpus_total"] == 24 and d["run_dir"] == f"{RUNS_PATH}/0101-abc123"
    steps = "\n".join(d["image"]["steps"])
    for name, version in GPU_PINS.items():
        assert f"{name}=={version}" in steps
    assert all(f"{p}==" in steps for p in ("vllm", "torch", "peft"))
    assert f"add_local_dir {bundle.resolve()} {BUNDLE_PATH}" in steps
    assert "add_local_python_source workbench workbench_local workbench_cloud" in steps
    text = json.dumps(d)  # JSON-able (for `workbench launch --plan --json`), and no secret value in it
    for value in SECRET_VALUES.values():
        assert value not in text
    docker = d["image"]["dockerfile"]
    # Modal's own rendering of the layers: best effort in the product (it reads private attributes), but with
    # the installed modal it must work; a modal release that moves them fails here (update dockerfile_commands).
    assert docker is not None, "dockerfile_commands() cannot read this modal version's image layers"
    install = next(line for line in docker if "uv pip install" in line)
    assert all(f"{n}=={v}" in install for n, v in GPU_PINS.items())
    assert "ENV VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in docker
    assert any(str(bundle.resolve()) in line and BUNDLE_PATH in line for line in docker)
    roles = app_functions(app)
    assert set(roles) == set(fns)
    # What each container does: import the module and take the module-level function by name.
    for f in fns.values():
        module, name = f["entry"].rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name))


@needs_modal
def test_app_clusters_follow_the_spec(bundle: Path, offline: list[str]) -> None:
    from workbench_cloud.modal.app import build_app, describe_app

    small = describe_app(build_app(make_spec(bundle, run_id="small", gpu="H100", gpus_per_node=1, trainer_nodes=1,
                                             secrets={}, secret_names=())))["functions"]
    assert small["trainer"]["gpu"] == "H100:1" and not small["trainer"]["clustered"]
    assert small["inference"]["secrets"] == []
    big = describe_app(build_app(make_spec(bundle, run_id="big", trainer_nodes=20, inference_nodes=8,
                                           region="us-east")))
    assert big["functions"]["trainer"]["nodes"] == 20 and big["functions"]["inference"]["nodes"] == 8
    assert big["functions"]["inference"]["clustered"] and not big["functions"]["inference"]["rdma"]
    assert big["functions"]["orchestrator"]["regions"] == ["us-east"] and big["gpus_total"] == 224


@needs_modal
def test_app_needs_the_bundle(tmp_path: Path, offline: list[str]) -> None:
    from workbench_cloud.modal.app import build_app, describe_app

    with pytest.raises(ConfigError, match="workbench package"):
        build_app(make_spec(tmp_path / "missing"))
    with pytest.raises(ValueError, match="build_app"):
        import modal

        describe_app(modal.App("not-ours"))


if __name__ == "__main__":  # a rank of the launch tests above (run by workbench_local.training.launcher)
    sys.exit(_probe(sys.argv[1], sys.argv[2]))
