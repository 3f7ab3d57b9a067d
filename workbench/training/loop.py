"""``workbench train``: the async RL loop on a laptop, three processes.

* the **inference server** (``workbench_local.server``, the embedded server; vLLM on GPUs speaks the
  same API): serves the base model as policy version 0 and every hot-loaded adapter ``step-N`` as
  version N;
* the **orchestrator** (this process): an endless :class:`~workbench.rollouts.engine.RolloutEngine` over the
  training tasks, writing finished groups to the store, sampling each new group from the newest
  policy; group ``g`` belongs to batch ``g // groups_per_step`` and may start once the trainer has
  taken ``batch - async_level`` steps (``async_level = 0`` is the ``--sync`` mode: generate, train,
  update, repeat); each rollout samples with a seed derived from ``loop.seed`` and its place (group,
  sample), so a ``--sync`` run's curve depends on the seed, not on the machine's load; held-out evals
  every ``eval_every`` steps;
* the **trainer** (``workbench_local.training.worker``): reads finished groups from the store, drops
  groups older than ``max_off_policy_steps`` versions, steps, hot-loads the adapter, records the
  step's metrics in ``train_metric``, checkpoints.

Everything the loop knows is in the store, so ``workbench runs`` and the TUI show a run live and
``--resume RUN`` continues it from its last checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workbench.analysis.reward_stats import stderr_of_sums
from workbench.authoring import discovery
from workbench.authoring.environment import Environment
from workbench.config.paths import data_dir
from workbench.errors import ConfigError, WorkbenchError
from workbench.fsutil import atomic_write
from workbench.records.task import Task
from workbench.rollouts.client import ChatClient, preflight, training_params
from workbench.rollouts.engine import RolloutEngine
from workbench.runs.evaluate import close_sandboxes, new_run_id, open_sandboxes
from workbench.store import Store
from workbench.store.train_records import resume_point
from workbench.training.memory import effective_sharding
from workbench.training.roles import (
    RESUMED_FROM,
    SERVER_ROOT_FILE,
    TrainRoles,
    WorkerProcess,
    write_server_root,
)
from workbench.training.run_config import RunConfig, validate_tables
from workbench.training.trainer_log import failure_lines

POLL_S = 0.01  # how often the orchestrator reads the trainer's new records (one indexed query)
#: A stop whose reason starts with this is a hand-over (a run continued by a fresh process, e.g. at
#: Modal's 24 h limit): the run is left ``resuming``, not finished, so followers keep following.
HANDOVER = "hand-over"


@dataclass(slots=True)
class TrainOutcome:
    run_id: str
    status: str
    summary: dict[str, Any] = field(default_factory=dict)


def run_dir(run_id: str) -> Path:
    return data_dir() / "runs" / run_id


def split_tasks(env: Environment, cfg: RunConfig) -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out eval tasks: the last ``eval_tasks``)."""
    tasks = list(env.tasks)
    held = cfg.loop.eval_tasks
    if held >= len(tasks):
        raise ConfigError(f"loop.eval_tasks ({held}) leaves no training tasks: {env.name!r} has {len(tasks)}; "
                          "hold out fewer with --loop.eval_tasks N (0 for none)")
    train, evals = (tasks[:-held], tasks[-held:]) if held else (tasks, [])
    if cfg.loop.groups_per_step > len(train) and not cfg.data:  # SFT data: a step's batch is of stored rollouts
        raise ConfigError(f"loop.groups_per_step ({cfg.loop.groups_per_step}) is larger than the task set "
                          f"({len(train)} training tasks{f' after holding out {held}' if held else ''}); "
                          "lower it or pass more tasks (-a / env.args)")
    return train, evals


def task_stream(tasks: list[Task], seed: int, start: int = 0) -> Iterator[tuple[int, Task]]:
    """Endless (group index, task): a fresh shuffle of ``tasks`` every epoch, from group ``start``."""
    n = len(tasks)
    g = start
    while True:
        order = list(range(n))
        random.Random(seed * 1_000_003 + g // n).shuffle(order)
        yield g, tasks[order[g % n]]
        g += 1


class Orchestrator:
    def __init__(self, cfg: RunConfig, store: Store, run_id: str, env: Environment, *,
                 on_record: Callable[[dict[str, Any]], None] | None = None,
                 should_stop: Callable[[], str | None] | None = None) -> None:
        self.cfg, self.store, self.run_id, self.env = cfg, store, run_id, env
        self.on_record = on_record
        self.should_stop = should_stop  # polled between steps: a reason to stop (a budget, `workbench stop`)
        self.stopped: str | None = None
        self.step = 0  # the trainer's policy version, as last read from the store
        self.step0 = 0  # the version this process started at (a resumed run starts at its checkpoint)
        self.group0 = 0
        # A resumed run whose trainer had taken steps samples nothing until its restarted trainer says
        # which checkpoint it resumes from: until then the records are a lost attempt's and the policy unknown.
        self.awaiting_trainer = False
        self.groups_ahead = 0  # groups sampled before the resume that the resumed trainer takes before this one's
        self.base_model = ""
        self.seen_id = 0
        self.engine: RolloutEngine | None = None
        self.worker: WorkerProcess | None = None  # the trainer (a local process, or a Modal call)
        self.worker_log: Path | None = None
        self.evals: list[asyncio.Task[None]] = []
        self.eval_engine_args: dict[str, Any] = {}
        self._stepped = asyncio.Event()  # set (and replaced) whenever the trainer's step advances

    # -- the trainer's progress, read from the store -------------------------------------------
    def served_model(self, version: int) -> str:
        """The model name that serves policy ``version``: its LoRA adapter ``step-N``, or with full
        fine-tuning the base model's own name (the server replaced its weights in place)."""
        return f"step-{version}" if version and self.cfg.trainer.get("lora", True) else self.base_model

    def poll(self) -> list[dict[str, Any]]:
        recs = self.store.train_records(self.run_id, after_id=self.seen_id)
        for rec in recs:
            self.seen_id = rec["id"]
            if rec["kind"] == "event" and rec["message"].startswith(RESUMED_FROM):
                self.step = self.step0 = rec["step"]
                self.groups_ahead = int(rec["metrics"].get("groups_ahead", 0))
                self.awaiting_trainer = False
                if self.engine is not None and self.step:
                    self.engine.model = self.served_model(self.step)
                self._wake()
            elif rec["kind"] == "event" and rec["message"].startswith("trainer failed"):
                raise WorkbenchError(rec["message"])
            elif rec["kind"] == "step" and rec["step"] > self.step and not self.awaiting_trainer:
                # (while awaiting the restarted trainer, a step is a lost attempt's, shown and not acted on)
                self.step = rec["step"]
                if self.engine is not None:
                    self.engine.model = self.served_model(self.step)  # new groups sample from it
                self._wake()
            if self.on_record:
                self.on_record(rec)
        self._check_worker()
        return recs

    def _wake(self) -> None:
        self._stepped.set()  # the groups waiting at the gate look again
        self._stepped = asyncio.Event()

    def _check_worker(self) -> None:
        if self.worker is None:
            return
        code = self.worker.poll()
        if code not in (None, 0):
            tail = failure_lines(self.worker_log.read_text(errors="replace")) if self.worker_log else []
            last = next((ln for ln in reversed(tail) if ln.startswith("workbench train: ")), None)
            if last:
                raise ConfigError(last.removeprefix("workbench train: "))
            raise WorkbenchError(f"the trainer process exited with code {code}; the end of its log "
                                 f"({self.worker_log}):\n" + "\n".join(tail))

    async def gate(self, group_index: int) -> None:
        """Group ``g`` starts once the trainer is at most ``async_level`` steps behind its batch (counted after the
        ``groups_ahead`` a resumed trainer takes first; nothing starts while awaiting a resumed trainer's word)."""
        while self.awaiting_trainer or self.step < (
                self.step0 + (group_index - self.group0 + self.groups_ahead) // self.cfg.loop.groups_per_step
                - self.cfg.loop.async_level):
            await self._stepped.wait()

    # -- the loop --------------------------------------------------------------------------------
    async def run(self, engine: RolloutEngine, train_tasks: list[Task], eval_tasks: list[Task]) -> None:
        self.engine = engine
        loop = self.cfg.loop
        # SFT on stored rollouts (``--data``) samples nothing: the engine runs the held-out evals only.
        producer = None if self.cfg.data else asyncio.create_task(
            engine.run_groups(task_stream(train_tasks, loop.seed, self.group0)))
        evaluated = {e["step"] for e in self.store.train_records(self.run_id, "eval")}  # a resumed run has some
        last = self.step - 1
        try:
            while True:
                self.poll()
                # every policy since the last poll: a fast trainer can publish several between two polls
                # (the trainer keeps an eval step's adapter loaded until its eval is recorded)
                newest = last if self.awaiting_trainer else self.step  # no policy is known before a resume's word
                for step in range(max(last + 1, self.step0), newest + 1):
                    if eval_tasks and step not in evaluated and loop.eval_due(step, self.step0):
                        evaluated.add(step)
                        self.evals.append(asyncio.create_task(self.evaluate(eval_tasks, step)))
                last = self.step
                if self.step >= loop.max_steps:
                    break
                if self.should_stop is not None and (reason := self.should_stop()):
                    self.stopped = reason
                    break
                if producer is not None and producer.done():
                    producer.result()  # a fatal endpoint error: raise it
                    raise WorkbenchError("the rollout producer stopped")
                await asyncio.sleep(POLL_S)
        except BaseException:
            for t in self.evals:
                t.cancel()
            await asyncio.gather(*self.evals, return_exceptions=True)
            raise
        finally:
            if producer is not None:
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
        await asyncio.gather(*self.evals)

    async def evaluate(self, tasks: list[Task], version: int) -> None:
        """Held-out tasks under policy ``version``, as their own eval run; the mean reward is
        recorded on the training run."""
        assert self.engine is not None
        eval_id = f"{self.run_id}-eval{version}"
        model = self.served_model(version)
        self.store.create_run(eval_id, kind="eval", env_name=self.env.name, env_version=self.env.version,
                              env_source=self.env.source, env_args=self.cfg.env_args, model=model,
                              base_url=self.engine.base_url, harness=self.env.harness.describe(),
                              n_tasks=len(tasks), rollouts_per_task=self.cfg.loop.eval_rollouts,
                              concurrency=self.engine.concurrency,
                              sampling=asdict(self.env.sampling),
                              config={"train_run": self.run_id, "policy_version": version})
        ev = RolloutEngine(env=self.env, client=self.engine.client, writer=self.engine.writer, run_id=eval_id,
                           model=model, base_url=self.engine.base_url, rollouts_per_task=self.cfg.loop.eval_rollouts,
                           concurrency=self.engine.concurrency, timeout_s=self.engine.timeout_s,
                           extra_params=self.engine.extra_params, sandboxes=self.engine.sandboxes,
                           continuation=self.engine.continuation)
        t0 = time.perf_counter()
        c = await ev.run(tasks)
        mean = c.reward_sum / c.scored if c.scored else 0.0
        stderr = stderr_of_sums(c.scored, c.reward_sum, c.reward_sq) or 0.0
        self.store.update_run(eval_id, status="completed", finished_at=time.time(),
                              summary={"rollouts": c.finished, "errors": c.errors, "reward_mean": mean})
        self.store.record_train(self.run_id, version, "eval", {
            "reward_mean": mean, "reward_stderr": stderr, "rollouts": float(c.finished), "errors": float(c.errors),
            "eval_s": time.perf_counter() - t0}, eval_id)


def summarize(store: Store, run_id: str, wall_s: float | None = None,
              trainer: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``--json`` summary of a training run, from its records; with the run's ``[trainer]`` table,
    also the trainer's shape: ``world_size`` (processes), ``nodes`` and ``sharding``."""
    steps = store.train_records(run_id, "step")
    evals = store.train_records(run_id, "eval")
    events = store.train_records(run_id, "event")
    rewards = [s["metrics"].get("reward_mean", 0.0) for s in steps]
    # One batch's mean is noisy: the start and the end are the means over a window of steps.
    window = max(1, min(10, len(rewards) // 10))
    start = sum(rewards[:window]) / window if rewards else None
    end = sum(rewards[-window:]) / window if rewards else None
    out: dict[str, Any] = {
        "run_id": run_id, "steps": steps[-1]["step"] if steps else 0,
        "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None,
        "reward_start": start, "reward_end": end, "reward_window": window,
        "reward_gain": (end - start) if end is not None and start is not None else None,
        "dropped": int(sum(s["metrics"].get("dropped", 0.0) for s in steps + events)),
        "skipped_steps": len(store.train_records(run_id, "skipped")),
        "eval_first": evals[0]["metrics"]["reward_mean"] if evals else None,
        "eval_last": evals[-1]["metrics"]["reward_mean"] if evals else None,
        # The held-out eval means at the first and the last eval, with their standard errors.
        "heldout_first": evals[0]["metrics"]["reward_mean"] if evals else None,
        "heldout_last": evals[-1]["metrics"]["reward_mean"] if evals else None,
        "heldout_stderr_first": evals[0]["metrics"].get("reward_stderr") if evals else None,
        "heldout_stderr_last": evals[-1]["metrics"].get("reward_stderr") if evals else None,
        "tokens_per_s": (sum(s["metrics"].get("tokens_per_s", 0.0) for s in steps) / len(steps)) if steps else None,
    }
    if trainer is not None:
        nodes, ranks = int(trainer.get("nodes", 1)), int(trainer.get("ranks", 1))
        out.update(world_size=nodes * ranks, nodes=nodes,
                   sharding=effective_sharding(str(trainer.get("sharding", "auto")), nodes * ranks))
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 2)
    return out


def _default_roles() -> TrainRoles:
    from workbench.errors import ConfigError
    from workbench.training.run_config import trainer_plugin

    trainer = trainer_plugin()
    if trainer is None:
        raise ConfigError("training needs the local trainer: pip install 'rl-workbench[local]'")
    return trainer.roles()


async def train(cfg: RunConfig | None, store: Store, *, resume: str | None = None, max_steps: int | None = None,
                threads: int | None = None, run_id: str | None = None,
                should_stop: Callable[[], str | None] | None = None,
                on_start: Callable[[str, Path], None] | None = None,
                on_record: Callable[[dict[str, Any]], None] | None = None,
                log: Callable[[str], None] | None = None, roles: TrainRoles | None = None) -> TrainOutcome:
    """Run (or ``resume``) a training run to ``loop.max_steps``; the three processes live as long as this.
    ``roles`` places the inference server and the trainer (default: the trainer plugin's roles)."""
    roles = roles or _default_roles()
    if resume:
        run = store.get_run(resume)
        if run["kind"] != "train":
            raise ConfigError(f"run {run['id']} is an {run['kind']} run, not a training run")
        run_id = run["id"]
        rdir = run_dir(run_id)
        tables = json.loads((rdir / "config.json").read_text())
        if max_steps is not None:  # the continuation may go further than the run first planned
            tables["loop"]["max_steps"] = max_steps
        cfg = validate_tables(tables)
        atomic_write(rdir / "config.json", json.dumps(cfg.raw, indent=1))
    else:
        assert cfg is not None
        run_id = run_id or new_run_id()
        rdir = run_dir(run_id)
        rdir.mkdir(parents=True, exist_ok=True)
        atomic_write(rdir / "config.json", json.dumps(cfg.raw, indent=1))
    env = discovery.load(cfg.env, cfg.env_args)
    if cfg.loop.temperature is not None:
        env.sampling.temperature = cfg.loop.temperature
    if cfg.loop.max_tokens is not None:
        env.sampling.max_tokens = cfg.loop.max_tokens
    if abs(env.sampling.temperature - float(cfg.trainer.get("temperature", 1.0))) > 1e-9:
        cfg.trainer["temperature"] = env.sampling.temperature  # trainer logprobs must match the sampler's
        atomic_write(rdir / "config.json", json.dumps(cfg.raw, indent=1))
    train_tasks, eval_tasks = split_tasks(env, cfg)
    if cfg.data and not resume:
        _choose_data(cfg, store, env, rdir, log)
    store.register_env(env.name, env.version, env.source, env.description)

    t0 = time.perf_counter()
    model_spec = str(cfg.trainer.get("model", "tiny"))
    orch = Orchestrator(cfg, store, run_id, env, on_record=on_record, should_stop=should_stop)
    if resume:  # before the trainer starts: its first record (where it resumes from) comes after this point
        orch.group0, orch.seen_id, orch.awaiting_trainer = resume_point(store.conn, run_id)
    first = getattr(roles, "trainer_first", False)
    if first:  # the trainer loads its model while the server loads its own
        (rdir / SERVER_ROOT_FILE).unlink(missing_ok=True)  # a resumed run's is the last server's
        orch.worker, orch.worker_log = roles.start_trainer(store.path, run_id, None, rdir, threads)
    if log:
        log(f"starting the inference server for {model_spec}")
    try:
        server = roles.start_inference(model_spec, rdir, max_batch=max(8, cfg.loop.concurrency), threads=threads)
    except BaseException:
        _stop_worker(orch.worker)
        raise
    root = server.root
    base_url = root + "/v1"
    orch.base_model = server.model
    status, error = "completed", ""
    try:  # from here on, whatever happens, the trainer and the server are stopped
        if resume:
            store.update_run(run_id, status="running", finished_at=None, base_url=base_url)
        else:
            store.create_run(run_id, kind="train", env_name=env.name, env_version=env.version,
                             env_source=env.source, env_args=cfg.env_args, model=orch.base_model, base_url=base_url,
                             harness=env.harness.describe(), runtime=getattr(env.runtime, "kind", ""),
                             n_tasks=len(train_tasks), rollouts_per_task=cfg.loop.rollouts_per_task,
                             concurrency=cfg.loop.concurrency, sampling=asdict(env.sampling), config=cfg.raw)
        if on_start:
            on_start(run_id, rdir)
        if first:
            write_server_root(rdir, root)
        else:
            orch.worker, orch.worker_log = roles.start_trainer(store.path, run_id, root, rdir, threads)
        await _orchestrate(orch, store, env, cfg, run_id, base_url, train_tasks, eval_tasks)
        if orch.stopped is not None:
            status, error = "resuming" if orch.stopped.startswith(HANDOVER) else "stopped", orch.stopped
    except (asyncio.CancelledError, KeyboardInterrupt):
        status = "interrupted"
        raise
    except BaseException as e:
        status, error = "failed", str(e) or type(e).__name__
        raise
    finally:
        _stop_worker(orch.worker)
        server.stop()
        summary = summarize(store, run_id, time.perf_counter() - t0, cfg.trainer)
        store.update_run(run_id, status=status, error=error, finished_at=time.time(), summary=summary)
    return TrainOutcome(run_id, status, summary)


def _stop_worker(worker: WorkerProcess | None) -> None:
    if worker is not None and worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()


def _choose_data(cfg: RunConfig, store: Store, env: Environment, rdir: Path,
                 log: Callable[[str], None] | None) -> None:
    """SFT on stored rollouts: choose them (one clear error for a missing run, a run with nothing
    usable, a conversation with no assistant turn) and hand them to the trainer in ``data.json``."""
    from workbench.training import sft_data

    schemas = getattr(env.harness, "schemas", None)

    def tools_for(env_name: str) -> list[dict[str, Any]] | None:
        return list(schemas) if env_name == env.name and schemas else None

    min_reward = cfg.algorithm.get("min_reward")
    allow = bool((cfg.raw.get("data") or {}).get("allow_other_env"))
    items, counts = sft_data.select(store.conn, cfg.data, min_reward=min_reward, tools_for=tools_for,
                                    env_name=env.name, allow_other_env=allow)
    sft_data.write(rdir, items)
    if log:
        log("SFT data: " + "; ".join(f"{run} ({c['kind']}): {c['rollouts']} rollouts, {c['rendered']} to render, "
                                     f"{c['errored']} errored left out" for run, c in counts.items()))
        mixed = {run: c["other_env"] for run, c in counts.items() if "other_env" in c}
        if mixed:
            log(f"SFT data mixes environments: {env.name} is trained on "
                + ", ".join(f"{sum(1 for i in items if i.run_id == run)} rollouts of {other!r} (run {run})"
                            for run, other in mixed.items()) + " (--allow-other-env)")


async def _orchestrate(orch: Orchestrator, store: Store, env: Environment, cfg: RunConfig, run_id: str,
                       base_url: str, train_tasks: list[Task], eval_tasks: list[Task]) -> None:
    """The orchestrator's part: rollouts into the store until the trainer reaches ``max_steps``."""
    from workbench.rollouts.continuation import continuation_for

    client = ChatClient(None, max_connections=cfg.loop.concurrency, request_timeout=cfg.loop.timeout_s + 5.0)
    writer = store.writer()
    sandboxes = None
    try:
        async with client:
            info = await preflight(client, base_url, orch.base_model)
            sandboxes = await open_sandboxes(env, train_tasks + eval_tasks, run_id, cfg.loop.concurrency,
                                             cfg.loop.rollouts_per_task)
            engine = RolloutEngine(env=env, client=client, writer=writer, run_id=run_id, model=orch.base_model,
                                   base_url=base_url, rollouts_per_task=cfg.loop.rollouts_per_task,
                                   concurrency=cfg.loop.concurrency, timeout_s=cfg.loop.timeout_s,
                                   extra_params=training_params(info), sandboxes=sandboxes, gate=orch.gate,
                                   sampling_seed=cfg.loop.seed,
                                   continuation=await continuation_for(client, base_url, orch.base_model, info))
            await orch.run(engine, train_tasks, eval_tasks)
            assert orch.worker is not None
            if orch.stopped is None:
                await asyncio.to_thread(orch.worker.wait, 600)  # it checkpoints and exits after its last step
                orch.poll()
    finally:
        try:
            if sandboxes is not None:
                await close_sandboxes(sandboxes, store, run_id)
        finally:
            writer.close()
