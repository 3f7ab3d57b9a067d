"""The Ray cluster a launch runs on: connecting to it (or starting one for the run), and whether it
can hold the trainer before anything starts.

``--address`` names the cluster (``HOST:PORT`` of its head's GCS, or ``ray://HOST:10001`` through Ray
Client); without it ``RAY_ADDRESS``; without that a one-node cluster is started for the run on this
machine, on 127.0.0.1, and stopped after it (``ray.init`` with no address).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from workbench_cloud.ray_kv import NAMESPACE, connect

from workbench.errors import ConfigError


@contextmanager
def cluster(address: str | None, runtime_env: dict[str, Any] | None = None) -> Iterator[str]:
    """Connected, as a job with ``runtime_env`` (the bundle as its ``working_dir``: Ray ships it to every
    node), to the cluster ``address`` names (else ``RAY_ADDRESS``), or to a one-node cluster started here
    on 127.0.0.1 for the run and stopped when the block ends; yields the GCS address."""
    import ray

    target = address or os.environ.get("RAY_ADDRESS") or None
    try:
        if target:
            yield connect(target, runtime_env)
            return
        ray.init(address="local", namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False,
                 include_dashboard=False,
                 _node_ip_address="127.0.0.1", runtime_env=runtime_env)
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()  # the driver leaves; a cluster started here stops


@dataclass(frozen=True, slots=True)
class TrainerShape:
    """What the run asks of the cluster: ``nodes`` nodes (one placement-group bundle each, spread over
    distinct nodes when more than one), ``ranks`` trainer processes on each, each with ``cpus`` CPUs and one
    GPU when ``gpu``; on a GPU cluster the first node also holds the inference server's ``inference_gpus``
    (vLLM beside rank 0, so the two meet on its loopback)."""

    nodes: int
    ranks: int
    cpus: float = 1.0
    gpu: bool = False
    inference_gpus: int = 0

    def bundle(self) -> dict[str, float]:
        """One node's share of the trainer."""
        out = {"CPU": self.cpus * self.ranks}
        if self.gpu:
            out["GPU"] = float(self.ranks)
        return out

    def bundles(self) -> list[dict[str, float]]:
        """The placement group's bundles: one a node, the first with the inference server's GPUs too."""
        out = [self.bundle() for _ in range(self.nodes)]
        if self.gpu and self.inference_gpus:
            out[0] = {**out[0], "GPU": out[0]["GPU"] + self.inference_gpus}
        return out

    def strategy(self) -> str:
        return "STRICT_SPREAD" if self.nodes > 1 else "PACK"

    def describe(self) -> str:
        each = " and ".join(f"{v:g} {k}" for k, v in self.bundle().items())
        serving = (f", the first with {self.inference_gpus} more GPU(s) for the inference server (vLLM)"
                   if self.gpu and self.inference_gpus else "")
        return (f"trainer.nodes = {self.nodes} × trainer.ranks = {self.ranks}: {self.nodes} node(s) with {each} "
                f"each{', every one a different node' if self.nodes > 1 else ''}{serving}")


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes as ``ray.nodes()`` lists them."""
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]


def node_name(node: dict[str, Any]) -> str:
    """How a line names a node: its address and the start of its Ray node id."""
    return f"{node.get('NodeManagerAddress', '?')} (Ray node {str(node.get('NodeID', '?'))[:12]})"


def shortfall(shape: TrainerShape, nodes: list[dict[str, Any]] | None = None) -> str | None:
    """Why the live cluster cannot hold ``shape``, naming what is missing; None when it can."""
    nodes = alive_nodes() if nodes is None else nodes
    first, want = shape.bundles()[0], shape.bundle()

    def fits(node: dict[str, Any], need: dict[str, float]) -> bool:
        return all(float(node.get("Resources", {}).get(k, 0.0)) >= v for k, v in need.items())

    heads = [n for n in nodes if fits(n, first)]
    others = [n for n in nodes if fits(n, want)]
    if any(sum(1 for n in others if n is not h) >= shape.nodes - 1 for h in heads):
        return None
    have = ", ".join(
        f"{n.get('NodeManagerAddress', '?')}: " + ", ".join(f"{float(n.get('Resources', {}).get(k, 0.0)):g} {k}"
                                                            for k in first)
        for n in nodes) or "no live node"
    if not heads:
        need = " and ".join(f"{v:g} {k}" for k, v in first.items())
        return (f"the Ray cluster cannot hold the run: {shape.describe()}, but none of its {len(nodes)} live "
                f"node(s) has {need} for the first ({have})")
    missing = shape.nodes - len(others)
    need = " and ".join(f"{v:g} {k}" for k, v in want.items())
    return (f"the Ray cluster cannot hold the trainer: {shape.describe()}, but only {len(others)} of its "
            f"{len(nodes)} live node(s) have that ({have}); missing {max(1, missing)} node(s) with {need}")


def plan_shape(nodes: list[dict[str, Any]], where: str) -> dict[str, Any]:
    """The ``[cloud]`` keys a plan takes from a live cluster's ``nodes``: ``cloud.nodes`` (its nodes with
    GPUs), ``cloud.gpus_per_node`` (the fewest GPUs of one) and ``cloud.gpu`` when every one names the same
    accelerator type (Ray's ``accelerator_type:NAME`` resource); a cluster without GPUs is refused."""
    gpu_nodes = [n for n in nodes if float(n.get("Resources", {}).get("GPU", 0.0)) >= 1]
    if not gpu_nodes:
        raise ConfigError(f"the Ray cluster at {where} has no GPUs ({len(nodes)} live node(s), CPU only); a plan is "
                          "for GPUs: give cloud.nodes, cloud.gpus_per_node and cloud.gpu of the cluster you will use")
    out: dict[str, Any] = {"cloud.nodes": len(gpu_nodes),
                           "cloud.gpus_per_node": int(min(float(n["Resources"]["GPU"]) for n in gpu_nodes))}
    kinds = {k.removeprefix("accelerator_type:") for n in gpu_nodes for k in n.get("Resources", {})
             if k.startswith("accelerator_type:")}
    if len(kinds) == 1:
        out["cloud.gpu"] = kinds.pop()
    return out


def live_plan_shape(address: str) -> dict[str, Any]:
    """:func:`plan_shape` of the cluster at ``address`` (joined, asked, left)."""
    import ray

    connect(address)
    try:
        return plan_shape(alive_nodes(), address)
    finally:
        ray.shutdown()


def check_cluster(shape: TrainerShape) -> None:
    problem = shortfall(shape)
    if problem is not None:
        raise ConfigError(problem)


#: The words a run ends with when a node of it was lost (and a launch may continue it from its checkpoint).
LOST = "was lost mid-run"
#: How long the trainer's placement group may wait for its nodes.
PLACEMENT_WAIT_S = 120.0


def reserve(shape: TrainerShape, name: str) -> tuple[Any, str]:
    """The trainer's placement group ``name`` (one bundle a node), ready, and the Ray id of the node that
    holds bundle 0 — where the orchestrator, the inference server and rank 0 run, so they meet on that
    node's loopback."""
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    pg = placement_group(shape.bundles(), strategy=shape.strategy(), name=name)
    ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_WAIT_S)
    if not ready:
        remove_placement_group(pg)
        raise ConfigError(f"the Ray cluster could not place the trainer within {PLACEMENT_WAIT_S:g} s: {shape.describe()}")
    return pg, str(placement_group_table(pg)["bundles_to_node_id"][0])


def lost(node_ids: list[str]) -> str | None:
    """The first of ``node_ids`` Ray no longer lists as alive, named; None when all live."""
    live = {n["NodeID"] for n in alive_nodes()}
    dead = next((n for n in node_ids if n not in live), None)
    if dead is None:
        return None
    known = next((n for n in __import__("ray").nodes() if n.get("NodeID") == dead), {"NodeID": dead})
    return node_name(known)


__all__ = ["LOST", "PLACEMENT_WAIT_S", "TrainerShape", "lost", "reserve", "alive_nodes", "check_cluster", "cluster", "live_plan_shape", "node_name", "plan_shape",
           "shortfall"]
