"""``workbench launch ENV --backend modal``: the local backend's pipeline with its roles on Modal.

The laptop does what it does for ``--backend local``: it builds and hashes the bundle, records the run
in the store, and follows the run's event log into the store with the budget guard. What differs is
where the job runs. The run config and its plan become a :class:`~workbench_cloud.modal.spec.ModalSpec`
(nodes per role, GPU, tensor parallelism, context length, LoRA rank), tokens come from keyring (the
Modal token for the SDK; a Hugging Face token, when there is one, as a ``modal.Secret``), the app is
built (:func:`workbench_cloud.modal.app.build_app`) and its orchestrator spawned detached; the event log
is the run's ``modal.Dict``.

Written against the Modal SDK and tested offline up to the spawn (``spawn=`` stands in for it there):
**it has never run on Modal**, and says so when it starts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench_cloud.launch import FINISHED, Launched
from workbench_cloud.modal.spec import ModalSpec
from workbench_cloud.stream import Event, follow, open_log

from workbench.config.paths import data_dir
from workbench.errors import ConfigError

if TYPE_CHECKING:
    from workbench.training.backends import LaunchBackend

UNVERIFIED = ("--backend modal has never run on Modal from this project: it is built against the Modal SDK and "
              "tested offline up to the spawn. Watch the first run closely (`workbench runs RUN --follow`, "
              "`workbench stop RUN`).")


def modal_spec_for(launch: Any, plan: Any, bundle: Any, run_id: str, secrets: dict[str, str]) -> ModalSpec:
    """The ModalSpec of a planned run (``launch``: a LaunchConfig; ``plan``: its Plan); refuses what Modal
    cannot run as planned, naming the key to change."""
    run, g = launch.run, plan.gpus_per_node
    if plan.provider != "modal":
        raise ConfigError(f"cloud.provider is {plan.provider!r}; --backend modal runs plans with provider = \"modal\"")
    if plan.trainer_gpus % g or plan.inference_gpus % g:
        raise ConfigError(f"Modal gives each role whole nodes of {g} GPUs, but the plan splits a node "
                          f"({plan.trainer_gpus} trainer / {plan.inference_gpus} inference GPUs); set "
                          "cloud.trainer_nodes and cloud.inference_nodes")
    model = str(run.trainer.get("model", ""))
    if model in ("", "tiny") or Path(model).expanduser().exists():
        raise ConfigError(f"trainer.model is {model!r}: on Modal vLLM serves and the trainer loads a Hugging Face "
                          "id (e.g. \"Qwen/Qwen3-8B\"); a local directory or the embedded tiny model stays here")
    region = (run.raw.get("cloud") or {}).get("region")
    return ModalSpec(
        run_id=run_id, base_model=model, bundle_dir=str(bundle.path), bundle_hash=bundle.hash, gpu=plan.gpu,
        gpus_per_node=g, trainer_nodes=plan.trainer_gpus // g, inference_nodes=plan.inference_gpus // g,
        lora_rank=int(run.trainer.get("lora_rank", 16)), max_loras=max(4, run.loop.max_off_policy_steps + 2),
        full_weights=not run.trainer.get("lora", True),  # each step's whole weights reload vLLM (vllm_weights)
        inference_tp=plan.inference_tp, max_model_len=launch.cloud.context_length, secrets=secrets,
        region=region if isinstance(region, str) else None)


def run_secrets() -> dict[str, str]:
    """What the run's containers may read: the Hugging Face token (gated weights), when one is stored."""
    from workbench.config.credentials import get_token

    hf = get_token("hf")
    return hf.env() if hf is not None else {}


@contextmanager
def modal_credentials(token: Any) -> Iterator[None]:
    """The Modal ``token`` (from ``require_token("modal")``: keyring, env or ~/.modal.toml) in the
    environment the SDK reads, for the spawn only."""
    saved = {k: os.environ.get(k) for k in token.env()}
    os.environ.update(token.env())
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _spawn_on_modal(spec: ModalSpec, job: dict[str, Any], token: Any) -> str:
    from workbench_cloud.modal.app import build_app
    from workbench_cloud.modal.app import launch as modal_launch

    with modal_credentials(token):
        return modal_launch(build_app(spec), job)


def launch_modal(store: Any, launch: Any, plan: Any, *, budget_usd: float | None = None,
                 on_event: Callable[[Event], None] | None = None, on_start: Callable[[str], None] | None = None,
                 spawn: Callable[[ModalSpec, dict[str, Any]], str] | None = None,
                 timeout_s: float | None = None) -> Launched:
    """Launch ``launch`` (a LaunchConfig, planned as ``plan``) on Modal and follow it to its end.
    ``spawn(spec, job)`` starts the orchestrator and returns its call id (default: build the app and
    :func:`workbench_cloud.modal.app.launch` it, with the Modal token in the environment)."""
    from workbench_cloud.modal.orchestrator import default_cost

    from workbench.bundles.bundle import build_bundle
    from workbench.config.credentials import require_token
    from workbench.cost.budgets import spent_usd
    from workbench.runs.evaluate import new_run_id

    token = require_token("modal")  # before anything is built: the error names `workbench login modal`
    run = launch.run
    bundle = build_bundle(run.env, data_dir() / "bundles")
    run_id = new_run_id()
    spec = modal_spec_for(launch, plan, bundle, run_id, run_secrets())
    stream = {"kind": "modal_dict", "name": spec.events_dict_name}
    tables = json.loads(json.dumps(run.raw))
    # The plan decides the trainer's shape on Modal: its nodes, one process per GPU (the run's records say so).
    tables["trainer"].update(nodes=spec.trainer_nodes, ranks=spec.gpus_per_node,
                             context_parallel=launch.cloud.context_parallel)
    job = {"config": tables, "stream": stream, "cost": default_cost(spec)}
    store.create_run(run_id, kind="train", env_name=bundle.env, env_version=bundle.env_version,
                     env_source=str(bundle.path), env_args=run.env_args, model=spec.base_model, base_url="",
                     n_tasks=0, rollouts_per_task=run.loop.rollouts_per_task, concurrency=run.loop.concurrency,
                     config={**tables, "launch": {"backend": "modal", "bundle": str(bundle.path),
                                                  "bundle_hash": bundle.hash, "stream": stream,
                                                  "budget_usd": budget_usd, "app": spec.app_name,
                                                  "spec": spec.redacted()}})
    if on_start:
        on_start(run_id)
    try:
        call_id = spawn(spec, job) if spawn is not None else _spawn_on_modal(spec, job, token)
    except Exception as e:
        store.update_run(run_id, status="failed", finished_at=time.time(), error=f"launching on Modal failed: {e}")
        raise
    config = store.get_run(run_id)["config"]
    config["launch"]["call_id"] = call_id  # the orchestrator's modal.FunctionCall
    store.update_run(run_id, config=config)
    log = open_log(stream)
    try:
        status = follow(store.conn, run_id, log, budget_usd=budget_usd, on_event=on_event, timeout_s=timeout_s)
    except BaseException:
        log.request_stop("interrupted on the laptop")
        raise
    row = store.get_run(run_id)
    if status not in FINISHED:
        raise ConfigError(f"run {run_id} is {row['status']!r} on Modal; `workbench runs {run_id} --follow` attaches "
                          "to it again")
    return Launched(run_id, row["status"], bundle.hash, spent_usd(store.conn, run_id), row["summary"])



class ModalBackend:
    """The ``workbench.backends`` plugin ``modal``: the pipeline with its roles on Modal GPUs."""

    name = "modal"
    takes = "launch"
    notice = UNVERIFIED
    label = "modal — unverified: never run on Modal from this project"
    # The trainer's @modal.clustered size (cloud.trainer_nodes, or --nodes). Modal's multi-node guide
    # documents clusters of up to 32 H100s (4 nodes) with 64 announced; larger ones are arranged with
    # Modal. This bound is this project's assumption, never checked against Modal.
    max_trainer_nodes = 64

    def preflight(self, conn: Any, *, env: str | None, config_file: str | None = None, max_steps: int | None = None,
                  budget_usd: float | None = None, overrides: dict[str, Any] | None = None) -> Any:
        """The cluster plan of ``workbench launch --plan``, judged by the run and monthly budgets and the memory fit."""
        from workbench_cloud.forecast import cloud_forecast

        return cloud_forecast(conn, config_file, env=env, max_steps=max_steps, budget_usd=budget_usd,
                              overrides=overrides, require_env=True)

    def check_credentials(self) -> None:
        """A Modal token (its error names ``workbench login modal``)."""
        from workbench.config.credentials import require_token

        require_token("modal")

    def launch(self, store: Any, run: Any, plan: Any = None, *, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[Event], None] | None = None,
               on_start: Callable[[str], None] | None = None) -> Launched:
        return launch_modal(store, run, plan, budget_usd=budget_usd, on_event=on_event, on_start=on_start)


BACKEND: LaunchBackend = ModalBackend()

__all__ = ["BACKEND", "UNVERIFIED", "ModalBackend", "launch_modal", "modal_credentials", "modal_spec_for", "run_secrets"]
