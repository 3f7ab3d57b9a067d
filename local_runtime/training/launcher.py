"""How a trainer of several processes starts: one ``torchrun`` agent per node (``python -m
torch.distributed.run``), joined by a c10d rendezvous, each agent starting ``ranks`` processes.

One home for the command line, used by every place that starts a trainer:

* ``workbench train`` (``workbench_local.training.roles.LocalRoles``) and ``workbench launch --backend
  local`` (``workbench_cloud.roles.HandoffRoles``) run every node on this machine
  (:func:`start_local_nodes`): the rendezvous on a free loopback port, each agent's address
  127.0.0.1 and gloo bound to the loopback interface (``GLOO_SOCKET_IFNAME=lo``), so no packet
  leaves through the machine's own address; all agents append to one log.
* the Modal trainer (``workbench_cloud.modal.trainer``) runs one agent per container with the
  cluster's addresses (:func:`torchrun_argv` with node 0's address as the rendezvous).

:class:`NodeGroup` is the agents seen as one process (``poll``/``wait``/``terminate``/``kill``), so
the orchestrator drives a group exactly like a single trainer process. :func:`placement_problem`
says, before anything starts, why this machine cannot hold the trainer's processes.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from workbench.errors import ConfigError

#: The module every rank runs (:func:`rank_main`), given the trainer's own command line.
RANK_ENTRY = "workbench_local.training.launcher"
#: The most trainer processes one CPU core runs (each a model replica or shard, oversubscribed).
RANKS_PER_CORE = 4
#: Environment every local multi-process trainer gets: all traffic on the loopback interface.
LOOPBACK_ENV = {"GLOO_SOCKET_IFNAME": "lo", "MASTER_ADDR": "127.0.0.1"}


def torchrun_argv(module_argv: Sequence[str], *, nodes: int, ranks_per_node: int, node_rank: int, endpoint: str,
                  rdzv_id: str, local_addr: str | None = None) -> list[str]:
    """The command of node ``node_rank``'s agent: ``ranks_per_node`` processes each running
    ``python -m MODULE ARGS`` (``module_argv``), in a group of ``nodes`` agents meeting at
    ``endpoint`` (``HOST:PORT``, node 0 hosts the rendezvous store) under the id ``rdzv_id``. The
    rendezvous numbers the nodes (torchrun's ``--node-rank`` is for its static rendezvous only), so
    node 0 is named by hosting the store, and global rank 0 may be on any node.
    ``local_addr``: the address the other nodes reach this one at (else torch looks up the host
    name). A failed rank fails the run: no restarts. Each rank runs :func:`rank_main` with the module's
    command line as one JSON argument: torchrun's own parser would take (or call ambiguous) a worker
    option that begins like one of its own (``--run`` like ``--run-path``)."""
    if nodes < 1 or ranks_per_node < 1 or not 0 <= node_rank < nodes:
        raise ValueError(f"node {node_rank} of {nodes} with {ranks_per_node} ranks each is not a trainer group")
    if not module_argv:
        raise ValueError("torchrun_argv needs the module to run")
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
            "--nproc-per-node", str(ranks_per_node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--rdzv-id", rdzv_id, "--rdzv-conf", f"is_host={int(node_rank == 0)}",
            *(["--local-addr", local_addr] if local_addr else []), "--max-restarts", "0",
            "--module", RANK_ENTRY, json.dumps(list(module_argv))]


def threads_per_rank(threads: int, local_ranks: int) -> int:
    """The torch threads of each of ``local_ranks`` processes sharing ``threads`` (at least one)."""
    return max(1, threads // max(1, local_ranks))


def placement_problem(nodes: int, ranks: int, *, device: str = "auto", cpu_count: int | None = None,
                      gpu_count: int | None = None, context_parallel: int = 1) -> str | None:
    """Why this machine cannot run ``nodes`` × ``ranks`` trainer processes on ``device`` (all nodes
    here), or None: on GPUs one process per GPU; on the CPU at most :data:`RANKS_PER_CORE` a core;
    ``context_parallel > 1`` trains on CUDA only (torch's ring attention has no CPU backward).
    ``gpu_count`` None: asked of torch, only when more than one process is asked for."""
    for name, value in (("nodes", nodes), ("ranks", ranks)):
        if value < 1:
            return f"trainer.{name} must be at least 1, not {value}"
    world = nodes * ranks
    if world == 1:
        return None
    asked = f"trainer.nodes × trainer.ranks = {nodes} × {ranks} = {world} trainer processes"
    if device != "cpu":
        if gpu_count is None:
            import torch

            gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpu_count:
            if world > gpu_count:
                return (f"{asked}, but this machine has {gpu_count} GPU(s) and every process needs its own; "
                        f"lower trainer.ranks or --nodes")
            return None
        if device.startswith("cuda"):
            return f"{asked} on trainer.device = {device!r}, but this machine has no GPU"
    if context_parallel > 1:
        where = "this machine has no GPU" if device == "auto" else f"trainer.device is {device!r}"
        return (f"trainer.context_parallel = {context_parallel}: context parallelism needs CUDA ring attention; "
                f"{where}")
    cores = cpu_count if cpu_count is not None else (os.cpu_count() or 1)
    if world > cores * RANKS_PER_CORE:
        return (f"{asked}, more than this machine's {cores} CPU core(s) can run (at most {RANKS_PER_CORE} a core: "
                f"{cores * RANKS_PER_CORE}); lower trainer.ranks or --nodes")
    return None


def check_placement(nodes: int, ranks: int, device: str = "auto", context_parallel: int = 1) -> None:
    """Raise :func:`placement_problem`'s sentence as a ``ConfigError``."""
    problem = placement_problem(nodes, ranks, device=device, context_parallel=context_parallel)
    if problem is not None:
        raise ConfigError(problem)


class NodeGroup:
    """A trainer's torchrun agents seen as one process (``workbench.training.roles.WorkerProcess``):
    it runs while every agent runs; its exit code is the first non-zero of the nodes (the others are
    then stopped), or 0 when all succeed; ``terminate`` and ``kill`` reach every agent."""

    def __init__(self, procs: Sequence[subprocess.Popen[bytes]]) -> None:
        if not procs:
            raise ValueError("a node group needs at least one node")
        self.procs = list(procs)
        self.returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.procs[0].pid

    def poll(self) -> int | None:
        if self.returncode is None:
            codes = [p.poll() for p in self.procs]
            failed = next((c for c in codes if c not in (None, 0)), None)
            if failed is not None:
                self.returncode = failed
                self.terminate()  # the group cannot go on without a node
            elif all(c == 0 for c in codes):
                self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The group's exit code once every agent has exited (``TimeoutExpired`` after ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.poll()
            if code is not None and all(p.poll() is not None for p in self.procs):
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"the trainer's {len(self.procs)} torchrun nodes", timeout or 0)
            time.sleep(0.05)

    def terminate(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()


def start_local_nodes(module_argv: Sequence[str], *, nodes: int, ranks: int, rdzv_id: str, log: Path,
                      threads: int, env: Mapping[str, str] | None = None) -> NodeGroup:
    """Start ``nodes`` torchrun agents on this machine, ``ranks`` processes each, running ``python -m
    MODULE ARGS`` with ``--threads`` of their share of ``threads``; all on the loopback interface,
    every agent appending to ``log``."""
    from workbench_local.training.distributed import free_port

    per_rank = threads_per_rank(threads, nodes * ranks)
    endpoint = f"127.0.0.1:{free_port()}"
    base = {**(os.environ if env is None else env), **LOOPBACK_ENV, "OMP_NUM_THREADS": str(per_rank)}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(log, "ab") as out:
            for node in range(nodes):
                cmd = torchrun_argv([*module_argv, "--threads", str(per_rank)], nodes=nodes, ranks_per_node=ranks,
                                    node_rank=node, endpoint=endpoint, rdzv_id=rdzv_id, local_addr="127.0.0.1")
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              env=base))
    except BaseException:
        group = NodeGroup(procs) if procs else None
        if group is not None:
            group.kill()
        raise
    return NodeGroup(procs)


def rank_main(argv_json: str) -> int:
    """One rank under torchrun: pin the GPU of ``LOCAL_RANK`` (when there are GPUs), join the group torchrun
    describes (``workbench_local.training.distributed.init_from_env``: gloo on CPU, NCCL on GPUs), run the
    module of ``argv_json`` (``["MODULE", ARGS...]``) as ``__main__``, leave the group with the other ranks
    once it finished; its exit code."""
    import torch
    from workbench_local.training.distributed import init_from_env, leave_group

    module, *rest = json.loads(argv_json)
    env = os.environ
    print(f"trainer rank {env.get('RANK', '0')} of {env.get('WORLD_SIZE', '1')} (node {env.get('GROUP_RANK', '0')}, "
          f"local rank {env.get('LOCAL_RANK', '0')}, rendezvous {env.get('MASTER_ADDR', '?')}): {module}", flush=True)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    init_from_env()
    sys.argv = [module, *rest]
    code: int | str | None = 0
    finished = False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        finished = True
    except SystemExit as e:
        code = e.code
        finished = code in (0, None)
    finally:
        if finished:  # a failing rank leaves without the collective teardown, and torchrun stops its peers
            leave_group()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        return 1
    return int(code or 0)


__all__ = ["LOOPBACK_ENV", "RANKS_PER_CORE", "RANK_ENTRY", "NodeGroup", "check_placement", "placement_problem", "rank_main",
           "start_local_nodes",
           "threads_per_rank", "torchrun_argv"]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(f"usage: python -m {RANK_ENTRY} '[\"MODULE\", ARGS...]' (each rank, under torchrun)", file=sys.stderr)
        sys.exit(2)
    from workbench_local.training.distributed import exit_now

    exit_now(rank_main(sys.argv[1]))
