"""`workbench launch --backend local`: the whole launch pipeline (bundle, hash check, orchestrator,
trainer, inference server, streaming, cost ledger, budget stop) with real local processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.store import Store

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--loop.groups_per_step", "2", "--loop.rollouts_per_task", "4", "--loop.max_tokens", "12",
         "--loop.concurrency", "8", "--loop.checkpoint_every", "0", "--threads", "1"]


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["HF_HUB_OFFLINE"] = "1"
    env["XDG_DATA_HOME"] = str(tmp / "data")
    env["XDG_CONFIG_HOME"] = str(tmp / "config")
    env["WORKBENCH_GPU_PRICES"] = str(tmp / "gpu_prices.json")
    return env


def _wb(tmp: Path, *args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=_env(tmp), timeout=timeout)


def _summary(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_launch_local_streams_a_run_into_the_store(tiny_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    s = _summary(_wb(tmp_path, "launch", "arithmetic", "--backend", "local", "--max-steps", "2", "--trainer.model",
                     str(tiny_dir), "--db", str(db), "--json", *SMALL))
    assert s["status"] == "completed" and s["steps"] == 2 and len(s["bundle_hash"]) == 64
    store = Store(db)
    run = store.get_run(s["run_id"])
    assert run["kind"] == "train" and run["status"] == "completed"
    assert run["config"]["launch"]["bundle_hash"] == s["bundle_hash"]
    assert [r["step"] for r in store.train_records(s["run_id"], "step")] == [1, 2]
    n = store.conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM rollout WHERE run_id = ?", (s["run_id"],)).fetchone()
    assert n[0] >= 16 and n[0] == n[1]  # at least two batches of 2 groups x 4, each once
    traced = store.conn.execute("SELECT COUNT(*) FROM trace t JOIN rollout r ON r.pk = t.rollout_pk "
                                "WHERE r.run_id = ?", (s["run_id"],)).fetchone()[0]
    assert traced == n[0]  # token-exact traces came along
    assert store.conn.execute("SELECT COUNT(*) FROM cost_event WHERE run_id = ? AND kind = 'gpu_seconds'",
                              (s["run_id"],)).fetchone()[0] >= 1
    store.close()
    # The trainer got its batches through the hand-off logs (the Modal path), not the job's store.
    handoff = tmp_path / "data" / "workbench" / "remote" / s["run_id"] / "handoff"
    shipped = [json.loads(line) for line in (handoff / "batches" / "events.jsonl").read_text().splitlines()]
    rollout_ids = [e["id"] for e in shipped if e["kind"] == "rollout"]
    assert len(rollout_ids) >= 16 and len(rollout_ids) == len(set(rollout_ids))
    records = [json.loads(line)["row"] for line in (handoff / "records" / "events.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "step"] == [1, 2]
    # The stream is done: following it again adds nothing.
    again = _wb(tmp_path, "runs", s["run_id"], "--follow", "--db", str(db), "--json", timeout=60)
    assert again.returncode == 0, again.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ?", (s["run_id"],)).fetchone()[0] == n[0]
    # Stopping a finished run is a clear error.
    stopped = _wb(tmp_path, "stop", s["run_id"], "--db", str(db), timeout=60)
    assert stopped.returncode != 0 and "already finished" in stopped.stderr


def test_the_budget_stops_a_run_within_a_step(tiny_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    priced = _wb(tmp_path, "gpu-prices", "set", "local", "cpu", "--per-second", "0.01", timeout=60)
    assert priced.returncode == 0, priced.stderr
    s = _summary(_wb(tmp_path, "launch", "arithmetic", "--backend", "local", "--max-steps", "200", "--budget",
                     "0.03", "--trainer.model", str(tiny_dir), "--db", str(db), "--json", *SMALL))
    assert s["status"] == "stopped" and s["steps"] < 200
    run = Store(db).get_run(s["run_id"])
    assert run["error"].startswith("budget reached: $")
    assert s["spent_usd"] >= 0.03  # the final cost is recorded, past the cap by at most a step's worth


def test_a_bundle_whose_hash_differs_is_refused_before_any_work(tmp_path: Path) -> None:
    built = _wb(tmp_path, "package", "arithmetic", "-o", str(tmp_path / "bundles"), "--json", timeout=120)
    assert built.returncode == 0, built.stderr
    bundle = json.loads(built.stdout.strip().splitlines()[-1])
    path = bundle.get("path") or bundle.get("dir")
    spec = tmp_path / "spec.json"
    stream = tmp_path / "stream"
    spec.write_text(json.dumps({"run_id": "r1", "config": {"env": {"name": "arithmetic"}}, "cost": {},
                                "stream": {"kind": "dir", "path": str(stream)}}))
    out = subprocess.run([sys.executable, "-m", "workbench_cloud.job", "--bundle", str(path), "--hash", "0" * 64,
                          "--spec", str(spec), "--workdir", str(tmp_path / "work")], capture_output=True, text=True,
                         cwd=ROOT, env=_env(tmp_path), timeout=120)
    assert out.returncode == 2 and "refusing to run bundle" in out.stderr
    events = [json.loads(line) for line in (stream / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "run" and events[-1]["row"]["status"] == "failed"
    assert not (tmp_path / "work" / "remote.db").exists()  # nothing started


def test_stop_and_follow_need_a_launched_run(tmp_path: Path) -> None:
    db = tmp_path / "wb.db"
    store = Store(db)
    store.create_run("r-local", kind="train", env_name="arithmetic")
    store.close()
    out = _wb(tmp_path, "stop", "r-local", "--db", str(db), timeout=60)
    assert out.returncode != 0 and "was not launched" in out.stderr and "Traceback" not in out.stderr
    out = _wb(tmp_path, "runs", "r-local", "--follow", "--db", str(db), timeout=60)
    assert out.returncode != 0 and "was not launched" in out.stderr
    out = _wb(tmp_path, "launch", "arithmetic", "--config", str(ROOT / "cloud_runtime/configs/long-context-28node.toml"),
              "--backend", "modal", "--db", str(db), timeout=60)
    assert out.returncode != 0 and "never run on Modal" in out.stderr


def test_the_monthly_budget_refuses_a_plan_and_caps_a_run(tmp_path: Path) -> None:
    import time

    db = tmp_path / "wb.db"
    (tmp_path / "config" / "workbench").mkdir(parents=True)
    (tmp_path / "config" / "workbench" / "tui.toml").write_text("[budget]\nmonthly_usd = 100.0\n")
    config = str(ROOT / "cloud_runtime/configs/long-context-28node.toml")
    refused = _wb(tmp_path, "launch", "arithmetic", "--config", config, "--plan", "--db", str(db), timeout=60)
    assert refused.returncode != 0 and "exceeds what is left of the monthly budget: $100.00 of $100.00" \
        in refused.stderr
    store = Store(db)
    store.create_run("old", kind="train", env_name="arithmetic")
    store.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                       "VALUES ('old', 'gpu_seconds', 'modal', 'H200', 1, 'gpu_seconds', 100.0, ?)", (time.time(),))
    store.close()
    spent = _wb(tmp_path, "launch", "arithmetic", "--backend", "local", "--db", str(db), timeout=60)
    assert spent.returncode != 0 and "the monthly budget of $100.00 is spent" in spent.stderr
