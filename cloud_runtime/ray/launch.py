"""The laptop side of ``workbench launch --backend ray``: the same pipeline as ``--backend local``, with
the run's roles as Ray actors on a Ray cluster (``workbench_cloud.ray.roles``).

Before anything starts it connects to the cluster (``--address``, else ``RAY_ADDRESS``, else a one-node
cluster started here for the run) and refuses a cluster without the nodes and resources the trainer
needs, naming what is missing. Then it builds the bundle, records the run, starts the orchestrator actor
with the bundle as its working directory (Ray ships it; the actor checks its hash before any work),
and follows the run's event log (the run's key-value actor) into the local store with the budget guard,
as the other backends do; ``workbench runs RUN --follow`` and ``workbench stop RUN`` reach the same log.
A run that lost a node ends ``failed`` with one line naming it — unless it checkpoints, saved a
checkpoint, and the nodes left still hold the trainer: then a new orchestrator resumes it from there.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench_cloud.forecast import local_forecast
from workbench_cloud.launch import Launched
from workbench_cloud.own_cluster import OWN_PROVIDER, own_price
from workbench_cloud.stream import FINISHED, Event, follow, open_log

from workbench.config.paths import data_dir
from workbench.errors import ConfigError

if TYPE_CHECKING:
    from workbench.training.backends import LaunchBackend

#: Environment the run's actors get from the laptop, when set here (never a secret).
FORWARDED_ENV = ("HF_HUB_OFFLINE", "WORKBENCH_EMBEDDED_IDLE_S")


def shared_workdir(run_id: str) -> Path:
    """Where the run's files live on the cluster: ``WORKBENCH_RAY_SHARED_DIR/RUN`` (storage every node
    mounts at that path), else this machine's data directory (a cluster on this machine)."""
    root = os.environ.get("WORKBENCH_RAY_SHARED_DIR")
    base = Path(root).expanduser().resolve() if root else data_dir() / "remote"
    work = (base / run_id).resolve()
    if not work.is_relative_to(base):
        raise ConfigError(f"run id {run_id!r} leaves {base}")
    return work


def trainer_shape(trainer: Any, cloud: dict[str, Any] | None = None) -> Any:
    """The cluster resources of the run's ``[trainer]`` (GPUs when its device is not the CPU and the
    cluster has GPUs) and, on GPUs, of its inference server: ``cloud.inference_tp`` GPUs (default 1) for vLLM."""
    import ray
    from workbench_cloud.ray.cluster import TrainerShape

    device = str(getattr(trainer, "device", "auto"))
    gpus = float(ray.cluster_resources().get("GPU", 0.0))
    gpu = device.startswith("cuda") or (device == "auto" and gpus > 0)
    return TrainerShape(nodes=trainer.nodes, ranks=trainer.ranks, cpus=1.0, gpu=gpu,
                        inference_gpus=int((cloud or {}).get("inference_tp") or 1) if gpu else 0)


def vllm_options(run: Any) -> dict[str, Any]:
    """How the inference role's vLLM serves the run's model on a GPU cluster (as on Modal)."""
    cloud = run.raw.get("cloud") or {}
    return {"lora_rank": int(run.trainer.get("lora_rank", 16)), "max_loras": max(4, run.loop.max_off_policy_steps + 2),
            "full_weights": not run.trainer.get("lora", True), "max_model_len": cloud.get("context_length"),
            "tool_call_parser": str(cloud.get("tool_call_parser", "hermes"))}


def launch_ray(store: Any, run: Any, *, address: str | None = None, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[Event], None] | None = None,
               on_start: Callable[[str], None] | None = None, timeout_s: float | None = None) -> Launched:
    """Run ``run`` (a resolved RunConfig) on the Ray cluster ``address`` names (see the module doc)."""
    from workbench_cloud.ray.cluster import check_cluster, cluster
    from workbench_local.training.trainer_config import TrainerConfig

    from workbench.bundles.bundle import build_bundle
    from workbench.usecases.launch import check_trainer_nodes

    trainer = TrainerConfig.from_dict(run.trainer)
    check_trainer_nodes(BACKEND, trainer.nodes)
    bundle = build_bundle(run.env, data_dir() / "bundles")  # refuses secrets; nothing started yet
    # The bundle is the job's working directory: Ray uploads it once and unpacks it on each node, as the
    # working directory of every actor of this launch.
    with cluster(address, {"working_dir": str(bundle.path)}) as gcs:
        shape = trainer_shape(trainer, run.raw.get("cloud"))
        check_cluster(shape)  # before anything starts
        return _run(store, run, bundle, shape, gcs, budget_usd=budget_usd, threads=threads, on_event=on_event,
                    on_start=on_start, timeout_s=timeout_s)


def _run(store: Any, run: Any, bundle: Any, shape: Any, gcs: str, *, budget_usd: float | None,
         threads: int | None, on_event: Callable[[Event], None] | None, on_start: Callable[[str], None] | None,
         timeout_s: float | None) -> Launched:
    from workbench_cloud.ray_kv import RayDict

    from workbench.cost.budgets import spent_usd
    from workbench.runs.evaluate import new_run_id

    run_id = new_run_id()
    work = shared_workdir(run_id)
    name = f"workbench-run-{run_id}"
    kv = RayDict(name, create=True)
    stream = {"kind": "ray_kv", "name": name, "address": gcs}
    handoff = {"kind": "ray_kv", "name": name, "address": gcs}  # the trainer ranks join the cluster as drivers
    log = open_log(stream)
    tables = json.loads(json.dumps(run.raw))
    gpu = "cpu" if not shape.gpu else "gpu"
    devices = shape.nodes * shape.ranks
    cost = {"gpus": devices, "usd_per_gpu_s": own_price(gpu).usd_per_gpu_s, "gpu": gpu, "provider": OWN_PROVIDER}
    env_vars = {"XDG_DATA_HOME": str(work / "data"), **{k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}}
    store.create_run(run_id, kind="train", env_name=bundle.env, env_version=bundle.env_version,
                     env_source=str(bundle.path), env_args=run.env_args, model=str(run.trainer.get("model", "")),
                     base_url="", n_tasks=0, rollouts_per_task=run.loop.rollouts_per_task,
                     concurrency=run.loop.concurrency,
                     config={**tables, "launch": {"backend": "ray", "address": gcs, "bundle": str(bundle.path),
                                                  "bundle_hash": bundle.hash, "stream": stream,
                                                  "budget_usd": budget_usd, "workdir": str(work)}})
    if on_start:
        on_start(run_id)
    spec = {"run_id": run_id, "config": tables, "stream": stream, "handoff": handoff, "cost": cost,
            "bundle_hash": bundle.hash, "workdir": str(work), "env_vars": env_vars, "threads": threads,
            "shape": {"nodes": shape.nodes, "ranks": shape.ranks, "cpus": shape.cpus, "gpu": shape.gpu,
                      "inference_gpus": shape.inference_gpus},
            "vllm": vllm_options(run) if shape.gpu else None}
    conn = store.conn
    attempt = _Attempt.start(spec, shape, env_vars, f"{name}-0")
    try:
        status = follow(conn, run_id, log, budget_usd=budget_usd, on_event=on_event, timeout_s=timeout_s,
                        exited=attempt.exited)
        while True:
            error = attempt.outcome()
            status = follow(conn, run_id, log, timeout_s=5) or status  # the tail
            attempt.release()
            if not _resumable(store, run_id, tables, error or str(store.get_run(run_id).get("error") or ""), shape,
                              attempt.number):
                break
            # A node was lost and the cluster can still hold the trainer: continue from the last checkpoint.
            spec["resume"] = True
            attempt = _Attempt.start(spec, shape, env_vars, f"{name}-{attempt.number + 1}", attempt.number + 1)
            status = follow(conn, run_id, log, budget_usd=budget_usd, on_event=on_event, timeout_s=timeout_s,
                            until_finished=False, exited=attempt.exited)
    except BaseException:
        log.request_stop("interrupted on the laptop")
        attempt.end(wait_s=120)
        follow(conn, run_id, log, timeout_s=5)  # what the job wrote while stopping
        kv.remove()
        raise
    kv.remove()
    if status not in FINISHED:
        store.update_run(run_id, status="failed", finished_at=time.time(), error=error or "the run's job ended early")
        raise ConfigError(error or "the run's job on the Ray cluster ended without a final status")
    row = store.get_run(run_id)
    if row["status"] == "failed" and row.get("error"):
        raise ConfigError(str(row["error"]))
    return Launched(run_id, row["status"], bundle.hash, spent_usd(conn, run_id), row["summary"])


#: How many times one launch continues a run after losing a node.
MAX_RESUMES = 3


class _Attempt:
    """One orchestrator actor on the node of the trainer's bundle 0, in a placement group of its own."""

    def __init__(self, pg: Any, node0: str, actor: Any, done: Any, number: int) -> None:
        self.pg, self.node0, self.actor, self.done, self.number = pg, node0, actor, done, number

    @classmethod
    def start(cls, spec: dict[str, Any], shape: Any, env_vars: dict[str, str], placement: str,
              number: int = 0) -> _Attempt:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        from workbench_cloud.ray.cluster import reserve
        from workbench_cloud.ray.roles import OrchestratorActor

        pg, node0 = reserve(shape, placement)
        actor = OrchestratorActor.options(
            num_cpus=0, max_restarts=0, runtime_env={"env_vars": env_vars},
            scheduling_strategy=NodeAffinitySchedulingStrategy(node0, soft=False)).remote()  # rank 0's node
        return cls(pg, node0, actor, actor.run.remote({**spec, "placement": placement}), number)

    def exited(self) -> bool:
        import ray

        return bool(ray.wait([self.done], timeout=0)[0])

    def outcome(self) -> str:
        """The orchestrator's error line ('' when it ended the run itself without one)."""
        import ray
        from workbench_cloud.ray.cluster import LOST, lost

        try:
            return str(ray.get(self.done)[1])
        except ray.exceptions.RayActorError:  # it died: with its node, or killed
            gone = _wait_lost(lambda: lost([self.node0]))
            return f"the orchestrator's node {gone} {LOST}" if gone else "the Ray orchestrator actor died mid-run"
        except ray.exceptions.RayError as e:  # its start failed (the bundle did not arrive)
            return f"the Ray orchestrator actor failed: {_last_line(str(e)) or type(e).__name__}"

    def end(self, wait_s: float) -> None:
        import ray

        if not ray.wait([self.done], timeout=wait_s)[0]:
            ray.kill(self.actor)
        self.release()

    def release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # the trainer may have removed it already
            remove_placement_group(self.pg)


def _resumable(store: Any, run_id: str, tables: dict[str, Any], error: str, shape: Any, number: int) -> bool:
    """Whether a run that ended with ``error`` continues from its last checkpoint: a node was lost, the run
    checkpoints (``loop.checkpoint_every``) and saved one, and the cluster still holds the trainer."""
    from workbench_cloud.ray.cluster import LOST, shortfall

    if LOST not in error or number >= MAX_RESUMES or not int(tables.get("loop", {}).get("checkpoint_every") or 0):
        return False
    saved = [r for r in store.train_records(run_id, "event") if str(r["message"]).startswith("checkpoint saved at step ")]
    return bool(saved) and shortfall(shape) is None


def _wait_lost(check: Callable[[], str | None], wait_s: float = 30.0) -> str | None:
    """``check()`` until it names a lost node or ``wait_s`` passed (Ray declares a node dead after its
    health checks fail)."""
    deadline = time.monotonic() + wait_s
    while (gone := check()) is None and time.monotonic() < deadline:
        time.sleep(0.25)
    return gone


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


class RayBackend:
    """The ``workbench.backends`` plugin ``ray``: the launch pipeline on a Ray cluster."""

    name = "ray"
    takes = "run"
    notice = ""
    label = "ray (a Ray cluster: --address, RAY_ADDRESS, or one started here)"
    max_trainer_nodes = 1024  # placement-group bundles, one node each
    takes_address = True  # `workbench launch --address HOST:PORT`

    def preflight(self, conn: Any, *, env: str | None, config_file: str | None = None, max_steps: int | None = None,
                  budget_usd: float | None = None, overrides: dict[str, Any] | None = None) -> Any:
        """The run's cost cap from its budget (the cluster's price is ``gpu-prices set own ...``)."""
        steps = max_steps if max_steps is not None else int((overrides or {}).get("loop.max_steps") or 0)
        return local_forecast(conn, steps, budget_usd)

    def plan_shape(self, address: str) -> dict[str, Any]:
        """The ``[cloud]`` shape of the live cluster at ``address`` for ``--plan`` (nodes, GPUs per node, the
        GPU model when Ray knows it): ``workbench_cloud.ray.cluster.plan_shape``."""
        self.check_credentials()
        from workbench_cloud.ray.cluster import live_plan_shape

        return live_plan_shape(address)

    def check_credentials(self) -> None:
        """Ray needs no login; it needs the ``ray`` extra."""
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--backend ray needs Ray: pip install 'rl-workbench[ray]'") from None

    def launch(self, store: Any, run: Any, plan: Any = None, *, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[Event], None] | None = None,
               on_start: Callable[[str], None] | None = None, address: str | None = None) -> Launched:
        self.check_credentials()
        return launch_ray(store, run, address=address, budget_usd=budget_usd, threads=threads, on_event=on_event,
                          on_start=on_start)


BACKEND: LaunchBackend = RayBackend()
