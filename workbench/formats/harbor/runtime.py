"""Where Harbor tasks run: each task in a container of its own image, built from its ``environment/``.

A Harbor dataset's tasks each bring a Dockerfile and limits, so the environment's runtime is a
``wb.Docker`` whose pool opens one ``wb.Docker(dockerfile=..., as_image=True)`` pool per task, on the
first rollout of that task or up front (``prepare``, before a run is recorded, so a Dockerfile that does
not build is one error naming the task). Images are tagged by the content of their folder, so an unchanged
task is built once. Every sub-pool's containers see one shared bridge folder, so an agent program reaches
the interception proxy from any task's container.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.authoring.runtimes import Docker
from workbench.authoring.sandbox import PoolStats, Sandbox, SandboxError, SandboxPool

if TYPE_CHECKING:
    from workbench.formats.harbor.task_dir import HarborTask
    from workbench.records.task import Task

#: What a Harbor task's processes may use besides its declared cpus and memory: its agent compiles,
#: installs packages and runs test suites, so the per-process limits are generous.
_PIDS = 4096
_FILE_SIZE_MB = 1 << 14
#: How many task images ``prepare`` builds at once.
BUILDS_AT_ONCE = 3


def task_runtime(task: HarborTask, binds: Sequence[str] = ()) -> Docker:
    """The Docker runtime one Harbor task runs in: its image, as the image declares it, with its limits (and
    ``binds``: host paths every task's container sees read-only, such as an agent program's files)."""
    source: dict[str, Any] = ({"dockerfile": str(task.dockerfile)} if task.dockerfile is not None
                              else {"image": task.docker_image})
    longest = max(task.agent_timeout_s, task.verifier_timeout_s)
    cpus = min(task.cpus, float(os.cpu_count() or 1))  # Docker refuses more cores than the machine has
    return Docker(**source, binds=list(binds), as_image=True, network=task.network, cpus=cpus,
                  memory=task.memory_mb, timeout=longest, cpu_seconds=int(longest) + 60, pids=_PIDS,
                  file_size_mb=_FILE_SIZE_MB, build_timeout=task.build_timeout_s)
    # ``storage_mb`` is not applied, as Harbor's own Docker environment does not apply it: most engines'
    # storage driver (overlay2 on ext4) cannot, and a task must score here as it does under `harbor run`.


def task_key(task: Task | None) -> str:
    harbor = (task.info or {}).get("harbor") if task is not None else None
    name = harbor.get("task") if isinstance(harbor, dict) else None
    if not isinstance(name, str):
        raise SandboxError(f"task {getattr(task, 'id', None)!r} is not a Harbor task: its sandbox cannot be chosen")
    return name


@dataclass(slots=True)
class HarborRuntime(Docker):
    """The runtime of a Harbor environment: each task's own image and limits (``task_runtime``)."""

    tasks: Mapping[str, HarborTask] = field(default_factory=dict)

    def pool(self, *, run_id: str = "", size: int = 4, env_dir: str | Path | None = None) -> SandboxPool:
        return PerTaskPool(self, run_id=run_id, size=size)

    @property
    def spec(self) -> str:
        return "docker"


class PerTaskPool(SandboxPool):
    """One Docker pool per Harbor task, opened when first needed; sandboxes go back to their own pool."""

    kind = "docker"

    def __init__(self, runtime: HarborRuntime, *, run_id: str = "", size: int = 4) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.size = size
        self.pools: dict[str, SandboxPool] = {}
        self.owner: weakref.WeakKeyDictionary[Sandbox, SandboxPool] = weakref.WeakKeyDictionary()
        self.locks: dict[str, asyncio.Lock] = {}
        self.bridge_dir: Path | None = None
        self.closed = False

    @property
    def stats(self) -> PoolStats:  # type: ignore[override]  # the sum of the task pools'
        out = PoolStats()
        for p in self.pools.values():
            out.acquired += p.stats.acquired
            out.created += p.stats.created
            out.cold += p.stats.cold
            out.sandbox_seconds += p.stats.sandbox_seconds
            out.acquire_s.extend(p.stats.acquire_s)
        return out

    @property
    def held(self) -> set[Any]:  # type: ignore[override]
        return {sb for p in self.pools.values() for sb in p.held}

    async def start(self) -> PerTaskPool:
        self.bridge_dir = Path(tempfile.mkdtemp(prefix="wb-harbor-bridge-"))
        os.chmod(self.bridge_dir, 0o755)
        return self

    async def prepare(self, tasks: Sequence[Task]) -> None:
        """Build (or find) the image of every task ``tasks`` names before the run starts, a few at a time; the
        first task (in order) whose image cannot be had is the error."""
        gate = asyncio.Semaphore(BUILDS_AT_ONCE)

        async def one(name: str) -> None:
            async with gate:
                await self._pool_for(name)

        names = list(dict.fromkeys(task_key(t) for t in tasks))
        for outcome in await asyncio.gather(*(one(n) for n in names), return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    async def _pool_for(self, name: str) -> SandboxPool:
        lock = self.locks.setdefault(name, asyncio.Lock())
        async with lock:
            if name in self.pools:
                return self.pools[name]
            task = self.runtime.tasks.get(name)
            if task is None:
                raise SandboxError(f"Harbor task {name!r} is not part of this environment")
            sub = task_runtime(task, self.runtime.binds).pool(run_id=self.run_id, size=0, env_dir=task.dir)
            try:
                await sub.start()
            except SandboxError as e:
                await sub.close()
                raise SandboxError(f"Harbor task {name}: {e}") from None
            if self.bridge_dir is not None and hasattr(sub, "bridge_dir"):
                sub.bridge_dir = self.bridge_dir  # no container exists yet: every one mounts the shared folder
            self.pools[name] = sub
            return sub

    async def acquire(self, rollout_id: str = "", task: Task | None = None) -> Sandbox:
        if self.closed:
            raise SandboxError("the sandbox pool is closed")
        sub = await self._pool_for(task_key(task))
        sb = await sub.acquire(rollout_id, task)
        self.owner[sb] = sub
        return sb

    async def release(self, sandbox: Sandbox) -> None:
        sub = self.owner.pop(sandbox, None)
        if sub is not None:
            await sub.release(sandbox)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        pools, self.pools = list(self.pools.values()), {}
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)
        if self.bridge_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self.bridge_dir, True)
