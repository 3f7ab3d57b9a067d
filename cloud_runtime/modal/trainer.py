"""The trainer role: one process per GPU on every trainer node, joined in one torch.distributed group.

``build_app`` registers :func:`train_node` as the ``trainer`` function on ``{gpu}:{gpus_per_node}``,
under ``@modal.clustered(size=trainer_nodes)`` when there is more than one node. Modal starts the
same call in every container of the cluster; each container

1. reads its node rank and the nodes' addresses from ``modal.Cluster.from_context()``
   (:func:`cluster_view`; a single node without a cluster is rank 0 of one);
2. derives every local process's ``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK`` / ``WORLD_SIZE`` /
   ``LOCAL_RANK`` (:func:`rank_envs`, a pure function: node 0's address is the rendezvous, global
   rank = node rank × GPUs per node + local rank) — what ``torchrun`` would set, without its
   elastic agent;
3. starts one process per GPU (:func:`launch_ranks`): ``python -m workbench_cloud.modal.trainer
   MODULE ARGS...``, which pins its GPU, joins the group (``workbench_local.training.distributed.init_from_env``,
   NCCL) and runs ``MODULE`` as ``__main__`` — by default the training worker
   ``workbench_local.training.worker`` (the Trainer takes its rank and world size from the group);
4. on node 0, commits the run volume whenever the run folder changes (:class:`VolumeCommitter`), so
   a new adapter becomes visible to the inference nodes, which reload before loading it.

Only cluster rank 0's return value reaches the caller (Modal's rule for clustered functions); it is
the first non-zero exit code of that node's processes, or 0.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench_cloud.modal.spec import MASTER_PORT

DEFAULT_WORKER = "workbench_local.training.worker"


@dataclass(frozen=True, slots=True)
class ClusterView:
    """This container's place in its cluster: its rank and every container's address, by rank."""

    rank: int
    ips: tuple[str, ...]

    @property
    def nodes(self) -> int:
        return len(self.ips)


def cluster_view() -> ClusterView:
    """Inside a Modal container: the cluster's view, or a one-node view outside a cluster."""
    import modal
    from modal.exception import InvalidError

    try:
        cluster = modal.Cluster.from_context()
        return ClusterView(int(cluster.container_rank()), tuple(cluster.container_ips()))
    except InvalidError:  # not a clustered function: one node
        return ClusterView(0, ("127.0.0.1",))


def url_host(ip: str) -> str:
    """An address as it goes into a URL (IPv6 in brackets)."""
    return f"[{ip}]" if ":" in ip and not ip.startswith("[") else ip


def rank_envs(view: ClusterView, gpus_per_node: int, master_port: int = MASTER_PORT) -> list[dict[str, str]]:
    """The torch.distributed environment of each process on node ``view.rank``, by local rank."""
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be at least 1")
    if not view.ips or not 0 <= view.rank < view.nodes:
        raise ValueError(f"node rank {view.rank} is outside a cluster of {view.nodes} node(s)")
    master = view.ips[0] if view.nodes > 1 else "127.0.0.1"
    world = view.nodes * gpus_per_node
    return [{
        "MASTER_ADDR": master,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(world),
        "RANK": str(view.rank * gpus_per_node + local),
        "LOCAL_RANK": str(local),
        "LOCAL_WORLD_SIZE": str(gpus_per_node),
        "NODE_RANK": str(view.rank),
        "GROUP_RANK": str(view.rank),
        "NNODES": str(view.nodes),
    } for local in range(gpus_per_node)]


def launch_ranks(envs: Sequence[Mapping[str, str]], argv: Sequence[str], *, poll_s: float = 0.5,
                 base_env: Mapping[str, str] | None = None, log_dir: Path | None = None) -> int:
    """Run ``python -m workbench_cloud.modal.trainer *argv`` once per entry of ``envs``; wait for all.
    The first process to fail stops the others; returns its exit code, or 0 when all succeed."""
    base = dict(os.environ if base_env is None else base_env)
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for env in envs:
            out = None
            if log_dir is not None:
                log_dir.mkdir(parents=True, exist_ok=True)
                out = open(log_dir / f"rank{env['RANK']}.log", "ab")  # noqa: SIM115 (closed below)
                logs.append(out)
            procs.append(subprocess.Popen([sys.executable, "-m", "workbench_cloud.modal.trainer", *argv],
                                          env={**base, **env}, stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT if out else None))
        while True:
            codes = [p.poll() for p in procs]
            failed = next((c for c in codes if c not in (None, 0)), None)
            if failed is not None:
                return failed
            if all(c == 0 for c in codes):
                return 0
            time.sleep(poll_s)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()


def rank_main(argv: Sequence[str]) -> int:
    """One rank: pin the GPU of ``LOCAL_RANK``, join the group, run ``argv[0]`` as ``__main__``."""
    if not argv:
        print("usage: python -m workbench_cloud.modal.trainer MODULE [ARGS...]", file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist
    from workbench_local.training.distributed import init_from_env

    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    init_from_env()
    module, *rest = argv
    sys.argv = [module, *rest]
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if isinstance(code, str):
        print(code, file=sys.stderr)
        return 1
    return int(code or 0)


class VolumeCommitter:
    """Calls ``commit`` whenever the files under ``root`` changed since the last commit (names,
    sizes, modification times), polling every ``interval_s`` in a thread."""

    def __init__(self, root: Path | str, commit: Callable[[], None], interval_s: float = 1.0,
                 log: Callable[[str], None] = print) -> None:
        self.root, self.commit, self.interval_s, self.log = Path(root), commit, interval_s, log
        self.last: tuple[tuple[str, int, int], ...] = ()
        self.commits = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        out = []
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                p = os.path.join(dirpath, name)
                try:
                    st = os.stat(p)
                except FileNotFoundError:  # renamed away while walking (an atomic save)
                    continue
                out.append((os.path.relpath(p, self.root), st.st_size, st.st_mtime_ns))
        return tuple(sorted(out))

    def poll(self) -> bool:
        """Commit if something changed; True when it committed."""
        sig = self.signature()
        if sig == self.last:
            return False
        try:
            self.commit()
        except Exception as e:  # a transient Modal error: try again on the next tick
            if not self._failing:
                self.log(f"volume commit failed ({type(e).__name__}: {e}); retrying")
            self._failing = True
            return False
        self._failing = False
        self.last = sig
        self.commits += 1
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def __enter__(self) -> VolumeCommitter:
        self._thread = threading.Thread(target=self._run, name="volume-committer", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()  # the last files (final adapter, checkpoint) are durable when the function returns


def train_node(spec_json: str, argv: list[str]) -> int:
    """The ``trainer`` Modal function: runs on every node of the trainer cluster (see module doc).
    ``argv`` is ``[MODULE, ARGS...]``; an empty list runs ``workbench_local.training.worker`` with no
    arguments (it then prints its usage: the orchestrator always passes them)."""
    import modal
    from workbench_cloud.modal.spec import ModalSpec

    spec = ModalSpec.from_json(spec_json)
    view = cluster_view()
    runs = modal.Volume.from_name(spec.volume_name)
    runs.reload()  # the orchestrator's config.json and any checkpoint to resume from
    modal.Volume.from_name(spec.hf_cache_volume).reload()  # weights the orchestrator prefetched
    envs = rank_envs(view, spec.gpus_per_node)
    argv = list(argv) or [DEFAULT_WORKER]
    print(f"trainer node {view.rank}/{view.nodes}: ranks {envs[0]['RANK']}..{envs[-1]['RANK']} of "
          f"{envs[0]['WORLD_SIZE']}, rendezvous {envs[0]['MASTER_ADDR']}:{envs[0]['MASTER_PORT']}", flush=True)
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if view.rank != 0:  # only global rank 0 writes adapters and checkpoints
        return launch_ranks(envs, argv)
    with VolumeCommitter(run_dir, runs.commit):
        return launch_ranks(envs, argv)


if __name__ == "__main__":
    sys.exit(rank_main(sys.argv[1:]))
