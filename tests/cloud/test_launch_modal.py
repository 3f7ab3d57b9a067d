"""`workbench launch --backend modal`, offline: everything up to the spawn is real (bundle, plan, spec,
store records, the budget-guarded follow of the stream); Modal itself cannot be reached from here, so
the spawn and the ``modal.Dict`` behind the event log are stood in for by a local store exported into
an in-memory key-value log (the same ``KeyValueLog`` the real Dict backs)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud import stream
from workbench_cloud.modal.launch import launch_modal, modal_spec_for
from workbench_cloud.modal.spec import ModalSpec
from workbench_cloud.plan import load_launch_config, make_plan

from tests.cloud.test_package_login_cli import env, workbench  # noqa: F401  (a fixture)
from workbench.errors import ConfigError
from workbench.store import Store

CONFIG = Path(__file__).resolve().parents[2] / "cloud_runtime" / "configs" / "long-context-28node.toml"
LORA = {"trainer.lora": True, "trainer.lora_rank": 32}


def _planned(overrides: dict[str, Any] | None = None) -> tuple[Any, Any]:
    launch = load_launch_config(CONFIG, {**LORA, **(overrides or {})}, "arithmetic")
    return launch, make_plan(launch)


def test_a_launch_spawns_the_planned_cluster_and_follows_its_stream(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    dicts: dict[str, dict[str, Any]] = {}
    monkeypatch.setattr(stream.KeyValueLog, "modal",
                        classmethod(lambda cls, name, prefix="": cls(dicts.setdefault(name, {}), prefix)))
    launch, plan = _planned()
    spawned: list[tuple[ModalSpec, dict[str, Any]]] = []

    def spawn(spec: ModalSpec, job: dict[str, Any]) -> str:
        """What the orchestrator would stream: a finished run with two steps and its GPU cost."""
        spawned.append((spec, job))
        remote = Store(tmp_path / "remote.db")
        remote.create_run(spec.run_id, kind="train", env_name="arithmetic", model=spec.base_model, status="running")
        for step in (1, 2):
            remote.record_train(spec.run_id, step, "step", {"reward_mean": step / 4}, f"step-{step}")
        remote.conn.execute("INSERT INTO cost_event (run_id, kind, provider, model, quantity, unit, usd, created_at) "
                            "VALUES (?, 'gpu_seconds', 'modal', 'H200', 224, 'gpu_seconds', 2.5, ?)",
                            (spec.run_id, time.time()))
        remote.update_run(spec.run_id, status="completed")
        remote.conn.commit()
        remote.close()
        stream.Exporter(tmp_path / "remote.db", spec.run_id, stream.open_log(job["stream"])).pump()
        return "fc-test"

    store = Store(tmp_path / "local.db")
    started: list[str] = []
    out = launch_modal(store, launch, plan, budget_usd=100.0, spawn=spawn, on_start=started.append, timeout_s=30)

    (spec, job), = spawned
    assert out.status == "completed" and out.run_id == spec.run_id == started[0]
    assert out.spent_usd == pytest.approx(2.5)
    # The spec is the plan's cluster: whole nodes per role, the model, LoRA, context, the bundle's hash.
    assert (spec.trainer_nodes, spec.inference_nodes, spec.gpus_per_node) == (plan.trainer_gpus // 8,
                                                                              plan.inference_gpus // 8, 8)
    assert spec.gpu == plan.gpu and spec.base_model == "zai-org/GLM-4.5" and spec.lora_rank == 32
    assert spec.max_model_len == launch.cloud.context_length and spec.bundle_hash == out.bundle_hash
    assert spec.secrets == {}  # the Modal token drives the SDK on the laptop; it never enters the spec
    assert job["stream"] == {"kind": "modal_dict", "name": spec.events_dict_name}
    assert job["cost"]["gpus"] == plan.total_gpus and job["config"]["env"]["name"] == "arithmetic"
    # The trainer's shape in the run's tables is the cluster's: its nodes, a process per GPU, and the plan's
    # context parallelism (one 131K sequence split over a node's 8 GPUs).
    trainer = job["config"]["trainer"]
    assert (trainer["nodes"], trainer["ranks"], trainer["context_parallel"]) == (spec.trainer_nodes, 8, 8)
    run = store.get_run(out.run_id)
    assert run["config"]["launch"]["backend"] == "modal" and run["config"]["launch"]["call_id"] == "fc-test"
    assert "ak-test" not in json.dumps(run["config"]) and "as-test" not in json.dumps(run["config"])
    assert [r["step"] for r in store.train_records(out.run_id, "step")] == [1, 2]
    store.close()


def test_a_failed_spawn_marks_the_run_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    launch, plan = _planned()

    def spawn(spec: ModalSpec, job: dict[str, Any]) -> str:
        raise RuntimeError("Modal said no: workspace over its GPU quota")

    store = Store(tmp_path / "local.db")
    with pytest.raises(RuntimeError, match="GPU quota"):
        launch_modal(store, launch, plan, spawn=spawn)
    (status, error), = store.conn.execute("SELECT status, error FROM run").fetchall()
    assert status == "failed" and "GPU quota" in error
    store.close()


@pytest.mark.parametrize(("overrides", "message"), [
    ({"trainer.model": "tiny"}, "Hugging Face id"),
])
def test_what_modal_cannot_run_as_planned_is_refused(overrides: dict[str, Any], message: str,
                                                       tmp_path: Path) -> None:
    launch, plan = _planned(overrides)

    class Bundle:
        path, hash = tmp_path, "0" * 64

    with pytest.raises(ConfigError, match=message):
        modal_spec_for(launch, plan, Bundle(), "r1", {})


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_full_fine_tuning_runs_on_modal_with_vllm_reloading_whole_weights(lora: bool, tmp_path: Path) -> None:
    """trainer.lora = false: vLLM serves without LoRA, in dev mode, and each step reloads its weights
    through the gate's /update_weights (tests/cloud/test_modal_weight_update.py)."""
    from workbench_cloud.modal.inference import vllm_command

    launch, plan = _planned({"trainer.lora": lora})

    class Bundle:
        path, hash = tmp_path, "0" * 64

    spec = modal_spec_for(launch, plan, Bundle(), "r1", {})
    assert spec.full_weights is (not lora)
    assert ("--enable-lora" in vllm_command(spec)) is lora


def test_without_a_modal_token_nothing_is_launched(tmp_path: Path, env: dict[str, str]) -> None:  # noqa: F811
    db = tmp_path / "wb.db"
    out = workbench(["launch", "arithmetic", "--config", CONFIG, "--backend", "modal", "--trainer.lora", "true",
                     "--budget", "1000000", "--db", db], env)
    assert out.rc == 2 and "workbench login modal" in out.stderr and "Traceback" not in out.stderr
    assert "never run on Modal" in out.stderr  # said before anything else happens
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0  # the store has no run
