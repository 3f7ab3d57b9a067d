"""The trainer role: one process per GPU on every trainer node, joined in one torch.distributed group.

``build_app`` registers :func:`train_node` as the ``trainer`` function on ``{gpu}:{gpus_per_node}``,
under ``@modal.clustered(size=trainer_nodes)`` when there is more than one node. Modal starts the
same call in every container of the cluster; each container

1. reads its node rank and the nodes' addresses from ``modal.Cluster.from_context()``
   (:func:`cluster_view`; a single node without a cluster is rank 0 of one);
2. runs one ``torchrun`` agent (:func:`node_command`: the command line every trainer of this project
   starts with, ``workbench_local.training.launcher.torchrun_argv``) with this container's node rank,
   one process per GPU, and a c10d rendezvous at node 0's address; each process pins its GPU, joins
   the group (NCCL) and runs ``MODULE`` as ``__main__`` (``workbench_local.training.launcher.rank_main``)
   — by default the training worker ``workbench_local.training.worker``;
3. commits the run volume whenever the run folder changes (:class:`VolumeCommitter`), so a new
   adapter becomes visible to the inference nodes, which reload before loading it. Every node
   commits: the rendezvous, not the container rank, decides which node holds global rank 0, the one
   that writes adapters and checkpoints (a node that wrote nothing has nothing to commit).

Only cluster rank 0's return value reaches the caller (Modal's rule for clustered functions): its
agent's exit code, non-zero when any rank of the group failed.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workbench_cloud.modal.spec import MASTER_PORT
from workbench_local.training.launcher import torchrun_argv

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


def node_command(view: ClusterView, gpus_per_node: int, argv: Sequence[str], rdzv_id: str,
                 master_port: int = MASTER_PORT) -> list[str]:
    """The torchrun agent of node ``view.rank``: ``gpus_per_node`` processes running ``python -m
    *argv``, meeting node 0's address (the rendezvous store) under ``rdzv_id``; on one node,
    everything on the loopback address."""
    if gpus_per_node < 1:
        raise ValueError("gpus_per_node must be at least 1")
    if not view.ips or not 0 <= view.rank < view.nodes:
        raise ValueError(f"node rank {view.rank} is outside a cluster of {view.nodes} node(s)")
    master, here = (view.ips[0], view.ips[view.rank]) if view.nodes > 1 else ("127.0.0.1", "127.0.0.1")
    return torchrun_argv(argv, nodes=view.nodes, ranks_per_node=gpus_per_node, node_rank=view.rank,
                         endpoint=f"{url_host(master)}:{master_port}", rdzv_id=rdzv_id, local_addr=here)


def run_node(command: Sequence[str], *, base_env: Mapping[str, str] | None = None, log: Path | None = None) -> int:
    """Run a node's agent to its end (its output to ``log`` when given, else inherited); its exit code.
    The agent stops its ranks when one fails."""
    env = dict(os.environ if base_env is None else base_env)
    if log is None:
        return subprocess.run(list(command), env=env, stdin=subprocess.DEVNULL, check=False).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.run(list(command), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              check=False).returncode


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
    command = node_command(view, spec.gpus_per_node, list(argv) or [DEFAULT_WORKER], spec.run_id)
    print(f"trainer node {view.rank}/{view.nodes}: {spec.gpus_per_node} ranks of {view.nodes * spec.gpus_per_node}, "
          f"rendezvous {url_host(view.ips[0]) if view.nodes > 1 else '127.0.0.1'}:{MASTER_PORT}", flush=True)
    run_dir = Path(spec.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    with VolumeCommitter(run_dir, runs.commit):
        return run_node(command)
