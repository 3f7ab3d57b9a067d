"""Where ``workbench train``'s other two roles run: the inference server and the trainer.

:func:`workbench.train.train` is the orchestrator. It asks a :class:`TrainRoles` for an inference
server (a root URL and the served base model) and for a trainer process, and from then on talks
to them only over HTTP (rollouts, adapter loads) and through the trainer's records. Where they run
is the roles' business:

* :class:`LocalRoles` (``workbench train``): the embedded server and ``local_runtime.train_worker``
  as local processes; the trainer opens the run's store directly.
* ``cloud_runtime.roles`` (``workbench launch``): the trainer reads its batches from a hand-off
  log (``cloud_runtime.handoff``), locally or on Modal, where the inference server is the vLLM
  function's URL and the trainer is the ``@modal.clustered`` function.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(slots=True)
class Inference:
    """A running inference server: its root URL (no ``/v1``), the base model it serves, and how to
    stop it (a no-op for a server this run does not own)."""

    root: str
    model: str
    stop: Callable[[], None]


class WorkerProcess(Protocol):
    """What the orchestrator needs of the trainer: ``subprocess.Popen``'s lifecycle methods."""

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class TrainRoles(Protocol):
    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        """Start (or find) the inference server for ``model_spec``; returns when it is healthy."""
        ...

    def start_trainer(self, db: Path, run_id: str, server_root: str, rdir: Path,
                      threads: int | None) -> tuple[WorkerProcess, Path | None]:
        """Start the trainer of ``run_id``; (its process, its log file when there is one here)."""
        ...


class LocalRoles:
    """The embedded server and a trainer process on this machine (see the module doc)."""

    worker_module = "local_runtime.train_worker"

    def trainer_args(self, db: Path, run_id: str) -> list[str]:
        """Where the trainer reads its rollouts: here, the store."""
        return ["--db", str(db), "--parent-pid", str(os.getpid())]

    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        from local_runtime.embedded import start_server, terminate

        server = start_server(model_spec, name="server", logdir=rdir, extra_args=[
            # Ends by itself if this process is killed outright (SIGKILL leaves no time to stop it).
            "--exit-when-idle", "600", "--max-batch", str(max_batch),
            *(["--threads", str(threads)] if threads else [])])
        pid = int(server["pid"])
        return Inference(f"http://127.0.0.1:{server['port']}", str(server["model"]), lambda: terminate(pid))

    def start_trainer(self, db: Path, run_id: str, server_root: str, rdir: Path,
                      threads: int | None) -> tuple[WorkerProcess, Path | None]:
        log = rdir / "trainer.log"
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        env.setdefault("HF_HUB_OFFLINE", "1")
        cmd = [sys.executable, "-m", self.worker_module, *self.trainer_args(db, run_id), "--run", run_id,
               "--server", server_root, "--dir", str(rdir)]
        # The server takes half the cores by default; the trainer, unless told, the other half (torch
        # would take them all and the two would contend for every core).
        cmd += ["--threads", str(threads or max(1, min(8, (os.cpu_count() or 1) // 2)))]
        with open(log, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        return proc, log


__all__ = ["Inference", "LocalRoles", "TrainRoles", "WorkerProcess"]
