"""scripts/bench_vs_trl.py's Workbench side on the tiny model: a real ``workbench train`` timed from its
launch, its held-out curve, step times and training reward read back from the store. (The TRL side
needs TRL, which is no dependency: ``pip install trl==1.16.0 --no-deps`` to run it.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local_runtime.helpers import server_env

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_vs_trl.py"


@pytest.mark.timeout(420)
def test_the_workbench_side_times_a_real_run_from_its_launch(tiny_dir: Path, tmp_path: Path) -> None:
    env = server_env()
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    p = subprocess.run([sys.executable, str(SCRIPT), "--only", "workbench", "--model", str(tiny_dir), "--steps", "4",
                        "--eval-every", "2", "--eval-rollouts", "2", "--json"],
                       capture_output=True, text=True, timeout=400, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    (result,) = json.loads(p.stdout.strip().splitlines()[-1])["results"]
    assert result["trainer"] == "workbench"
    assert [c["step"] for c in result["curve"]] == [0, 2, 4]
    walls = [c["wall_s"] for c in result["curve"]]
    assert walls[0] == 0.0 and result["first_step_s"] < walls[1] < walls[2]  # from launch, past the start
    assert result["first_step_s"] > 0.5  # the start is in it: imports, the server and the trainer
    assert len(result["step_s"]) == 4 and len(result["train_reward"]) == 4
    assert 0.0 <= result["train_reward_first"] <= 1.0 and "held-out" in p.stderr
