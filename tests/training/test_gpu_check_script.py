"""scripts/gpu_check.py: without CUDA it refuses in one line; on the CPU with a tiny config it runs every
phase (LoRA and full fine-tuning steps through the real trainer, both weight updates into the real
server, generation after each) and says that no GPU ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


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
    p = _run("--device", "cpu", "--size", "small", "--steps", "1", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    s = json.loads([ln for ln in p.stdout.splitlines() if ln.strip()][-1])
    assert (s["device"], s["gpu"], s["gpu_ran"], s["skipped"]) == ("cpu", None, False, {}), s
    text = json.dumps(s)
    for phase in ("lora", "full", "serve"):
        assert phase in text, s
