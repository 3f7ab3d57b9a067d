"""Where ``workbench train``'s other two roles run: the inference server and the trainer.

:func:`workbench.training.loop.train` is the orchestrator. It asks a :class:`TrainRoles` for an inference
server (a root URL and the served base model) and for a trainer process, and from then on talks
to them only over HTTP (rollouts, adapter loads) and through the trainer's records. Where they run
is the roles' business:

* the trainer plugin's roles (``workbench train``; the bundled ``workbench_local.training.roles.LocalRoles``):
  the embedded server and a trainer worker as local processes; the trainer opens the run's store directly.
* ``workbench_cloud.roles`` (``workbench launch``): the trainer reads its batches from a hand-off
  log (``workbench_cloud.handoff``), locally or on Modal, where the inference server is the vLLM
  function's URL and the trainer is the ``@modal.clustered`` function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol

from workbench.fsutil import atomic_write

#: In the run directory: the inference server's root URL, for a trainer started before the server was up.
SERVER_ROOT_FILE = "server_root"
#: How the trainer's record of a resume begins (an ``event`` record at the step it resumes from).
RESUMED_FROM = "resumed from the checkpoint of step"


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
    #: Whether ``start_trainer`` may come first, with ``server_root`` None, so that the trainer loads its
    #: model while the server loads its own: the trainer then reads the root URL from the run
    #: directory's ``SERVER_ROOT_FILE``, which the orchestrator writes once the run is created.
    trainer_first: ClassVar[bool]

    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        """Start (or find) the inference server for ``model_spec``; returns when it is healthy."""
        ...

    def start_trainer(self, db: Path, run_id: str, server_root: str | None, rdir: Path,
                      threads: int | None) -> tuple[WorkerProcess, Path | None]:
        """Start the trainer of ``run_id``; (its process, its log file when there is one here)."""
        ...


def write_server_root(rdir: Path, root: str) -> None:
    """Tell a trainer that started first where the server is (atomically: it never reads half a URL)."""
    atomic_write(rdir / SERVER_ROOT_FILE, root)


__all__ = ["RESUMED_FROM", "SERVER_ROOT_FILE", "Inference", "TrainRoles", "WorkerProcess", "write_server_root"]
