"""The trainer process of ``workbench train``: reads finished groups from the store, drops stale
ones, takes one optimizer step per ``groups_per_step`` groups, hot-loads each new adapter into the
inference server under the name ``step-N`` (policy version N) and records the step's metrics; after
the last step it writes the final weights (or adapter) in Hugging Face's layout to ``RUN_DIR/final``.

    python -m workbench_local.training.worker --db DB --run RUN_ID [--server http://127.0.0.1:PORT] --dir RUN_DIR

``workbench train`` starts it before the inference server, without ``--server``, so that both load
their models at once; the first publish then waits for the server's URL in ``RUN_DIR/server_root``.
The resolved run configuration is read from ``RUN_DIR/config.json``. The orchestrator (the
``workbench train`` process) learns about new policies from the ``train_metric`` rows this
process writes; the two share nothing else. Rank 0 reads rollouts and writes records through a
feed (``workbench_local.training.feed``): the store itself here, two event logs when the trainer runs
away from the store (``workbench_cloud.handoff``, which starts this loop with its own feed). Data
parallel (``torchrun``, or one process per GPU with RANK/WORLD_SIZE set): rank 0 alone reads,
records and publishes; it broadcasts each batch, and every rank steps on its shard of it. Exit
codes: 0 after ``loop.max_steps`` steps, 2 on a configuration error, 3 when the orchestrator went away.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench_local.training.checkpoint import CheckpointError
from workbench_local.training.distributed import broadcast_object, init_from_env
from workbench_local.training.feed import StoreFeed, TrainFeed
from workbench_local.training.losses import build_loss
from workbench_local.training.trainer import Trainer, TrainerConfig

from workbench.errors import WorkbenchError
from workbench.store import Store
from workbench.training.algorithms import group_rollouts, make_algorithm
from workbench.training.data import complete_groups, groups_trained_on, split_stale
from workbench.training.roles import RESUMED_FROM, SERVER_ROOT_FILE
from workbench.training.run_config import RunConfig, validate_tables

POLL_S = 0.01  # how often the trainer looks for new finished rollouts (one indexed query)
FINAL_DIR = "final"  # RUN_DIR/final: the run's last weights or adapter, in Hugging Face's layout


def adapter_name(step: int) -> str:
    return f"step-{step}"


def _post(server: str, path: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(server + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            r.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise WorkbenchError(f"the inference server refused {path} (HTTP {e.code}): {detail}") from None


class TrainLoop:
    def __init__(self, store: Store | None, run_id: str, server: str | None, run_dir: Path, cfg: RunConfig,
                 parent_pid: int | None = None, *, feed: TrainFeed | None = None) -> None:
        self.store, self.run_id, self.dir, self.cfg = store, run_id, run_dir, cfg
        self._server = server.rstrip("/") if server else None  # None: read from the run directory when needed
        self.parent_pid = parent_pid
        loss = dict(cfg.loss)
        self.trainer = Trainer(TrainerConfig.from_dict(cfg.trainer), loss=build_loss(loss.pop("name"), **loss))
        print(f"trainer rank {self.trainer.rank} of {self.trainer.world_size}: sharding {self.trainer.sharding}",
              flush=True)
        algo = dict(cfg.algorithm)
        self.algorithm = make_algorithm(algo.pop("name"), **algo)
        self.consumed_pk = 0
        self.pending: list[Any] = []
        self.read_pk = 0
        self.loaded: list[int] = []  # policy versions loaded into the server, oldest first
        self.pinned: set[int] = set()  # loaded for a held-out eval that is not recorded yet
        self.first_step = 0  # the policy the run starts from (a resumed run's checkpoint step)
        self.main = self.trainer.rank == 0  # reads the feed, records, publishes
        if feed is None and store is not None:
            feed = StoreFeed(store, run_id, parent_pid)
        if self.main and feed is None:
            raise ValueError("rank 0 needs the store or a feed")
        self.feed = feed
        self.data: list[Any] | None = None  # SFT on stored rollouts (``--data``): rank 0 cycles through them
        self.batches: Any = None
        if cfg.data and self.main:
            self._load_data()

    def _load_data(self) -> None:
        """The run's chosen SFT data (``data.json``, written by the orchestrator), conversations
        rendered with the trained model's chat template."""
        from workbench_local.training.render import load_tokenizer, render_items

        from workbench.training import sft_data

        items = sft_data.read(self.dir)
        tokenizer = None
        if any(i.branches is None for i in items):
            tokenizer = load_tokenizer(self.trainer.config.model, allow_download=self.trainer.config.allow_download)
        self.data = render_items(items, tokenizer)
        self.batches = sft_data.Batches(len(self.data), self.cfg.loop.groups_per_step, self.cfg.loop.seed)
        rendered = sum(1 for i in items if i.branches is None)
        self.record(0, "event", {"rollouts": float(len(items)), "rendered": float(rendered)},
                    f"SFT data: {len(items)} rollouts of {', '.join(self.cfg.data)} ({rendered} rendered with the "
                    "chat template)")

    @property
    def server(self) -> str:
        """The inference server's root URL; a trainer started before the server waits for the run
        directory's ``server_root`` (the orchestrator writes it once the run is created)."""
        if self._server is None:
            path = self.dir / SERVER_ROOT_FILE
            while not path.exists():
                if self.feed is not None and (why := self.feed.gone()) is not None:
                    print(f"workbench train: {why} before the inference server was up; stopping", file=sys.stderr,
                          flush=True)
                    raise SystemExit(3)
                time.sleep(POLL_S)
            self._server = path.read_text().strip().rstrip("/")
        return self._server

    def record(self, step: int, kind: str, metrics: dict[str, Any], message: str) -> None:
        if self.main:
            assert self.feed is not None
            self.feed.record(step, kind, metrics, message)

    @property
    def checkpoint_dir(self) -> Path:
        return self.dir / "checkpoint"

    def resume(self) -> int:
        """Continue from the run's checkpoint, if it has one: weights, optimizer, step, and the
        feed position (cursor) of the last rollout that step had consumed. A run that took steps and saved
        no checkpoint starts over, and says so: its orchestrator samples nothing until it hears where the
        trainer resumes from."""
        if not self.checkpoint_dir.exists():
            if self.main and self.feed is not None and self.feed.records("step"):
                self.record(0, "event", {"groups_ahead": float(self._groups_ahead(0))},
                            f"{RESUMED_FROM} 0: no checkpoint on disk, training starts over")
            return 0
        step = self.first_step = self.trainer.load_checkpoint(self.checkpoint_dir)
        if self.main:
            assert self.feed is not None
            for rec in self.feed.records("step"):
                if rec["step"] <= step:
                    self.consumed_pk = int(rec["metrics"].get("last_pk", self.consumed_pk))
        self.read_pk = self.consumed_pk
        if self.batches is not None:
            self.batches.position = self.consumed_pk  # for SFT data the cursor is the stream position
        if step:
            self._publish(step)  # before the orchestrator hears of it and samples from it
        self.record(step, "event", {"groups_ahead": float(self._groups_ahead(step))}, f"{RESUMED_FROM} {step}")
        return step

    def _groups_ahead(self, version: int) -> int:
        """How many groups past the checkpoint's cursor, sampled before the resume (by a lost attempt, or ahead of
        a hand-over), this trainer trains on before any its orchestrator samples now: that orchestrator, which
        samples nothing until it hears of the resume, counts its groups' batches after them."""
        if not self.main or self.data is not None:
            return 0
        assert self.feed is not None
        new, self.read_pk = self.feed.read(self.read_pk)
        self.pending += new
        loop = self.cfg.loop
        return groups_trained_on(complete_groups(self.pending, loop.rollouts_per_task), version, loop.groups_per_step,
                                 loop.max_off_policy_steps)

    def _next_groups(self) -> tuple[list[list[Any]], float]:
        """The next batch on every rank: rank 0 reads it, the others receive it."""
        return broadcast_object(self._read_groups() if self.main else None)

    def _read_groups(self) -> tuple[list[list[Any]], float]:
        """Block until ``groups_per_step`` finished groups are there; (groups, seconds waited)."""
        if self.data is not None:  # SFT data: the next batch of the stream, no waiting
            batch = [self.data[i] for i in self.batches.next()]
            self.consumed_pk = self.batches.position
            return group_rollouts(batch), 0.0
        assert self.feed is not None
        want = self.cfg.loop.groups_per_step
        size = self.cfg.loop.rollouts_per_task
        t0 = time.perf_counter()
        while True:
            new, self.read_pk = self.feed.read(self.read_pk)
            self.pending += new
            groups = complete_groups(self.pending, size)
            if len(groups) >= want:
                take = groups[:want]
                taken = {r.id for g in take for r in g}
                self.pending = [r for r in self.pending if r.id not in taken]
                self.consumed_pk = max([self.consumed_pk, *(r.pk for g in take for r in g)])
                return take, time.perf_counter() - t0
            if (why := self.feed.gone()) is not None:
                print(f"workbench train: {why}; stopping", file=sys.stderr, flush=True)
                raise SystemExit(3)
            time.sleep(POLL_S)

    def _publish(self, step: int) -> float:
        """Make the weights of ``step`` the server's newest policy: hot-load the LoRA adapter ``step-N``
        (unloading ones no rollout may use any more), or, for full fine-tuning, replace the base
        weights in place (``/update_weights``)."""
        t0 = time.perf_counter()
        lora = self.trainer.config.lora
        kind = "adapters" if lora else "weights"
        path = self.trainer.save_adapter(self.dir / kind / adapter_name(step))  # every rank takes part
        if not self.main:
            return time.perf_counter() - t0
        if not lora:
            _post(self.server, "/update_weights", {"weight_dir": str(path), "policy_version": step})
            self.loaded.append(step)
            while len(self.loaded) > 1:  # the server holds one copy; older files are only history
                shutil.rmtree(self.dir / kind / adapter_name(self.loaded.pop(0)), ignore_errors=True)
            return time.perf_counter() - t0
        _post(self.server, "/v1/load_lora_adapter",
              {"lora_name": adapter_name(step), "lora_path": str(path), "policy_version": step})
        self.loaded.append(step)
        if self.cfg.loop.eval_due(step, self.first_step):
            self.pinned.add(step)
        if self.pinned:
            assert self.feed is not None
            self.pinned -= {r["step"] for r in self.feed.records("eval")}
        keep = self.cfg.loop.max_off_policy_steps + 1  # in-flight multi-turn rollouts may still call these
        for old in [s for s in self.loaded[:-keep] if s not in self.pinned]:
            self.loaded.remove(old)
            _post(self.server, "/v1/unload_lora_adapter", {"lora_name": adapter_name(old)})
        return time.perf_counter() - t0

    def served_name(self, step: int) -> str:
        """The model name new rollouts of ``step`` ask for: the adapter, or (full fine-tuning) ''
        meaning the base model's own name, whose weights were replaced."""
        return adapter_name(step) if self.trainer.config.lora else ""

    def run(self) -> int:
        while self.trainer.step_count < self.cfg.loop.max_steps:
            groups, wait_s = self._next_groups()
            self.train_once(groups, wait_s)
        self.export_final()
        return 0

    def export_final(self) -> Path:
        """The run's last weights (full fine-tuning) or adapter in Hugging Face's layout at
        ``RUN_DIR/final`` — what ``from_pretrained``, peft, the embedded server and vLLM load. Every
        rank takes part (under FSDP each parameter is gathered in turn; ``export.py``)."""
        path = self.trainer.save_adapter(self.dir / FINAL_DIR)
        what = "adapter" if self.trainer.config.lora else "weights"
        self.record(self.trainer.step_count, "event", {}, f"final {what} of step {self.trainer.step_count} at {path}")
        return path

    def train_once(self, groups: list[list[Any]], wait_s: float = 0.0) -> str:
        """One batch: drop stale groups, step on the rest, publish the adapter, record what
        happened. Returns the record's kind: ``step``, ``skipped`` or ``event`` (all stale)."""
        loop = self.cfg.loop
        version = self.trainer.step_count
        fresh, stale, hist = split_stale(groups, version, loop.max_off_policy_steps)
        dropped = sum(len(g) for g in stale)
        common = {"wait_s": wait_s, "dropped": float(dropped), "last_pk": float(self.consumed_pk),
                  **{f"staleness_{k}": float(v) for k, v in sorted(hist.items())}}
        if not fresh:
            self.record(version, "event", common, f"dropped a whole batch of {dropped} stale rollouts")
            return "event"
        teacher_s = self._score_with_teacher(fresh)
        out = self.algorithm.process(fresh)
        t_train = time.perf_counter()
        res = self.trainer.step(out.samples)
        metrics = {**{k: float(v) for k, v in out.stats.items()}, **res.metrics, **common,
                   "train_s": time.perf_counter() - t_train}
        if teacher_s is not None:
            metrics["teacher_s"] = teacher_s
        if res.skipped:  # a NaN loss or gradient: the weights did not change, the run is marked
            self.record(version, "skipped", metrics, res.reason or "skipped")
            return "skipped"
        metrics["update_s"] = self._publish(res.step)
        self.record(res.step, "step", metrics, self.served_name(res.step))
        if loop.checkpoint_every and (res.step % loop.checkpoint_every == 0 or res.step == loop.max_steps):
            self._checkpoint(res.step)
        return "step"

    def _score_with_teacher(self, groups: list[list[Any]]) -> float | None:
        """On-policy distillation: the teacher's logprob of every sampled token (seconds it took), else None."""
        teacher_url = getattr(self.algorithm, "teacher_base_url", "")
        if self.algorithm.name != "distill" or not teacher_url:
            return None
        from workbench.training.teacher import fill_teacher_logprobs

        t0 = time.perf_counter()
        fill_teacher_logprobs(groups, teacher_url, getattr(self.algorithm, "teacher_model", ""))
        return time.perf_counter() - t0

    def _checkpoint(self, step: int) -> None:
        try:
            self.trainer.save_checkpoint(self.checkpoint_dir)
        except CheckpointError as e:  # a full disk: the previous checkpoint is intact; the run goes on
            self.record(step, "event", {}, f"checkpoint failed: {e}")
        else:
            self.record(step, "event", {}, f"checkpoint saved at step {step}")


def main(argv: list[str] | None = None, *, prog: str = "python -m workbench_local.training.worker",
         open_feed: Callable[[], TrainFeed] | None = None) -> int:
    """The worker's command line. ``open_feed`` (rank 0 calls it) replaces the store as the feed:
    then ``--db`` is not needed, and configuration errors go to the feed as a ``trainer failed`` event."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=open_feed is None)
    ap.add_argument("--run", required=True)
    ap.add_argument("--server", default=None, help="the inference server's root URL (without /v1); without it, "
                    f"read from the run directory's {SERVER_ROOT_FILE} once the orchestrator writes it")
    ap.add_argument("--dir", required=True, help="the run directory (config.json, adapters/, checkpoint/)")
    ap.add_argument("--parent-pid", type=int, default=None, help="exit when this process is gone")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    run_dir = Path(args.dir)
    rank, _ = init_from_env()  # a process group when RANK/WORLD_SIZE say so (torchrun, a cluster)
    store = Store(args.db) if rank == 0 and open_feed is None else None  # only rank 0 touches the store
    feed = None
    if rank == 0 and open_feed is not None:
        feed = open_feed()
    elif store is not None:
        feed = StoreFeed(store, args.run, args.parent_pid)
    try:
        cfg = validate_tables(json.loads((run_dir / "config.json").read_text()))
        loop = TrainLoop(store, args.run, args.server, run_dir, cfg, args.parent_pid, feed=feed)
        loop.resume()
        return loop.run()
    except WorkbenchError as e:
        print(f"workbench train: {e}", file=sys.stderr, flush=True)
        if feed is not None:
            feed.record(0, "event", {}, f"trainer failed: {e}")
        return 2
    finally:
        if store is not None:
            store.close()


if __name__ == "__main__":
    sys.exit(main())
