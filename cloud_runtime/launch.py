"""The laptop side of ``workbench launch``: package, start the remote job, follow its stream.

Both backends run the same pipeline: :func:`workbench.bundles.bundle.build_bundle` (refuses secrets,
gives the content hash), a run row in the local store that names the bundle hash and where the
run's event log lives, the remote job (:mod:`workbench_cloud.job`: hash check before any work,
orchestrator + trainer + inference server, cost ledger, exporter), and :func:`follow` ingesting
its stream into the local store with the budget guard. ``--backend local`` runs the job as a local
process on the CPU, its log a directory; ``--backend modal`` runs it as Modal functions, its log a
``modal.Dict`` — that path is built against the real SDK but is only verified offline here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench_cloud.forecast import local_forecast
from workbench_cloud.local_price import LOCAL_DEVICE, LOCAL_PROVIDER, local_price
from workbench_cloud.stream import FINISHED, Event, follow, open_log

from workbench.config.paths import data_dir
from workbench.errors import ConfigError
from workbench.fsutil import atomic_write

if TYPE_CHECKING:
    from workbench.training.backends import LaunchBackend


@dataclass(slots=True)
class Launched:
    run_id: str
    status: str
    bundle_hash: str
    spent_usd: float
    summary: dict[str, Any]


def launch_local(store: Any, run: Any, *, budget_usd: float | None = None, threads: int | None = None,
                 on_event: Callable[[Event], None] | None = None, on_start: Callable[[str], None] | None = None,
                 timeout_s: float | None = None) -> Launched:
    """Run ``run`` (a resolved RunConfig) through the whole launch pipeline with local processes; a trainer
    of ``trainer.nodes`` × ``trainer.ranks`` processes runs as torchrun nodes on this machine, checked to
    fit it before anything starts."""
    from workbench_local.training.launcher import check_placement
    from workbench_local.training.trainer_config import TrainerConfig

    from workbench.bundles.bundle import build_bundle
    from workbench.cost.budgets import spent_usd
    from workbench.runs.evaluate import new_run_id
    from workbench.usecases.launch import check_trainer_nodes

    trainer = TrainerConfig.from_dict(run.trainer)
    check_trainer_nodes(BACKEND, trainer.nodes)
    check_placement(trainer.nodes, trainer.ranks, trainer.device, trainer.context_parallel)
    bundle = build_bundle(run.env, data_dir() / "bundles")
    run_id = new_run_id()
    work = data_dir() / "remote" / run_id
    stream = {"kind": "dir", "path": str(work / "stream")}
    log = open_log(stream)
    tables = json.loads(json.dumps(run.raw))
    spec = {"run_id": run_id, "config": tables, "stream": stream,
            "cost": {"gpus": 1, "usd_per_gpu_s": local_price(), "gpu": LOCAL_DEVICE, "provider": LOCAL_PROVIDER}}
    store.create_run(run_id, kind="train", env_name=bundle.env, env_version=bundle.env_version,
                     env_source=str(bundle.path), env_args=run.env_args, model=str(run.trainer.get("model", "")),
                     base_url="", n_tasks=0, rollouts_per_task=run.loop.rollouts_per_task,
                     concurrency=run.loop.concurrency,
                     config={**tables, "launch": {"backend": "local", "bundle": str(bundle.path),
                                                  "bundle_hash": bundle.hash, "stream": stream,
                                                  "budget_usd": budget_usd, "workdir": str(work)}})
    if on_start:
        on_start(run_id)
    work.mkdir(parents=True, exist_ok=True)
    atomic_write(work / "spec.json", json.dumps(spec, indent=1))
    env = dict(os.environ)
    env["XDG_DATA_HOME"] = str(work / "data")  # the remote side's own run directories
    cmd = [sys.executable, "-m", "workbench_cloud.job", "--bundle", str(bundle.path), "--hash", bundle.hash,
           "--spec", str(work / "spec.json"), "--workdir", str(work)]
    if threads:
        cmd += ["--threads", str(threads)]
    with open(work / "job.log", "ab") as out:
        job = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    conn = store.conn
    try:
        status = follow(conn, run_id, log, budget_usd=budget_usd, on_event=on_event, timeout_s=timeout_s,
                        exited=lambda: job.poll() is not None)
    except BaseException:
        log.request_stop("interrupted on the laptop")
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            job.kill()
        follow(conn, run_id, log, timeout_s=5)  # what the job wrote while stopping
        raise
    job.wait(timeout=300)
    status = follow(conn, run_id, log, timeout_s=5) or status  # the tail
    if status not in FINISHED:
        tail = (work / "job.log").read_text(errors="replace").strip().splitlines()[-15:]
        reason = next((ln.removeprefix("workbench launch: ") for ln in reversed(tail)
                       if ln.startswith("workbench launch: ")), None)
        store.update_run(run_id, status="failed", finished_at=time.time(),
                         error=reason or f"the job exited with code {job.returncode}")
        if reason:
            raise ConfigError(reason)
        raise ConfigError(f"the launched job exited with code {job.returncode}; its log: {work / 'job.log'}\n"
                          + "\n".join(tail))
    row = store.get_run(run_id)
    return Launched(run_id, row["status"], bundle.hash, spent_usd(conn, run_id), row["summary"])


def stop_run(store: Any, run_id: str, reason: str = "stopped by `workbench stop`") -> str:
    """Raise the stop flag of a launched run; the remote loop stops within one step."""
    run = store.get_run(run_id)
    launch = run["config"].get("launch")
    if not launch:
        raise ConfigError(f"run {run['id']} was not launched (`workbench launch`); a local `workbench train` run "
                          "stops with Ctrl-C")
    if run["status"] in FINISHED:
        raise ConfigError(f"run {run['id']} has already finished ({run['status']})")
    open_log(launch["stream"]).request_stop(reason)
    return run["id"]


def follow_run(store: Any, run_id: str, *, on_event: Callable[[Event], None] | None = None,
               timeout_s: float | None = None) -> str:
    """Attach to a launched run's stream (from the local cursor) until it finishes."""
    run = store.get_run(run_id)
    launch = run["config"].get("launch")
    if not launch:
        raise ConfigError(f"run {run['id']} was not launched; `workbench runs {run['id']}` shows what the store has")
    return follow(store.conn, run["id"], open_log(launch["stream"]), budget_usd=launch.get("budget_usd"),
                  on_event=on_event, timeout_s=timeout_s)


class LocalBackend:
    """The ``workbench.backends`` plugin ``local``: the whole launch pipeline on this machine."""

    name = "local"
    takes = "run"
    notice = ""
    label = "local (this machine's CPU)"
    max_trainer_nodes = 8  # torchrun nodes, all on this machine (``workbench_local.training.launcher``)

    def preflight(self, conn: Any, *, env: str | None, config_file: str | None = None, max_steps: int | None = None,
                  budget_usd: float | None = None, overrides: dict[str, Any] | None = None) -> Any:
        """Device-seconds × the local price and the cap the budget guard will enforce (no cluster plan)."""
        steps = max_steps if max_steps is not None else int((overrides or {}).get("loop.max_steps") or 0)
        return local_forecast(conn, steps, budget_usd)

    def check_credentials(self) -> None:
        """Nothing to log in to: it runs here."""

    def launch(self, store: Any, run: Any, plan: Any = None, *, budget_usd: float | None = None,
               threads: int | None = None, on_event: Callable[[Event], None] | None = None,
               on_start: Callable[[str], None] | None = None) -> Launched:
        return launch_local(store, run, budget_usd=budget_usd, threads=threads, on_event=on_event,
                            on_start=on_start)


BACKEND: LaunchBackend = LocalBackend()
