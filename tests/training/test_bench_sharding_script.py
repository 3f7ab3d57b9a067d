"""scripts/bench_sharding.py on the tiny size: its last line is the JSON the acceptance reads, each of two
ranks holds at most 0.6 of one rank's training state, and the two losses agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_sharding.py"

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_two_ranks_hold_half_the_state_and_agree_on_the_loss() -> None:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}
    p = subprocess.run([sys.executable, str(SCRIPT), "--ranks", "1,2", "--model-size", "tiny", "--json"],
                       capture_output=True, text=True, timeout=880, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    one, two = json.loads(p.stdout.strip().splitlines()[-1])["runs"]
    assert (one["ranks"], two["ranks"]) == (1, 2)
    assert two["state_bytes_per_rank"] <= 0.6 * one["state_bytes_per_rank"]
    assert abs(two["loss"] - one["loss"]) < 1e-4 and one["loss"] > 1.0  # cross-entropy of random tokens
    assert one["peak_rss_bytes"] > 0 and two["peak_rss_bytes"] > 0
    assert "formula" in p.stdout  # the plan's formula printed next to the measured bytes
