"""Where a launched run's inference server and trainer run (``workbench.training.roles.TrainRoles``).

Both backends hand batches to the trainer through the hand-off logs (``workbench_cloud.handoff``),
never through the orchestrator's store, so ``--backend local`` runs the code path Modal runs:

* :class:`HandoffRoles` (``--backend local``): the embedded server and a local trainer process
  (``python -m workbench_cloud.handoff``) reading directory logs.
* :class:`ModalRoles` (on Modal, inside the ``orchestrator`` function): the inference function's
  URL, which the orchestrator waited for (nothing to start or stop here), and the
  ``@modal.clustered`` trainer, spawned with the same worker command line; its
  ``modal.FunctionCall`` is driven like a process by :class:`CallProcess`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from workbench_local.training.roles import LocalRoles

from workbench.errors import ConfigError
from workbench.training.roles import Inference

HANDOFF_MODULE = "workbench_cloud.handoff"


def handoff_argv(handoff: dict[str, Any], run_id: str, server_root: str, rdir: Path | str) -> list[str]:
    """The trainer's command line after ``python -m``: the module, then its arguments."""
    return [HANDOFF_MODULE, "--handoff", json.dumps(handoff, sort_keys=True), "--run", run_id,
            "--server", server_root, "--dir", str(rdir)]


class HandoffRoles(LocalRoles):
    """Local processes, batches through the hand-off logs ``handoff`` names."""

    worker_module = HANDOFF_MODULE

    def __init__(self, handoff: dict[str, Any]) -> None:
        self.handoff = handoff

    def trainer_args(self, db: Path, run_id: str) -> list[str]:
        return ["--handoff", json.dumps(self.handoff, sort_keys=True), "--parent-pid", str(os.getpid())]


class CallProcess:
    """A spawned ``modal.FunctionCall`` seen as a process (``poll``/``wait``/``terminate``/``kill``):
    its return value is the exit code (the trainer function returns node 0's code); a call that
    raised exits with 1 and keeps the error in ``error``."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.returncode: int | None = None
        self.error = ""

    def _settle(self, timeout: float | None) -> int | None:
        from modal.exception import TimeoutError as StillRunning

        if self.returncode is not None:
            return self.returncode
        try:
            result = self.call.get(timeout=timeout)
        except StillRunning:
            return None
        except Exception as e:  # the function raised, timed out or was cancelled
            self.error = f"{type(e).__name__}: {e}"
            self.returncode = 1
        else:
            self.returncode = int(result or 0)
        return self.returncode

    def poll(self) -> int | None:
        return self._settle(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._settle(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"modal call {getattr(self.call, 'object_id', '?')}", timeout or 0)
        return code

    def terminate(self) -> None:
        if self.returncode is None:
            self.call.cancel()

    kill = terminate


class ModalRoles:
    """Inside the Modal orchestrator: the inference function's URL and the clustered trainer."""

    trainer_first: ClassVar[bool] = False  # the trainer runs on other machines: it gets the URL on its command line

    def __init__(self, cloud: Any, handoff: dict[str, Any], sync: Callable[[], None] | None = None) -> None:
        self.cloud, self.handoff = cloud, handoff  # cloud: modal_orchestrator.CloudRun
        self.sync = sync  # commits the run volume: the trainer nodes must see config.json and the checkpoint

    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        # vLLM serves the base model under its Hugging Face id (``--served-model-name``); the trainer
        # must train that very model, or its logprobs and adapters would not match the sampler's.
        if model_spec != self.cloud.spec.base_model:
            raise ConfigError(f"trainer.model is {model_spec!r} but the inference function serves "
                              f"{self.cloud.spec.base_model!r}; launch with the same model for both")
        return Inference(self.cloud.inference_url.rstrip("/"), self.cloud.spec.base_model, lambda: None)

    def start_trainer(self, db: Path, run_id: str, server_root: str | None, rdir: Path,
                      threads: int | None) -> tuple[CallProcess, Path | None]:
        assert server_root, "the Modal trainer starts after the inference function is up"
        if self.sync is not None:
            self.sync()
        call = self.cloud.start_trainer(handoff_argv(self.handoff, run_id, server_root, rdir))
        return CallProcess(call), None  # its log is the function's log on Modal


__all__ = ["HANDOFF_MODULE", "CallProcess", "HandoffRoles", "ModalRoles", "handoff_argv"]
