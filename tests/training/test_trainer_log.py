"""A failed trainer's error shows the rank's own words: ``failure_lines`` keeps the end of the log before
``torchrun``'s report (the agent's traceback and its ``ChildFailedError`` block) and adds the report's
root cause. Checked against a real ``torchrun`` whose second rank raises, and against plain logs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.training.trainer_log import failure_lines

FAILING_RANK = '''
import torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("rank one broke on a bad batch")
dist.barrier()
'''


def test_a_real_torchrun_failure_shows_the_ranks_error_and_the_root_cause(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from workbench_local.training.distributed import free_port

    script = tmp_path / "fail_rank.py"
    script.write_text(FAILING_RANK)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr",
                          "127.0.0.1", "--master-port", str(free_port()), str(script)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode != 0
    log = out.stdout + out.stderr
    assert "ChildFailedError" in log  # the agent's report is there to be cut
    lines = failure_lines(log)
    assert any("RuntimeError: rank one broke on a bad batch" in ln for ln in lines), lines
    assert not any("ChildFailedError" in ln or "torch/distributed/elastic" in ln for ln in lines), lines
    assert lines[-1].startswith("torchrun: the first rank that failed: rank      : 1"), lines[-1]
    assert "exitcode  : 1" in lines[-1]


@pytest.mark.parametrize(("log", "keep", "expected"), [
    ("", 12, []),
    ("one\ntwo\nthree\n", 2, ["two", "three"]),
    ("Traceback (most recent call last):\n  File \"x\"\nValueError: no\n", 12,
     ["Traceback (most recent call last):", "  File \"x\"", "ValueError: no"]),
    ("rank error\nTraceback (most recent call last):\n  agent\nx.ChildFailedError: \n====\n", 12, ["rank error"]),
])
def test_plain_logs(log: str, keep: int, expected: list[str]) -> None:
    assert failure_lines(log, keep) == expected
