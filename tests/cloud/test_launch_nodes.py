"""A trainer of several processes, for real: ``workbench launch ENV --backend local --nodes 2`` runs the
trainer as two torchrun nodes on this machine (c10d rendezvous on 127.0.0.1, gloo on the loopback
interface) with the same inference role, hand-off and store streaming as one process, and
``workbench train`` with ``[trainer] ranks = 2`` runs two local processes; the run's summary carries the
world size, the node count and the sharding. Bad input is one clear line before any process starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_file
from workbench.store import Store

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--max-steps", "2", "--loop.groups_per_step", "2", "--loop.rollouts_per_task", "4", "--loop.max_tokens", "12",
         "--loop.concurrency", "8", "--loop.checkpoint_every", "0", "--loop.eval_every", "0", "--loop.eval_rollouts", "1", "--threads", "2"]

#: A launch backend from a plugin that does not say how many trainer nodes it runs (so: one).
TOY_BACKEND = '''
class ToyBackend:
    name = "toy"
    takes = "run"
    notice = ""
    label = "toy (a test plugin)"

    def preflight(self, conn, *, env, config_file=None, max_steps=None, budget_usd=None, overrides=None):
        raise RuntimeError("the test never plans")

    def check_credentials(self):
        pass

    def launch(self, store, run, plan=None, **kwargs):
        raise RuntimeError("the test never launches")


BACKEND = ToyBackend()
'''


def _env(tmp: Path) -> dict[str, str]:
    site = tmp / "site"
    write_file(site / "wb_toy_nodes" / "__init__.py", TOY_BACKEND)
    write_file(site / "wb_toy_nodes-0.1.dist-info" / "METADATA", "Metadata-Version: 2.1\nName: wb-toy-nodes\nVersion: 0.1\n")
    write_file(site / "wb_toy_nodes-0.1.dist-info" / "entry_points.txt", "[workbench.backends]\ntoy = wb_toy_nodes:BACKEND\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(site), *filter(None, [env.get("PYTHONPATH")])])
    env.update(HF_HUB_OFFLINE="1", XDG_DATA_HOME=str(tmp / "data"), XDG_CONFIG_HOME=str(tmp / "config"),
               WORKBENCH_GPU_PRICES=str(tmp / "gpu_prices.json"), GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    return env


def _wb(tmp: Path, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=_env(tmp), timeout=timeout)


def _summary(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _trainer_log(tmp: Path, run_id: str) -> str:
    logs = list((tmp / "data").rglob(f"runs/{run_id}/trainer.log"))
    assert logs, f"no trainer.log for {run_id}"
    return logs[0].read_text(errors="replace")


#: (command-line words, the one line it is refused with).
BAD = [
    (["launch", "next_number", "--backend", "local", "--nodes", "0"], "--nodes must be at least 1, not 0"),
    (["launch", "next_number", "--backend", "toy", "--nodes", "2"],
     "--nodes 2: launch backend 'toy' runs a trainer on one node only"),
    (["launch", "next_number", "--backend", "local", "--nodes", "9"],
     "--nodes 9: launch backend 'local' runs a trainer on at most 8 nodes"),
    (["launch", "next_number", "--backend", "local", "--nodes", "2", "--trainer.ranks", "1000", "--trainer.device",
      "cpu"], "trainer.nodes × trainer.ranks = 2 × 1000 = 2000 trainer processes, more than this machine's"),
    (["launch", "next_number", "--backend", "local", "--trainer.ranks", "0"], "trainer.ranks must be at least 1"),
    (["launch", "next_number", "--backend", "local", "--trainer.nodes", "-1"], "trainer.nodes must be at least 1"),
    (["train", "next_number", "--trainer.ranks", "1000", "--trainer.device", "cpu"],
     "= 1000 trainer processes, more than this machine's"),
    # context parallelism trains on CUDA only (torch's ring backward), and splits the world into whole groups
    (["launch", "next_number", "--backend", "local", "--trainer.ranks", "2", "--trainer.context_parallel", "2",
      "--trainer.device", "cpu"],
     "trainer.context_parallel = 2: context parallelism needs CUDA ring attention; trainer.device is 'cpu'"),
    (["train", "next_number", "--trainer.ranks", "2", "--trainer.context_parallel", "2", "--trainer.device", "cpu"],
     "trainer.context_parallel = 2: context parallelism needs CUDA ring attention; trainer.device is 'cpu'"),
    (["launch", "next_number", "--backend", "local", "--trainer.ranks", "3", "--trainer.context_parallel", "2"],
     "trainer.context_parallel = 2 must divide the trainer's world size (trainer.nodes × trainer.ranks = 3)"),
]


@pytest.mark.parametrize(("args", "words"), BAD, ids=[" ".join(a[2:]) for a, _ in BAD])
def test_bad_input_is_one_clear_line_before_any_process_starts(tmp_path: Path, args: list[str], words: str) -> None:
    db = tmp_path / "wb.db"
    out = _wb(tmp_path, *args, "--db", str(db), timeout=300)
    assert out.returncode != 0 and words in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    error_lines = [ln for ln in out.stderr.splitlines() if ln.startswith("error")]
    assert len(error_lines) == 1, out.stderr
    assert not (tmp_path / "data" / "workbench" / "remote").exists()  # no launched job
    assert not list((tmp_path / "data").rglob("trainer.log")) and not list((tmp_path / "data").rglob("server*.log"))
    if db.exists():
        store = Store(db)
        assert store.conn.execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0
        store.close()


#: The trainer's sharding setting for every multi-process run below, and the sharding it runs:
#: ``auto`` (the default) is FSDP over more than one rank.
SHARDINGS = [("ddp", "ddp"), ("auto", "fsdp")]


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(("setting", "sharding"), SHARDINGS)
def test_launch_runs_the_trainer_as_two_torchrun_nodes(tiny_dir: Path, tmp_path: Path, setting: str,
                                                       sharding: str) -> None:
    db = tmp_path / "wb.db"
    chosen = [] if setting == "auto" else ["--trainer.sharding", setting]
    s = _summary(_wb(tmp_path, "launch", "next_number", "--backend", "local", "--nodes", "2", "--trainer.model",
                     str(tiny_dir), *chosen, "--db", str(db), "--json", *SMALL))
    assert s["status"] == "completed" and s["world_size"] == 2 and s["nodes"] == 2 and s["sharding"] == sharding
    assert s["steps"] == 2
    log = _trainer_log(tmp_path, s["run_id"])  # the job's own run folder, where its trainer wrote
    assert "trainer rank 0 of 2" in log and "trainer rank 1 of 2" in log, log[-3000:]
    assert f"trainer rank 0 of 2: sharding {sharding}" in log and f"trainer rank 1 of 2: sharding {sharding}" in log
    assert "(node 0," in log and "(node 1," in log and "rendezvous 127.0.0.1" in log
    store = Store(db)  # the laptop's store got the streamed run: its steps, rollouts and summary
    run = store.get_run(s["run_id"])
    assert run["status"] == "completed" and run["summary"]["world_size"] == 2 and run["summary"]["nodes"] == 2
    assert [r["step"] for r in store.train_records(s["run_id"], "step")] == [1, 2]
    n = store.conn.execute("SELECT COUNT(*) FROM rollout WHERE run_id = ?", (s["run_id"],)).fetchone()[0]
    assert n >= 16
    store.close()
    shown = _wb(tmp_path, "runs", s["run_id"], "--db", str(db), "--json", timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert '"world_size": 2' in shown.stdout.replace('"world_size":2', '"world_size": 2')


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(("setting", "sharding"), SHARDINGS)
def test_train_with_two_ranks_runs_two_local_processes(tiny_dir: Path, tmp_path: Path, setting: str,
                                                       sharding: str) -> None:
    db = tmp_path / "wb.db"
    config = tmp_path / "run.toml"
    config.write_text(f'[trainer]\nranks = 2\nsharding = "{setting}"\nmodel = "{tiny_dir}"\n')
    s = _summary(_wb(tmp_path, "train", "next_number", "--config", str(config), "--db", str(db), "--json", *SMALL))
    assert s["steps"] == 2 and s["world_size"] == 2 and s["nodes"] == 1 and s["sharding"] == sharding
    log = _trainer_log(tmp_path, s["run_id"])
    assert "trainer rank 0 of 2" in log and "trainer rank 1 of 2" in log, log[-3000:]
    assert f"trainer rank 1 of 2: sharding {sharding}" in log
    store = Store(db)
    assert [r["step"] for r in store.train_records(s["run_id"], "step")] == [1, 2]
    assert store.get_run(s["run_id"])["summary"]["world_size"] == 2
    store.close()
