"""The local roles of ``workbench train``: the embedded server and the trainer on this machine
(:class:`workbench.training.roles.TrainRoles`): one worker process, or a group of torchrun nodes when the
run's ``[trainer]`` asks for more than one process (``nodes`` × ``ranks``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from workbench_local.server.embedded import start_server, terminate
from workbench_local.training.launcher import check_placement, start_local_nodes
from workbench_local.training.trainer_config import TrainerConfig

from workbench.training.roles import Inference, WorkerProcess


class LocalRoles:
    """The embedded server and a trainer process on this machine (see the module doc)."""

    worker_module = "workbench_local.training.worker"
    trainer_first: ClassVar[bool] = True  # it reads the server's URL from the run directory once the server is up

    def trainer_args(self, db: Path, run_id: str) -> list[str]:
        """Where the trainer reads its rollouts: here, the store."""
        return ["--db", str(db), "--parent-pid", str(os.getpid())]

    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        server = start_server(model_spec, name="server", logdir=rdir, extra_args=[
            # Ends by itself if this process is killed outright (SIGKILL leaves no time to stop it).
            "--exit-when-idle", "600", "--max-batch", str(max_batch),
            *(["--threads", str(threads)] if threads else [])])
        pid = int(server["pid"])
        return Inference(f"http://127.0.0.1:{server['port']}", str(server["model"]), lambda: terminate(pid))

    def start_trainer(self, db: Path, run_id: str, server_root: str | None, rdir: Path,
                      threads: int | None) -> tuple[WorkerProcess, Path | None]:
        """One process, or (``trainer.nodes`` × ``trainer.ranks`` > 1) one torchrun agent per node on this
        machine (``workbench_local.training.launcher``), sharing the trainer's threads."""
        log = rdir / "trainer.log"
        env = dict(os.environ)
        env.setdefault("HF_HUB_OFFLINE", "1")
        argv = [self.worker_module, *self.trainer_args(db, run_id), "--run", run_id,
                *(["--server", server_root] if server_root else []), "--dir", str(rdir)]
        # The server takes half the cores by default; the trainer, unless told, the other half (torch
        # would take them all and the two would contend for every core).
        total = threads or max(1, min(8, (os.cpu_count() or 1) // 2))
        shape = TrainerConfig.from_dict(json.loads((rdir / "config.json").read_text())["trainer"])
        check_placement(shape.nodes, shape.ranks, shape.device, shape.context_parallel)  # before any process starts
        if shape.world_size > 1:
            return start_local_nodes(argv, nodes=shape.nodes, ranks=shape.ranks, rdzv_id=run_id, log=log,
                                     threads=total, env=env), log
        with open(log, "ab") as out:
            proc = subprocess.Popen([sys.executable, "-m", *argv, "--threads", str(total)], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        return proc, log


__all__ = ["LocalRoles"]
