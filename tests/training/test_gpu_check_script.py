"""scripts/gpu_check.py: without CUDA it refuses in one line; on the CPU with a tiny config it runs every
phase (LoRA and full fine-tuning steps through the real trainer, both weight updates into the real
server, generation after each) and every sharded-training section (FSDP over 2 gloo processes with its
memory against memory.py's, a DCP checkpoint round trip, the chunked loss, the Trainer under context
parallelism forward only) and says that no GPU ran; the vLLM section says why it is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def _run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_without_cuda_it_refuses_in_one_line() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so the script runs instead of refusing")
    p = _run()
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and "CUDA is not available" in lines[0], lines


@pytest.mark.slow  # trains and serves a tiny model through every phase on the CPU
@pytest.mark.timeout(300)
def test_cpu_smoke_runs_every_phase_and_claims_no_gpu() -> None:
    p = _run("--device", "cpu", "--size", "small", "--steps", "1", "--sections", "none", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads([ln for ln in p.stdout.splitlines() if ln.strip()][-1])
    assert (s["device"], s["gpu"], s["gpu_ran"], s["skipped"]) == ("cpu", None, False, {}), s
    text = json.dumps(s)
    for phase in ("lora", "full", "serve"):
        assert phase in text, s


@pytest.mark.slow  # spawns gloo processes for FSDP and context parallelism
@pytest.mark.timeout(900)
def test_cpu_smoke_runs_every_section_and_claims_no_gpu() -> None:
    p = _run("--device", "cpu", "--size", "small", "--phases", "none", "--json", timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads([ln for ln in p.stdout.splitlines() if ln.strip()][-1])
    assert (s["device"], s["gpu"], s["gpu_ran"], s["phases"]) == ("cpu", None, False, {}), s
    sec = s["sections"]
    assert {k: v["status"] for k, v in sec.items() if k != "vllm_update"} == {
        "fsdp": "ran", "checkpoint": "ran", "chunked_loss": "ran", "context_parallel": "ran"}, sec
    assert sec["vllm_update"]["status"].startswith("skipped: "), sec["vllm_update"]
    fsdp = sec["fsdp"]
    assert fsdp["world"] == 2 and fsdp["backend"] == "gloo" and len(fsdp["ranks"]) == 2
    for r in fsdp["ranks"]:
        assert r["sharded_params"] and r["skipped"] is None
        # the measured shards against memory.py's prediction (Adam's step counters are the only extra)
        assert r["measured_over_predicted"] == pytest.approx(1.0, abs=0.01), r
    assert fsdp["ranks"][0]["loss"] == pytest.approx(fsdp["ranks"][1]["loss"])
    assert sec["checkpoint"]["sharded"] and sec["checkpoint"]["restored"] and sec["checkpoint"]["moved_between"]
    assert sec["checkpoint"]["ranks_restored"] == [True, True]
    chunked, whole = sec["chunked_loss"]["runs"]
    assert chunked["loss_chunk_tokens"] > 0 and whole["loss_chunk_tokens"] == 0
    assert chunked["loss"] == pytest.approx(whole["loss"], rel=1e-5) and chunked["loss"] > 1.0  # mean NLL
    assert chunked["peak_bytes"] is None and whole["peak_bytes"] is None  # no CUDA peak on a CPU
    cp = sec["context_parallel"]
    assert cp["cp"] == 2 and "forward only" in cp["what"] and cp["one_process"]["loss"] > 1.0  # mean NLL
    for r in cp["ranks"]:  # the Trainer's evaluate split over 2 ranks: one process's loss
        assert r["loss_abs_diff"] < 1e-5, r
