"""What a launch on a Ray cluster asks of it, without a cluster: the trainer's placement-group bundles and, on
GPUs, the inference server's GPUs beside rank 0; whether a cluster's nodes (as ``ray.nodes()`` lists them) hold
that, and the one line naming what is missing when they do not; and the vLLM command a GPU node's inference
role runs (the same as a Modal inference node's)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray")

from workbench_cloud.ray.cluster import TrainerShape, shortfall  # noqa: E402
from workbench_cloud.vllm_gate import vllm_argv  # noqa: E402


def _node(ip: str, cpus: float, gpus: float = 0.0) -> dict[str, Any]:
    resources = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return {"NodeManagerAddress": ip, "NodeID": ip.replace(".", "") * 4, "Alive": True, "Resources": resources}


def test_on_gpus_the_first_bundle_also_holds_the_inference_servers_gpus() -> None:
    shape = TrainerShape(nodes=2, ranks=4, cpus=2.0, gpu=True, inference_gpus=2)
    assert shape.bundles() == [{"CPU": 8.0, "GPU": 6.0}, {"CPU": 8.0, "GPU": 4.0}]
    assert "the first with 2 more GPU(s) for the inference server (vLLM)" in shape.describe()
    cpu = TrainerShape(nodes=2, ranks=1, inference_gpus=2)  # on CPUs the embedded server needs no GPU
    assert cpu.bundles() == [{"CPU": 1.0}, {"CPU": 1.0}]


#: (nodes, trainer shape, None when it fits, else what the one line says)
FITS = [
    ([_node("10.0.0.1", 16, 8), _node("10.0.0.2", 16, 8)], TrainerShape(2, 4, 2.0, True, 2), None),
    ([_node("10.0.0.1", 16, 8), _node("10.0.0.2", 16, 4)], TrainerShape(2, 4, 2.0, True, 4), None),
    ([_node("10.0.0.1", 16, 4), _node("10.0.0.2", 16, 4)], TrainerShape(2, 4, 2.0, True, 2),
     "none of its 2 live node(s) has 8 CPU and 6 GPU for the first"),
    ([_node("10.0.0.1", 16, 8)], TrainerShape(2, 4, 2.0, True, 2), "missing 1 node(s) with 8 CPU and 4 GPU"),
    ([_node("10.0.0.1", 16, 8), _node("10.0.0.2", 16, 2)], TrainerShape(2, 4, 2.0, True, 2),
     "only 1 of its 2 live node(s) have that"),
    ([_node("127.0.0.1", 2), _node("127.0.0.1", 2)], TrainerShape(3, 1), "missing 1 node(s) with 1 CPU"),
]


@pytest.mark.parametrize(("nodes", "shape", "fragment"), FITS, ids=[str(i) for i in range(len(FITS))])
def test_a_cluster_holds_the_run_or_one_line_names_what_is_missing(nodes: list[dict[str, Any]],
                                                                    shape: TrainerShape, fragment: str | None) -> None:
    found = shortfall(shape, nodes)
    if fragment is None:
        assert found is None
    else:
        assert found is not None and fragment in found and "\n" not in found, found


def test_a_gpu_nodes_vllm_serves_the_runs_model_with_its_adapters() -> None:
    argv = vllm_argv("Qwen/Qwen3-8B", 41001, tensor_parallel=2, lora_rank=24, max_loras=4, max_model_len=32768)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-8B"]
    text = " ".join(argv)
    assert "--host 127.0.0.1 --port 41001" in text and "--tensor-parallel-size 2" in text
    assert "--enable-lora --max-lora-rank 32 --max-loras 4" in text and "--max-model-len 32768" in text
    full = " ".join(vllm_argv("Qwen/Qwen3-8B", 41001, full_weights=True, tool_call_parser=""))
    assert "--enable-lora" not in full and "--tool-call-parser" not in full


@pytest.mark.parametrize(("full_weights", "dev_mode"), [(False, None), (True, "1")])
def test_a_gpu_nodes_vllm_starts_with_runtime_lora_loading_and_for_full_weights_the_dev_routes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full_weights: bool, dev_mode: str | None) -> None:
    """The inference actor's vLLM (here a stand-in ``vllm`` on PATH that writes down its environment and exits)
    gets what Modal's image gives it: runtime LoRA updates, and vLLM's development routes for full weights."""
    import ray
    from workbench_cloud.ray.roles import _Inference

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    seen = tmp_path / "env.json"
    fake = bin_dir / "vllm"
    fake.write_text(f"#!{sys.executable}\nimport json, os\n"
                    f"open({str(seen)!r}, 'w').write(json.dumps(dict(os.environ)))\nraise SystemExit(1)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])  # what Ray shows an actor holding one GPU
    role = _Inference()
    try:
        with pytest.raises(RuntimeError, match="exited before it was ready"):
            role.start_vllm("Qwen/Qwen3-8B", str(tmp_path), {"full_weights": full_weights, "lora_rank": 16})
    finally:
        role.stop()
    env = json.loads(seen.read_text())
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert env.get("VLLM_SERVER_DEV_MODE") == dev_mode
    assert "inference: vllm serve Qwen/Qwen3-8B" in (tmp_path / "vllm.log").read_text()
