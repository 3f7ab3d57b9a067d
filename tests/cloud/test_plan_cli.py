"""``workbench launch --plan`` and ``workbench gpu-prices`` as a user runs them (a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import cli_environment

REPO = Path(__file__).resolve().parents[2]
CONFIG_28 = REPO / "cloud_runtime" / "configs" / "long-context-28node.toml"


def run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=cli_environment(home), cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_plan_json_for_the_28_node_config(tmp_path: Path) -> None:
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--json"], tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["nodes"] == 28 and d["gpus_per_node"] == 8
    assert d["step_time_s"] < 300 and 3.0 <= d["wall_days"] <= 3.5
    assert d["total_usd"] > 0 and d["fits"] is True
    assert {"trainer_nodes", "inference_nodes", "memory", "derivation", "usd_per_step"} <= set(d)
    assert d["sharding"] == "fsdp"


@pytest.mark.slow
def test_plan_names_the_sharding_it_assumes(tmp_path: Path) -> None:
    """FSDP shards the 355B model's state over 80 trainer GPUs; a whole replica per GPU (ddp) cannot fit."""
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--json", "--trainer.sharding", "ddp"],
            tmp_path)
    assert p.returncode == 0, p.stderr
    ddp = json.loads(p.stdout.strip().splitlines()[-1])
    assert ddp["sharding"] == "ddp" and ddp["fits"] is False and ddp["memory"]["trainer"]["fits"] is False
    assert ddp["memory"]["trainer"]["weights_gb"] > 700  # 352.8B bf16 parameters on every GPU
    text = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan"], tmp_path)
    assert text.returncode == 0, text.stderr
    assert "sharding fsdp: FSDP2 full shard" in text.stdout and "workbench.training.memory" in text.stdout


def test_plan_table_shows_roles_memory_and_derivations(tmp_path: Path) -> None:
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan"], tmp_path)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    for text in ("28 × 8 GPUs = 224 GPUs", "trainer", "inference", "optimizer", "activations", "KV cache",
                 "fits", "step time", "$ / step", "days", "how each number was computed", "MFU 0.3"):
        assert text in out, text
    assert "trainer time = " in out and "total $ = " in out


def test_budget_refusal_and_overrides(tmp_path: Path) -> None:
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--budget", "1000"], tmp_path)
    assert p.returncode != 0
    err = p.stderr.strip()
    assert "plan refused" in err and "exceeds the budget of $1,000" in err and "Traceback" not in err
    assert "(--max-steps " in err and "raise --budget" in err, err  # the fields said as the command's flags
    assert len(err.splitlines()) == 1
    # a dotted override and --max-steps bring it under the budget
    ok = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--json", "--budget", "1000",
              "--max-steps", "10", "--cloud.startup_s", "0"], tmp_path)
    assert ok.returncode == 0, ok.stderr
    d = json.loads(ok.stdout.strip().splitlines()[-1])
    assert d["max_steps"] == 10 and d["within_budget"] is True


def test_unknown_cloud_key_and_launch_without_plan(tmp_path: Path) -> None:
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--cloud.gpus_per_nod", "8"], tmp_path)
    assert p.returncode != 0 and "did you mean 'gpus_per_node'" in p.stderr and "Traceback" not in p.stderr
    p = run(["launch", "arithmetic", "--config", str(CONFIG_28)], tmp_path)
    assert p.returncode != 0 and "--backend local" in p.stderr and "Traceback" not in p.stderr


def test_gpu_prices_set_changes_the_plan(tmp_path: Path) -> None:
    p = run(["gpu-prices", "set", "modal", "H200", "--per-hour", "3.6"], tmp_path)
    assert p.returncode == 0, p.stderr
    listed = json.loads(run(["gpu-prices", "list", "--json"], tmp_path).stdout.strip().splitlines()[-1])
    row = next(r for r in listed["prices"] if (r["provider"], r["gpu"]) == ("modal", "H200"))
    assert row["usd_per_gpu_s"] == 0.001 and row["source"] == "user"
    d = json.loads(run(["launch", "arithmetic", "--config", str(CONFIG_28), "--plan", "--json"],
                       tmp_path).stdout.strip().splitlines()[-1])
    assert d["usd_per_gpu_s"] == 0.001
    assert abs(d["total_usd"] - 224 * 0.001 * d["wall_s"]) < 1e-6
    bad = run(["gpu-prices", "set", "modal", "H200"], tmp_path)
    assert bad.returncode != 0 and "exactly one of" in bad.stderr
    assert run(["gpu-prices", "delete", "modal", "H200"], tmp_path).returncode == 0
