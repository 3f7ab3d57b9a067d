"""`workbench train` end to end through the real processes (inference server, orchestrator,
trainer) on the tiny model, on the CPU; resuming; stale rollouts dropped; bad input."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.store import Store
from workbench.training.algorithms import Branch, TrainRollout
from workbench.training.run_config import resolve

from .helpers import ROOT, server_env

SMALL = ["--loop.groups_per_step", "2", "--loop.rollouts_per_task", "4", "--loop.max_tokens", "12",
         "--loop.concurrency", "8", "--loop.checkpoint_every", "2", "--threads", "1"]


def _train(tmp: Path, *args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
    env = server_env()
    env["XDG_DATA_HOME"] = str(tmp / "data")  # run directories (config, adapters, checkpoint) go here
    return subprocess.run([sys.executable, "-m", "workbench.cli", "train", *args, "--db", str(tmp / "wb.db")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("train")
    # lr as the trainer's default (arithmetic's shipped config trains 30x harder): a step ahead, the
    # mismatch-KL below then stays a measure of numerics, not of one large update.
    out = _train(tmp, "arithmetic", "--max-steps", "3", "--trainer.model", str(tiny_dir), "--loop.eval_tasks", "4",
                 "--loop.eval_every", "2", "--trainer.lr", "1e-4", "--json", *SMALL)
    assert out.returncode == 0, out.stderr
    return tmp, json.loads(out.stdout.strip().splitlines()[-1])


def test_three_steps_through_the_real_processes(trained: tuple[Path, dict[str, Any]]) -> None:
    tmp, summary = trained
    assert summary["steps"] == 3 and summary["dropped"] >= 0 and summary["skipped_steps"] == 0
    assert {"run_id", "reward_first", "reward_last", "eval_first", "eval_last"} <= set(summary)
    store = Store(tmp / "wb.db")
    run = store.get_run(summary["run_id"])
    assert run["kind"] == "train" and run["status"] == "completed"
    steps = store.train_records(run["id"], "step")
    assert [s["step"] for s in steps] == [1, 2, 3] and [s["message"] for s in steps] == ["step-1", "step-2", "step-3"]
    for s in steps:
        m = s["metrics"]
        for key in ("reward_mean", "reward_std", "advantage_mean", "loss", "mismatch_kl", "masked_fraction",
                    "entropy", "tokens_per_s", "dropped", "wait_s", "train_s", "update_s", "grad_norm"):
            assert key in m, key
        assert any(k.startswith("staleness_") and k.removeprefix("staleness_").isdigit() for k in m)
        assert abs(m["mismatch_kl"]) < 1e-3  # the trainer reproduces the server's logprobs of version N
    # Held-out evals at the start, every 2 steps and at the end, each its own eval run.
    evals = store.train_records(run["id"], "eval")
    assert [e["step"] for e in evals] == [0, 2, 3]
    assert all(store.get_run(e["message"])["config"]["train_run"] == run["id"] for e in evals)
    # Every token carries the policy version that produced it: later groups come from the adapters.
    models = {r[0] for r in store.conn.execute("SELECT model FROM rollout WHERE run_id=?", (run["id"],))}
    assert models & {"step-1", "step-2", "step-3"}, models
    assert (tmp / "data" / "workbench" / "runs" / run["id"] / "checkpoint" / "trainer.json").exists()
    store.close()
    # `workbench runs RUN` shows the steps.
    env = server_env()
    shown = subprocess.run([sys.executable, "-m", "workbench.cli", "runs", run["id"], "--db", str(tmp / "wb.db"),
                            "--json"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout.strip().splitlines()[-1])["steps"]) == 3


def test_resume_continues_from_the_checkpoint(trained: tuple[Path, dict[str, Any]]) -> None:
    tmp, summary = trained
    with sqlite3.connect(tmp / "wb.db") as conn:
        last_group = conn.execute("SELECT MAX(task_index) FROM rollout WHERE run_id=?", (summary["run_id"],)).fetchone()[0]
        cursor = conn.execute("SELECT json_extract(metrics, '$.last_pk') FROM train_metric WHERE run_id=? AND "
                              "kind='step' AND step=3", (summary["run_id"],)).fetchone()[0]
        ahead = conn.execute("SELECT COUNT(DISTINCT task_index) FROM rollout WHERE run_id=? AND pk > ?",
                             (summary["run_id"], cursor)).fetchone()[0]  # sampled ahead of step 3's batch
    out = _train(tmp, "--resume", summary["run_id"], "--max-steps", "6", "--json", "--threads", "1")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["steps"] == 6
    store = Store(tmp / "wb.db")
    steps = [s["step"] for s in store.train_records(summary["run_id"], "step")]
    events = [e["message"] for e in store.train_records(summary["run_id"], "event")]
    assert steps == [1, 2, 3, 4, 5, 6]
    assert "resumed from the checkpoint of step 3" in events
    said = next(e for e in store.train_records(summary["run_id"], "event") if e["message"].startswith("resumed"))
    assert said["metrics"]["groups_ahead"] == ahead  # the trainer takes them before any the new orchestrator samples
    # The resumed orchestrator sampled nothing before the trainer said where it resumed from: every new group
    # comes from the checkpoint's policy or a newer one, and none was dropped as stale.
    resumed = {r[0] for r in store.conn.execute("SELECT model FROM rollout WHERE run_id=? AND task_index > ?",
                                                (summary["run_id"], last_group))}
    assert resumed and resumed <= {f"step-{n}" for n in range(3, 7)}, resumed
    assert not any(m.startswith("dropped a whole batch") for m in events), events
    # The resumed groups get new group indices: no rollout id was written twice.
    n, distinct = store.conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM rollout WHERE run_id=?",
                                     (summary["run_id"],)).fetchone()
    assert n == distinct
    store.close()


def test_full_fine_tuning_publishes_whole_weights(tiny_dir: Path, tmp_path: Path) -> None:
    """trainer.lora = false: each step's weights replace the server's in place (/update_weights);
    new groups ask for the base model's own name and carry the newer policy version."""
    from workbench.training.data import load_rollouts

    out = _train(tmp_path, "arithmetic", "--max-steps", "2", "--trainer.model", str(tiny_dir), "--trainer.lora",
                 "false", "--trainer.lr", "1e-4", "--loop.eval_tasks", "0", "--sync", "--json", *SMALL)
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout.strip().splitlines()[-1])["run_id"]
    store = Store(tmp_path / "wb.db")
    steps = store.train_records(run_id, "step")
    assert [s["step"] for s in steps] == [1, 2] and [s["message"] for s in steps] == ["", ""]
    assert all(abs(s["metrics"]["mismatch_kl"]) < 1e-3 for s in steps)  # the server runs the trainer's weights
    models = {r[0] for r in store.conn.execute("SELECT model FROM rollout WHERE run_id=?", (run_id,))}
    assert not any(m.startswith("step-") for m in models), models
    versions = {r.policy_version for r in load_rollouts(store.conn, run_id)[0]}
    assert 1 in versions, versions  # in sync mode step 2 trains on groups sampled from version 1
    weights = tmp_path / "data" / "workbench" / "runs" / run_id / "weights"
    assert sorted(p.name for p in weights.iterdir()) == ["step-2"]  # one copy kept: the newest
    assert (weights / "step-2" / "model.safetensors").is_file()
    final = weights.parent / "final"  # the run's last weights, in Hugging Face's layout
    assert (final / "model.safetensors").is_file() and (final / "config.json").is_file()
    assert any(e["message"] == f"final weights of step 2 at {final}" for e in store.train_records(run_id, "event"))
    store.close()


def _rollout(group: str, i: int, version: int, reward: float) -> TrainRollout:
    return TrainRollout(f"{group}.{i}", group, reward, [Branch([1, 2, 3, 4], [0.0, 0.0, -1.0, -1.2], [0, 0, 1, 1],
                                                                version)])


def test_stale_groups_are_dropped_and_counted(tiny_dir: Path, tmp_path: Path) -> None:
    from workbench_local.training.worker import TrainLoop

    store = Store(tmp_path / "wb.db")
    store.create_run("r1", kind="train", env_name="arithmetic", created_at=0.0)
    cfg = resolve(None, {"trainer.model": str(tiny_dir), "loop.max_off_policy_steps": 1,
                         "loop.rollouts_per_task": 2, "loop.checkpoint_every": 0}, "arithmetic")
    loop = TrainLoop(store, "r1", "http://127.0.0.1:9", tmp_path / "run", cfg)
    loop.trainer.step_count = 3  # the trainer is at policy version 3
    stale = [[_rollout("g0", 0, 1, 1.0), _rollout("g0", 1, 1, 0.0)]]  # sampled by version 1: 2 steps old
    assert loop.train_once(stale) == "event"
    rec = store.train_records("r1", "event")[-1]
    assert rec["message"] == "dropped a whole batch of 2 stale rollouts" and rec["metrics"]["dropped"] == 2.0
    assert rec["metrics"]["staleness_2"] == 2.0
    assert loop.trainer.step_count == 3  # nothing trained
    store.close()


def test_a_trainer_without_a_checkpoint_says_a_run_that_stepped_starts_over(tiny_dir: Path, tmp_path: Path) -> None:
    """Its orchestrator waits for the trainer's word before sampling; a fresh run's trainer says nothing."""
    from workbench_local.training.worker import TrainLoop

    store = Store(tmp_path / "wb.db")
    cfg = resolve(None, {"trainer.model": str(tiny_dir), "loop.checkpoint_every": 0}, "arithmetic")
    for run, stepped in (("fresh", False), ("stepped", True)):
        store.create_run(run, kind="train", env_name="arithmetic", created_at=0.0)
        if stepped:
            store.record_train(run, 1, "step", {"last_pk": 4.0}, "step-1")
        assert TrainLoop(store, run, "http://127.0.0.1:9", tmp_path / run, cfg).resume() == 0
        said = [e["message"] for e in store.train_records(run, "event")]
        assert said == (["resumed from the checkpoint of step 0: no checkpoint on disk, training starts over"]
                        if stepped else []), said
    store.close()


@pytest.mark.slow  # a `workbench train` process per case (in process: tests/training/test_train_config.py)
def test_config_errors_are_one_clear_line(tmp_path: Path) -> None:
    bad_key = _train(tmp_path, "arithmetic", "--trainer.lrr", "1e-4")
    assert bad_key.returncode != 0 and "unknown key trainer.lrr (did you mean 'lr'?)" in bad_key.stderr
    assert "Traceback" not in bad_key.stderr
    toml = tmp_path / "run.toml"
    toml.write_text('[loop]\nmax_stepz = 3\n')
    bad_file = _train(tmp_path, "arithmetic", "--config", str(toml))
    assert "unknown key loop.max_stepz (did you mean 'max_steps'?)" in bad_file.stderr
    bad_json = _train(tmp_path, "arithmetic", "-a", "{x", "--loop.groups_per_step", "500")
    assert bad_json.returncode != 0 and "Traceback" not in bad_json.stderr
    too_big = _train(tmp_path, "arithmetic", "-a", '{"n": 10}', "--loop.groups_per_step", "50", "--loop.eval_tasks", "0")
    assert too_big.returncode != 0 and "larger than the task set (10 training tasks)" in too_big.stderr
    bad_target = _train(tmp_path, "arithmetic", "--env.args", "{n = 10}", "--trainer.target_modules", '["nope"]',
                        "--max-steps", "1", "--loop.groups_per_step", "1", "--loop.rollouts_per_task", "2",
                        "--loop.eval_tasks", "0", "--threads", "1")
    assert bad_target.returncode != 0 and "nope" in bad_target.stderr and "Traceback" not in bad_target.stderr
    dry = _train(tmp_path, "arithmetic", "--dry-run", "--trainer.lr", "3e-4", "--sync")
    assert dry.returncode == 0 and "lr = 0.0003" in dry.stdout and "sync = true" in dry.stdout
    assert "async_level = 0" in dry.stdout
    # Nothing was written for the failed runs except what they recorded: the one that got as far as building
    # the trainer (bad_target) is a failed run; the others stopped at their configuration, before any run.
    assert (tmp_path / "wb.db").is_file()
    con = sqlite3.connect(tmp_path / "wb.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert con.execute("SELECT kind, status FROM run").fetchall() == [("train", "failed")]


@pytest.mark.slow  # a `workbench train` process per case (in process: tests/training/test_train_config.py)
@pytest.mark.parametrize(("args", "line"), [
    (["--trainer.lr", "fast"], "trainer.lr must be a number, not 'fast'"),
    (["--trainer.lr", "-1e-4"], "trainer.lr must be a positive number"),
    (["--trainer.lr", "nan"], "trainer.lr must be a positive number, not nan"),  # TOML reads nan as a float
    (["--trainer.lora", "yes"], "trainer.lora must be true or false"),
    (["--trainer.lora_rank", "0"], "trainer.lora_rank"),
    (["--trainer.adam_beta1", "1.5"], "trainer.adam_beta1 must be in [0, 1)"),
    (["--trainer.target_modules", "[1, 2]"], "trainer.target_modules must be a string or a list of strings"),
    (["--loop.temperature", "-1"], "loop.temperature must be a number from 0 to 5"),
    (["--loop.max_tokens", "0"], "loop.max_tokens must be a whole number of at least 1"),
    (["--loop.timeout_s", "0"], "loop.timeout_s must be a positive number"),
    (["--loop.sync", "maybe"], "loop.sync must be true or false"),
    (["--loop.max_steps", "2.5"], "loop.max_steps must be a positive integer"),
], ids=["lr-word", "lr-negative", "lr-nan", "lora-word", "rank-0", "beta-1.5", "modules-ints", "temp-negative",
        "max-tokens-0", "timeout-0", "sync-word", "steps-float"])
def test_bad_config_values_are_one_clear_line(tmp_path: Path, args: list[str], line: str) -> None:
    res = _train(tmp_path, "arithmetic", "--dry-run", *args, timeout=120)
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert res.returncode != 0 and "Traceback" not in res.stderr and len(lines) == 1, res.stderr
    assert line in lines[0], lines[0]
    toml = tmp_path / "run.toml"  # the same value in a config file
    section, _, key = args[0][2:].partition(".")
    toml.write_text(f"[{section}]\n{key} = {args[1] if args[1] not in ('fast', 'yes', 'maybe') else repr(args[1])}\n"
                    .replace("'", '"'))
    res = _train(tmp_path, "arithmetic", "--dry-run", "--config", str(toml), timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr and line in res.stderr, res.stderr


def _rank_step(rank: int, world: int, model: str, db: str, server: str, run_dir: str) -> dict[str, Any]:
    """One trainer rank of a two-process run: rank 0 alone reads, records and publishes."""
    from workbench_local.training.worker import TrainLoop

    cfg = resolve(None, {"trainer.model": model, "trainer.sharding": "ddp", "loop.rollouts_per_task": 2,
                         "loop.groups_per_step": 2, "loop.checkpoint_every": 0}, "arithmetic")
    store = Store(db) if rank == 0 else None
    loop = TrainLoop(store, "r2", server, Path(run_dir), cfg)
    if rank == 0:  # finished groups, as rank 0 would have read them from the store
        loop.pending = [_rollout(g, i, 0, float(i)) for g in ("g0", "g1") for i in range(2)]
    groups, _ = loop._next_groups()
    kind = loop.train_once(groups)
    weights = {n: p.detach().clone() for n, p in loop.trainer.model.named_parameters() if "lora_B" in n}
    return {"kind": kind, "groups": [[r.id for r in g] for g in groups], "step": loop.trainer.step_count,
            "weights": weights, "world": loop.trainer.world_size}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_two_trainer_ranks_share_one_batch_and_only_rank0_records(tiny_dir: Path, server: str,
                                                                   tmp_path: Path) -> None:
    import torch
    from workbench_local.training.distributed import launch

    from .helpers import get_json

    store = Store(tmp_path / "wb.db")
    store.create_run("r2", kind="train", env_name="arithmetic")
    store.close()
    ranks = launch(_rank_step, 2, str(tiny_dir), str(tmp_path / "wb.db"), server, str(tmp_path / "run"),
                   backend="gloo", threads_per_rank=1)
    assert [r["world"] for r in ranks] == [2, 2]
    assert ranks[0]["groups"] == ranks[1]["groups"] == [["g0.0", "g0.1"], ["g1.0", "g1.1"]]  # broadcast
    assert [r["kind"] for r in ranks] == ["step", "step"] and [r["step"] for r in ranks] == [1, 1]
    for name, w in ranks[0]["weights"].items():
        assert torch.allclose(w, ranks[1]["weights"][name], atol=1e-6), name  # the same step on both
    steps = Store(tmp_path / "wb.db").train_records("r2", "step")
    assert [s["step"] for s in steps] == [1]  # recorded once, by rank 0
    assert "step-1" in [m["id"] for m in get_json(server + "/v1/models")["data"]]  # published once
