"""Joining a Ray cluster, and a run's key-value store on it: one named actor on the head node, holding the run's
event log (``workbench_cloud.stream.KeyValueLog``) and its batch hand-off logs (``workbench_cloud.handoff``) under
their own key prefixes — what a ``modal.Dict`` holds on Modal.

The launch that creates it owns it, as it owns the run's other actors: other processes (the trainer's ranks,
``workbench runs RUN --follow``, ``workbench stop RUN``) reach it by name while the launch runs; the launch
removes it once the run's stream is in the local store, and a launch killed outright takes it along (Ray ends
an actor with its owner), so nothing of a run is left on the cluster.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray

from workbench.errors import ConfigError, StreamGone

#: The Ray namespace of every named actor a launch creates (the run's key-value store).
NAMESPACE = "workbench"
#: The resource that places an actor on the head node (Ray gives the head one unit of it).
HEAD_RESOURCE = "node:__internal_head__"


def connect(address: str | None = None, runtime_env: dict[str, Any] | None = None) -> str:
    """Join the Ray cluster at ``address`` (else ``RAY_ADDRESS``) as a driver whose job has ``runtime_env``,
    unless this process is already in one (a driver, or a Ray worker); returns the GCS address it is
    connected to."""
    import ray

    if not ray.is_initialized():
        target = address or os.environ.get("RAY_ADDRESS") or None
        if not target:
            raise ConfigError("no Ray cluster to connect to: pass --address HOST:PORT or set RAY_ADDRESS")
        try:
            ray.init(address=target, namespace=NAMESPACE, logging_level=logging.ERROR, log_to_driver=False,
                     runtime_env=runtime_env)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"cannot connect to the Ray cluster at {target}: {e}") from None
    return str(ray.get_runtime_context().gcs_address)


class _KeyValue:
    """A dict, read and written by remote calls (threads: each call is one dict operation)."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value


KeyValueActor: Any = ray.remote(_KeyValue)  # handles typed Any: their methods are called with .remote()


class RayDict:
    """The dict-like face ``KeyValueLog`` reads and writes (``get``, item assignment) over the run's
    :class:`KeyValueActor` named ``name``; ``create`` starts it (on the head node) when it is not there."""

    def __init__(self, name: str, *, address: str | None = None, create: bool = False) -> None:
        connect(address)
        self.name = name
        if create:
            self.actor = KeyValueActor.options(
                name=name, namespace=NAMESPACE, get_if_exists=True, num_cpus=0, max_concurrency=8,
                resources={HEAD_RESOURCE: 0.001}).remote()
        else:
            try:
                self.actor = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                raise ConfigError(f"the run's stream {name!r} is not on the Ray cluster (the run ended, or the "
                                  "cluster was stopped)") from None

    def get(self, key: str, default: Any = None) -> Any:
        return self._answer(self.actor.get.remote(key, default))

    def __setitem__(self, key: str, value: Any) -> None:
        self._answer(self.actor.put.remote(key, value))

    def _answer(self, call: Any) -> Any:
        """What the actor answered to ``call``; :class:`StreamGone` once the actor is gone (its launch ended)."""
        try:
            return ray.get(call)
        except ray.exceptions.RayActorError:
            raise StreamGone(f"the run's stream {self.name!r} left the Ray cluster") from None

    def remove(self) -> None:
        ray.kill(self.actor)


__all__ = ["HEAD_RESOURCE", "NAMESPACE", "KeyValueActor", "RayDict", "connect"]
