"""The orchestrator role: a CPU container that starts the GPU roles and runs the pipeline.

``build_app`` registers :func:`orchestrate` as the ``orchestrator`` function (CPU only, ``i6pn``).
The launcher calls it with the run's spec, its job (run tables, stream, cost) and handles to the ``inference`` and
``trainer`` functions (Modal passes function handles as arguments). It

1. downloads the base model into the Hugging Face cache volume once and commits it, so the
   inference and trainer nodes read weights instead of each fetching them;
2. spawns ``inference`` and waits for its URL in the run's ``modal.Dict`` (failing fast, with the
   cause, when the inference function ends first);
3. calls ``workbench_cloud.job.run_remote(BUNDLE_PATH, spec.bundle_hash, config, log, run_id=...,
   workdir=..., cost=..., handoff=..., roles=...)`` — the same call ``workbench launch --backend
   local`` makes in a local process — with ``log`` the streamed event log (by default the run's
   events ``modal.Dict``) and the job's SQLite store on local disk. ``roles``
   (:class:`~workbench_cloud.roles.ModalRoles`) points the rollouts at the inference URL and spawns
   the clustered trainer (:meth:`CloudRun.start_trainer`) running ``python -m
   workbench_cloud.handoff``, which reads its batches from the hand-off ``modal.Dict``
   (``spec.train_dict_name``) that the job's bridge fills with control records, and the
   rollouts' arrays from the files the bridge writes and commits in ``RUN_DIR/handoff`` on the run
   volume (reloading until a file is visible). The run tables are passed unchanged
   (their ``[cloud]`` table is the plan's);
4. hands the run over before Modal's 24 h limit (``workbench_cloud.resume``): the run stops right
   after a checkpoint, the store is snapshotted onto the volume, and a fresh ``orchestrator`` call
   (``job["resume"]``) restores it and continues;
5. at the end (or on any error) raises the run's ``done`` flag and cancels what it spawned, so no
   GPU keeps billing after the orchestrator is gone.

Keep the run's SQLite store on the container's local disk: a Modal Volume is not a shared
filesystem for a live database (changes travel by commit and reload). The volume holds what must
outlive containers: the run folder's config, adapters and checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_cloud.modal.spec import BUNDLE_PATH, ModalSpec

from workbench.errors import WorkbenchError

#: The job's own SQLite store and scratch files: local disk, never the volume.
JOB_WORKDIR = Path("/tmp/workbench-job")

#: Never downloaded into the cache: formats vLLM and transformers do not load for a safetensors model.
SKIP_WEIGHTS = ["original/*", "*.gguf", "*.onnx", "*.h5", "*.msgpack", "*.ot"]


@dataclass(slots=True)
class CloudRun:
    """What the pipeline sees of the cloud while ``job.run_remote`` runs."""

    spec: ModalSpec
    inference_url: str
    trainer_fn: Any  # the app's ``trainer`` modal.Function
    calls: list[Any] = field(default_factory=list)

    def cloud_config(self) -> dict[str, Any]:
        """Where the run is, as plain data (JSON-able; no secrets)."""
        s = self.spec
        return {"backend": "modal", "run_id": s.run_id, "inference_url": self.inference_url,
                "base_url": self.inference_url + "/v1", "served_model": s.base_model, "run_dir": s.run_dir,
                "trainer_nodes": s.trainer_nodes, "gpus_per_node": s.gpus_per_node,
                "world_size": s.trainer_nodes * s.gpus_per_node, "bundle_path": BUNDLE_PATH}

    def start_trainer(self, argv: list[str]) -> Any:
        """Spawn the trainer cluster running ``argv`` (``[MODULE, ARGS...]``) on every GPU; returns
        the ``modal.FunctionCall`` (``.get()`` waits for node 0's exit code)."""
        call = self.trainer_fn.spawn(self.spec.to_json(), list(argv))
        self.calls.append(call)
        return call


_current: CloudRun | None = None


def current_run() -> CloudRun | None:
    """The cloud run this container orchestrates, while ``job.run_remote`` runs; None elsewhere."""
    return _current


def wait_for_url(read: Callable[[], str | None], check_alive: Callable[[], None], timeout_s: float,
                 poll_s: float = 2.0) -> str:
    """Poll ``read()`` until it gives a URL; ``check_alive()`` raises when the server is gone."""
    end = time.monotonic() + timeout_s
    while True:
        url = read()
        if url:
            return url
        check_alive()
        if time.monotonic() >= end:
            raise TimeoutError(f"the inference server published no URL within {timeout_s:.0f}s")
        time.sleep(poll_s)


def call_alive(call: Any, role: str) -> Callable[[], None]:
    """A ``check_alive`` for a spawned ``modal.FunctionCall``: quiet while it runs, raises once it ended."""

    def check() -> None:
        from modal.exception import FunctionTimeoutError
        from modal.exception import TimeoutError as StillRunning

        try:
            result = call.get(timeout=0)
        except FunctionTimeoutError as e:
            raise RuntimeError(f"the {role} function hit its timeout") from e
        except StillRunning:
            return
        except Exception as e:
            raise RuntimeError(f"the {role} function failed: {type(e).__name__}: {e}") from e
        raise RuntimeError(f"the {role} function ended before it was ready (it returned {result!r})")

    return check


def prefetch_weights(model: str) -> str | None:
    """Download ``model`` into the HF cache (``HF_HOME``, the cache volume); None for a local path."""
    if os.path.isabs(model):
        return None
    from huggingface_hub import snapshot_download

    return str(snapshot_download(model, ignore_patterns=SKIP_WEIGHTS))


def default_cost(spec: ModalSpec) -> dict[str, Any]:
    """The cost ledger's inputs when the launcher sent none: every GPU of the run at Modal's list price
    (the built-in table; the laptop's edited table is the launcher's to pass)."""
    try:
        from workbench.cost.gpu_prices import price_for

        usd = price_for("modal", spec.gpu).usd_per_gpu_s
    except Exception:
        usd = 0.0
    gpus = spec.gpus_per_node * (spec.trainer_nodes + spec.inference_nodes)
    return {"gpus": gpus, "usd_per_gpu_s": usd, "gpu": spec.gpu, "provider": "modal"}


def fail_run(log: Any, run_id: str, reason: str) -> None:
    """Tell the laptop the run failed (its follower stops) when the job itself can no longer say so."""
    log.append([{"kind": "run", "row": {"id": run_id, "status": "failed", "error": reason,
                                        "finished_at": time.time(), "summary": "{}", "model": ""}}])


def orchestrate(spec_json: str, job: dict[str, Any], inference_fn: Any, trainer_fn: Any,
                orchestrator_fn: Any = None) -> dict[str, Any]:
    """The ``orchestrator`` Modal function (see the module doc). ``job`` is what ``launch_local``
    writes to ``spec.json`` less the run id: ``config`` (the resolved run tables), ``stream`` (the
    event log; default: the run's events Dict) and ``cost`` (default: :func:`default_cost`); a
    hand-over adds ``resume`` and ``handovers``. ``orchestrator_fn`` is this function's own handle,
    for the hand-over's fresh call."""
    import modal
    from workbench_cloud import job as remote
    from workbench_cloud.modal.trainer import VolumeCommitter
    from workbench_cloud.resume import (
        HandoverWatch,
        Respawn,
        check_resumable,
        last_step,
        read_records,
        respawn_decision,
        restore_store,
        snapshot_store,
    )
    from workbench_cloud.roles import ModalRoles
    from workbench_cloud.stream import open_log

    global _current
    called_at = time.time()  # Modal's limit counts from here
    spec = ModalSpec.from_json(spec_json)
    resume, handovers = bool(job.get("resume")), int(job.get("handovers", 0))
    log = open_log(job.get("stream") or {"kind": "modal_dict", "name": spec.events_dict_name})
    try:
        check_resumable(job["config"])  # before any GPU is started
    except WorkbenchError as e:
        fail_run(log, spec.run_id, str(e))
        raise
    state = modal.Dict.from_name(spec.state_dict_name, create_if_missing=True)
    state.put("done", False)
    state.pop("inference_url", None)  # a previous attempt's URL points at a container that is gone
    print(f"prefetching {spec.base_model} into the weight cache", flush=True)
    prefetch_weights(spec.base_model)
    modal.Volume.from_name(spec.hf_cache_volume).commit()
    runs = modal.Volume.from_name(spec.volume_name)
    runs.reload()
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    work = JOB_WORKDIR / spec.run_id
    db = work / "remote.db"
    if resume:
        restore_store(spec.store_snapshot, db)
    steps_before = last_step(db, spec.run_id) if db.exists() else 0
    inference = inference_fn.spawn(spec_json)
    run = CloudRun(spec, "", trainer_fn, [inference])
    t0 = time.monotonic()
    # Control records in the Dict, the rollouts' arrays in files on the run volume (workbench_cloud.handoff).
    handoff = {"kind": "modal_dict", "name": spec.train_dict_name,
               "bulk": {"path": f"{spec.run_dir}/handoff", "volume": spec.volume_name}}
    respawn = None
    try:
        run.inference_url = wait_for_url(lambda: state.get("inference_url"), call_alive(inference, "inference"),
                                         spec.startup_timeout_s)
        print(f"inference ready at {run.inference_url} after {time.monotonic() - t0:.0f}s", flush=True)
        _current = run
        watch = HandoverWatch(lambda after: read_records(db, spec.run_id, after), called_at + spec.timeout_s,
                              int(job["config"]["loop"]["checkpoint_every"]))
        # Adapters or checkpoints written in this container (a co-located trainer) reach the inference
        # nodes through the volume: commit them as they appear.
        with VolumeCommitter(spec.run_dir, runs.commit):
            status = remote.run_remote(BUNDLE_PATH, spec.bundle_hash, job["config"], log, run_id=spec.run_id,
                                       workdir=work, cost=job.get("cost") or default_cost(spec), handoff=handoff,
                                       roles=ModalRoles(run, handoff, sync=runs.commit), resume=resume,
                                       should_stop=watch)
        decision = respawn_decision(status, steps_before=steps_before, steps_after=last_step(db, spec.run_id),
                                    handovers=handovers, max_handovers=spec.max_handovers)
        if decision.action == "respawn" and orchestrator_fn is None:
            decision = Respawn("fail", "the run must be handed over but this call has no handle to itself")
        if decision.action == "fail":
            fail_run(log, spec.run_id, decision.reason)
            status = "failed"
        elif decision.action == "respawn":
            snapshot_store(db, spec.store_snapshot)  # committed below, before the fresh call starts
            respawn = {**job, "resume": True, "handovers": handovers + 1}
            print(decision.reason, flush=True)
        return {"run_id": spec.run_id, "status": status, "wall_s": round(time.monotonic() - t0, 1),
                "handovers": handovers + (respawn is not None)}
    except WorkbenchError as e:  # a refused bundle, a bad config: the laptop's follower must hear of it
        if not _has_run(db, spec.run_id):  # else train() recorded the failure, and the exporter sent it
            fail_run(log, spec.run_id, str(e))
        raise
    finally:
        _current = None
        with contextlib.suppress(Exception):
            runs.commit()
        with contextlib.suppress(Exception):
            state.put("done", True)
        for call in run.calls:
            with contextlib.suppress(Exception):
                call.cancel()
        if respawn is not None:  # last: the fresh call clears ``done`` and spawns its own inference
            orchestrator_fn.spawn(spec_json, respawn, inference_fn, trainer_fn, orchestrator_fn)


def _has_run(db: Path, run_id: str) -> bool:
    from workbench.store.run_lookups import run_exists_in

    return run_exists_in(db, run_id)


__all__ = ["JOB_WORKDIR", "CloudRun", "call_alive", "current_run", "default_cost", "fail_run", "orchestrate",
           "prefetch_weights", "wait_for_url"]
