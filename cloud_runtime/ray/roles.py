"""The launched run's roles as Ray actors (``workbench.training.roles.TrainRoles``).

* the **orchestrator** (:class:`OrchestratorActor`): its working directory is the bundle Ray shipped
  (``runtime_env`` ``working_dir``); it checks the bundle's hash before any work and runs
  :func:`workbench_cloud.job.run_remote` with :class:`RayRoles`;
* the **inference** role (:class:`InferenceActor`, beside the orchestrator): the embedded server on CPUs; on
  GPUs vLLM behind the adapter gate (``vllm_gate``), on GPUs of bundle 0 that the launch reserved for it;
* the **trainer**: the placement group the launch reserved, ``trainer.nodes`` bundles (``STRICT_SPREAD``:
  each on its own node), ``trainer.ranks`` :class:`TrainerRankActor` in each. The orchestrator and the
  inference server run on the node of bundle 0, where rank 0 runs, so the three meet on its loopback. The actors form the torch.distributed group
  themselves — rank 0's actor picks the rendezvous address on its node and hands it to the others —
  and each runs the trainer's own per-rank entry (``workbench_local.training.launcher``) as a child
  process that dies with its actor. :class:`RankGroup` is the actors seen as one process; a rank whose
  node was lost fails the run with one line naming the node.

The trainer and the inference server share the run directory (``trainer.log``, ``config.json``, the
adapters and checkpoints): the workdir is on storage every node sees at the same path (docs/ray.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import ray
from ray.util import get_placement_group
from ray.util.placement_group import remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy
from workbench_cloud.ray.cluster import LOST, TrainerShape, alive_nodes, node_name
from workbench_cloud.roles import handoff_argv

from workbench.errors import ConfigError
from workbench.training.roles import Inference

#: How long a failed trainer waits for Ray to say whether a node of it was lost.
NODE_LOSS_WAIT_S = 30.0


def _die_with_parent() -> None:
    """In a child process: be killed when the actor process that started it ends (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _interface_of(ip: str) -> str | None:
    """The network interface that holds the IPv4 address ``ip`` (gloo binds it), or None (Linux)."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                got = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:  # no IPv4 address
                continue
            if socket.inet_ntoa(got[20:24]) == ip:
                return name
    return None


#: How long vLLM may take to load a model and warm up on a GPU node.
VLLM_STARTUP_S = 3600.0


def _end(proc: subprocess.Popen[bytes], wait_s: float) -> None:
    """Terminate a child that still runs; killed when it has not ended ``wait_s`` later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Inference:
    """The inference server, started on this actor's node: the embedded one on CPUs; on GPUs vLLM behind the
    adapter gate (``workbench_cloud.vllm_gate``: LoRA loads, the token route, ``policy_version``), as on
    Modal, both on the node's loopback."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.vllm: subprocess.Popen[bytes] | None = None
        self.stop_gate: Any = None

    def start_vllm(self, base_model: str, rdir: str, options: dict[str, Any]) -> tuple[str, str]:
        """vLLM on the GPUs Ray gave this actor, and the gate in front of it; the gate's root URL."""
        from workbench_cloud.vllm_gate import AdapterGate, run_gate, vllm_argv, vllm_env, wait_healthy

        gpus = len(ray.get_gpu_ids()) or 1
        port, gate_port = _free_port(), _free_port()
        argv = vllm_argv(base_model, port, tensor_parallel=gpus, **options)
        with open(Path(rdir) / "vllm.log", "ab") as out:
            out.write(f"inference: {' '.join(argv)}\n".encode())
            try:
                self.vllm = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, **vllm_env(bool(options.get("full_weights")))},
                                             preexec_fn=_die_with_parent)
            except FileNotFoundError:
                raise RuntimeError(f"vLLM is not installed on the Ray node {ray.util.get_node_ip_address()}: a GPU "
                                   "cluster serves the run's model with vLLM (pip install 'rl-workbench[vllm]' "
                                   "on its nodes)") from None
        self.stop_gate = run_gate(AdapterGate([f"http://127.0.0.1:{port}"], base_model=base_model,
                                              tool_call_parser=options.get("tool_call_parser") or None),
                                  "127.0.0.1", gate_port)
        vllm = self.vllm
        wait_healthy(f"http://127.0.0.1:{port}/health", VLLM_STARTUP_S, lambda: vllm.poll() is None)
        return f"http://127.0.0.1:{gate_port}", base_model

    def start(self, model_spec: str, rdir: str, max_batch: int, threads: int | None) -> tuple[str, str]:
        from workbench_local.server.embedded import start_server

        server = start_server(model_spec, name="server", logdir=Path(rdir), extra_args=[
            "--exit-when-idle", "600", "--max-batch", str(max_batch), *(["--threads", str(threads)] if threads else [])])
        self.pid = int(server["pid"])
        return f"http://127.0.0.1:{server['port']}", str(server["model"])

    def stop(self) -> None:
        from workbench_local.server.embedded import terminate

        if self.pid is not None:
            terminate(self.pid)
            self.pid = None
        if self.stop_gate is not None:
            self.stop_gate()
            self.stop_gate = None
        if self.vllm is not None:
            _end(self.vllm, 60)


InferenceActor: Any = ray.remote(_Inference)  # handles typed Any: their methods are called with .remote()


class _TrainerRank:
    """One trainer rank: a child process running the trainer's per-rank entry under the group's
    environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...); ``wait`` returns its exit code."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def where(self) -> dict[str, str]:
        return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}

    def rendezvous(self) -> str:
        """``HOST:PORT`` on this node for the group's store (rank 0's actor)."""
        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            return f"{ip}:{s.getsockname()[1]}"

    def start(self, argv: list[str], env: dict[str, str], log: str) -> int:
        from workbench_local.training.launcher import RANK_ENTRY

        full = {**os.environ, **env}
        iface = _interface_of(ray.util.get_node_ip_address())
        if iface:
            full.setdefault("GLOO_SOCKET_IFNAME", iface)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", RANK_ENTRY, json.dumps(argv)], stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full,
                                         preexec_fn=_die_with_parent)
        return self.proc.pid

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None:
            _end(self.proc, 30)


TrainerRankActor: Any = ray.remote(_TrainerRank)  # handles typed Any: their methods are called with .remote()


class RankGroup:
    """The trainer's rank actors seen as one process (``WorkerProcess``): it runs while every rank runs;
    the first failure ends it (the other ranks are stopped), and when a rank's node was lost the trainer's
    log ends with one ``workbench train:`` line naming the node, which the run fails with."""

    def __init__(self, actors: list[Any], waits: list[Any], where: list[dict[str, str]], ranks: int, pg: Any,
                 log: Path) -> None:
        self.actors, self.waits, self.where, self.ranks, self.pg, self.log = actors, waits, where, ranks, pg, log
        self.returncode: int | None = None
        self.pid = 0

    @classmethod
    def start(cls, argv: list[str], shape: TrainerShape, log: Path, runtime_env: dict[str, Any],
              placement: str) -> RankGroup:
        """The ranks in the placement group ``placement`` the launch reserved (one bundle a node)."""
        pg = get_placement_group(placement)
        actors = [TrainerRankActor.options(
            max_restarts=0, max_concurrency=2, num_cpus=shape.cpus, num_gpus=1 if shape.gpu else 0, runtime_env=runtime_env,
            scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=node)).remote()
            for node in range(shape.nodes) for _ in range(shape.ranks)]
        where = ray.get([a.where.remote() for a in actors])
        master = ray.get(actors[0].rendezvous.remote())
        host, port = master.rsplit(":", 1)
        world = shape.nodes * shape.ranks
        threads = max(1, int(shape.cpus))
        with open(log, "a") as out:
            out.writelines(f"trainer rank {rank} of {world} on Ray node {w['node_id']} ({w['ip']}), placement-group "
                           f"bundle {rank // shape.ranks} ({shape.strategy()})\n" for rank, w in enumerate(where))
        for rank, actor in enumerate(actors):
            env = {"RANK": str(rank), "WORLD_SIZE": str(world), "GROUP_RANK": str(rank // shape.ranks),
                   "LOCAL_RANK": "0" if shape.gpu else str(rank % shape.ranks),  # Ray shows each actor its own GPU
                   "LOCAL_WORLD_SIZE": str(shape.ranks), "MASTER_ADDR": host, "MASTER_PORT": port,
                   "OMP_NUM_THREADS": str(threads)}
            ray.get(actor.start.remote([*argv, "--threads", str(threads)], env, str(log)))
        group = cls(actors, [a.wait.remote() for a in actors], where, shape.ranks, pg, log)
        return group

    def _lost_node(self) -> str | None:
        """The first of the trainer's nodes Ray no longer lists as alive, named; None when none is lost
        (waiting up to :data:`NODE_LOSS_WAIT_S` while a rank's end is unknown: a peer of a lost node often
        fails before Ray declares the node dead)."""
        deadline = time.monotonic() + NODE_LOSS_WAIT_S
        while True:
            live = {n["NodeID"]: n for n in alive_nodes()}
            for i, w in enumerate(self.where):
                if w["node_id"] not in live:
                    node = i // self.ranks
                    return (f"trainer node {node} (rank {i}) on {node_name({'NodeManagerAddress': w['ip'], 'NodeID': w['node_id']})} "
                            f"{LOST}")
            done, _ = ray.wait(self.waits, num_returns=len(self.waits), timeout=0)
            if len(done) == len(self.waits) and all(_code(r) is not None for r in done):
                return None
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.25)

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        done, _ = ray.wait(self.waits, num_returns=len(self.waits), timeout=0)
        codes = [_code(r) for r in done]
        if any(c != 0 for c in codes):
            lost = self._lost_node()
            if lost:
                with open(self.log, "a") as out:
                    out.write(f"workbench train: {lost}\n")
            self.returncode = next((c for c in codes if c not in (0, None)), 1)
            self.kill()
        elif len(done) == len(self.waits):
            self.returncode = 0
            self._release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"the trainer's {len(self.actors)} Ray actors", timeout or 0)
            time.sleep(0.1)
        return code

    def terminate(self) -> None:
        for a in self.actors:
            a.stop.remote()

    def kill(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self._release()

    def _release(self) -> None:
        if self.pg is not None:
            remove_placement_group(self.pg)
            self.pg = None


def _code(ref: Any) -> int | None:
    """A rank's exit code; None when its actor died (with its node, or killed)."""
    try:
        return int(ray.get(ref))
    except ray.exceptions.RayActorError:
        return None


class RayRoles:
    """Inside the orchestrator actor: the inference actor beside it and the trainer's rank actors."""

    trainer_first: ClassVar[bool] = False  # the trainer gets the server's URL on its command line

    def __init__(self, handoff: dict[str, Any], shape: TrainerShape, env_vars: dict[str, str], placement: str,
                 vllm: dict[str, Any] | None = None) -> None:
        self.handoff, self.shape, self.env_vars, self.placement = handoff, shape, env_vars, placement
        self.vllm = vllm  # on GPUs: how vLLM serves the model (``launch.vllm_options``)

    def start_inference(self, model_spec: str, rdir: Path, *, max_batch: int, threads: int | None) -> Inference:
        if self.shape.gpu:  # vLLM on the GPUs bundle 0 holds for it, beside rank 0
            actor = InferenceActor.options(
                num_cpus=0, num_gpus=self.shape.inference_gpus, max_restarts=0, max_concurrency=2,
                runtime_env={"env_vars": self.env_vars}, scheduling_strategy=PlacementGroupSchedulingStrategy(
                    get_placement_group(self.placement), placement_group_bundle_index=0)).remote()
            started = actor.start_vllm.remote(model_spec, str(rdir), self.vllm or {})
        else:  # beside the orchestrator, on the node of the trainer's rank 0: they meet on its loopback
            actor = InferenceActor.options(
                num_cpus=0, max_restarts=0, max_concurrency=2, runtime_env={"env_vars": self.env_vars},
                scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                                   soft=False)).remote()
            started = actor.start.remote(model_spec, str(rdir), max_batch, threads)
        try:
            root, model = ray.get(started)
        except ray.exceptions.RayTaskError as e:
            ray.kill(actor)
            raise ConfigError(str(e.cause) if e.cause is not None else str(e)) from None

        def stop() -> None:
            try:
                ray.get(actor.stop.remote(), timeout=60)
            finally:
                ray.kill(actor)

        return Inference(root, model, stop)

    def start_trainer(self, db: Path, run_id: str, server_root: str | None, rdir: Path,
                      threads: int | None) -> tuple[RankGroup, Path | None]:
        assert server_root, "the Ray trainer starts after the inference server is up"
        log = rdir / "trainer.log"
        return RankGroup.start(handoff_argv(self.handoff, run_id, server_root, rdir), self.shape, log,
                               {"env_vars": self.env_vars}, self.placement), log


class _Orchestrator:
    """The run's orchestrator: its working directory is the bundle as it arrived."""

    def run(self, spec: dict[str, Any]) -> tuple[str, str]:
        """(final status, error line) of the run ``spec`` describes."""
        from workbench_cloud.job import run_remote
        from workbench_cloud.stream import open_log

        from workbench.errors import WorkbenchError

        log = open_log(spec["stream"])
        shape = TrainerShape(**spec["shape"])
        try:
            status = run_remote(os.getcwd(), spec["bundle_hash"], spec["config"], log, run_id=spec["run_id"],
                                workdir=spec["workdir"], cost=spec["cost"], handoff=spec["handoff"],
                                roles=RayRoles(spec["handoff"], shape, spec["env_vars"], spec["placement"],
                                               spec.get("vllm")),
                                threads=spec.get("threads"), resume=bool(spec.get("resume")))
        except WorkbenchError as e:
            log.append([{"kind": "run", "row": {"id": spec["run_id"], "status": "failed", "error": str(e),
                                                "finished_at": time.time(), "summary": "{}", "model": ""}}])
            return "failed", str(e)
        return status, ""


OrchestratorActor: Any = ray.remote(_Orchestrator)  # handles typed Any: their methods are called with .remote()


__all__ = ["InferenceActor", "OrchestratorActor", "RankGroup", "RayRoles", "TrainerRankActor"]
