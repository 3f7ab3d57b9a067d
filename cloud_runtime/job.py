"""The remote side of a launched run: verify the bundle, train, stream everything back.

``run_remote`` is what the Modal orchestrator function calls, and what ``workbench launch
--backend local`` runs in a local process (``python -m workbench_cloud.job``): the same code, only
where it runs differs. Before any (GPU) work it checks the bundle's content hash against the one
the laptop computed and refuses a mismatch. Then it runs :func:`workbench.training.loop.train` into its own
store (on Modal: a Volume), while

* an :class:`~workbench_cloud.stream.Exporter` streams every new row (rollouts, step metrics, cost
  events, the run's status) into the event log the laptop follows, and
* a cost ledger records what the run's GPUs cost so far (``gpu_seconds`` cost events: GPUs ×
  elapsed seconds × the GPU's price per second), so the laptop's budget guard sees the spend;
* a :class:`~workbench_cloud.handoff.HandoffBridge` hands finished rollouts to the trainer and its
  records back through the hand-off logs (a directory here, a ``modal.Dict`` on Modal): the trainer
  never opens this store, wherever it runs (``workbench_cloud.roles``);

and it stops within one step when the log's stop flag is raised (``workbench stop``, a budget).
With ``resume`` it continues a run whose store was restored (a hand-over at Modal's 24 h limit:
``workbench_cloud.resume``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench_cloud.stream import EventLog, Exporter, open_log

from workbench.errors import ConfigError, WorkbenchError
from workbench.fsutil import atomic_write
from workbench.store.costs import add_cost_event_to


class CostLedger(threading.Thread):
    """Records ``gpu_seconds`` cost events every ``every_s`` while the run lives."""

    def __init__(self, db: Path, run_id: str, *, gpus: int, usd_per_gpu_s: float, gpu: str, provider: str,
                 every_s: float = 1.0) -> None:
        super().__init__(daemon=True, name="cost-ledger")
        self.db, self.run_id, self.gpus, self.price, self.gpu, self.provider = db, run_id, gpus, usd_per_gpu_s, gpu, provider
        self.every_s = every_s
        self.done = threading.Event()
        self.last = time.monotonic()

    def record(self) -> None:
        now = time.monotonic()
        dt, self.last = now - self.last, now
        quantity = dt * self.gpus
        add_cost_event_to(self.db, self.run_id, "gpu_seconds", provider=self.provider, model=self.gpu,
                          quantity=quantity, unit="gpu_seconds", usd=quantity * self.price)

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            self.record()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.record()  # the final stretch


class Pump(threading.Thread):
    def __init__(self, exporter: Exporter, every_s: float = 0.2) -> None:
        super().__init__(daemon=True, name="stream-exporter")
        self.exporter, self.every_s = exporter, every_s
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.every_s):
            try:
                self.exporter.pump()
            except Exception as e:  # a locked or busy store: say so and try again on the next tick
                print(f"stream exporter: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.exporter.pump()  # everything written up to now, the final status included


def run_remote(bundle_dir: str | Path, expected_hash: str, config: dict[str, Any], log: EventLog, *,
               run_id: str, workdir: str | Path, cost: dict[str, Any], threads: int | None = None,
               handoff: dict[str, Any] | None = None, roles: Any = None, resume: bool = False,
               should_stop: Callable[[], str | None] | None = None) -> str:
    """Verify the bundle, then train ``config`` (resolved run tables) streaming into ``log``;
    returns the run's final status. ``cost``: ``gpus``, ``usd_per_gpu_s``, ``gpu``, ``provider``.
    ``handoff`` names the hand-off logs (default: a directory in ``workdir``); ``roles`` places the
    inference server and trainer (default: local processes, ``workbench_cloud.roles.HandoffRoles``);
    ``should_stop`` is asked between steps too (the 24 h hand-over); ``resume`` continues the run
    in ``workdir``'s store from its checkpoint."""
    from workbench_cloud.handoff import HandoffBridge, open_handoff
    from workbench_cloud.roles import HandoffRoles

    from workbench.bundles.verify import bundle_env_ref, verify_bundle
    from workbench.store import Store
    from workbench.training.loop import run_dir, train
    from workbench.training.run_config import validate_tables

    verify_bundle(bundle_dir, expected_hash)  # before any GPU work: a mismatch refuses to run
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    env_ref = bundle_env_ref(bundle_dir, work / "env")
    cfg = None
    if resume:  # the run folder's config names the previous call's install of the bundle: point it here
        saved = run_dir(run_id) / "config.json"
        if not saved.exists():
            raise ConfigError(f"cannot resume run {run_id}: its config is not at {saved}")
        tables = json.loads(saved.read_text())
        tables["env"]["name"] = env_ref
        atomic_write(saved, json.dumps(validate_tables(tables).raw, indent=1))
    else:
        tables = json.loads(json.dumps(config))
        tables["env"]["name"] = env_ref
        cfg = validate_tables(tables)
    handoff = handoff or {"kind": "dir", "path": str(work / "handoff")}
    roles = roles or HandoffRoles(handoff)
    db = work / "remote.db"
    store = Store(db)
    exporter = Exporter(db, run_id, log)
    if resume:
        exporter.skip_existing()  # the previous call streamed everything up to its hand-over
    pump = Pump(exporter)
    bridge = HandoffBridge(db, run_id, *open_handoff(handoff))
    ledger = CostLedger(db, run_id, gpus=int(cost.get("gpus", 1)), usd_per_gpu_s=float(cost.get("usd_per_gpu_s", 0.0)),
                        gpu=str(cost.get("gpu", "cpu")), provider=str(cost.get("provider", "local")))

    def stop_reason() -> str | None:
        return log.stop_requested() or (should_stop() if should_stop is not None else None)

    if resume:  # the trainer's records the previous call left unread reach the store before the run resumes
        bridge.pump()
    pump.start()
    bridge.start()
    started = False
    try:
        outcome = asyncio.run(train(cfg, store, resume=run_id if resume else None, run_id=run_id, threads=threads,
                                    should_stop=stop_reason, on_start=lambda *_: ledger.start(), roles=roles))
        started = True
        bridge.finished = outcome.status == "completed"  # its bulk files go: no trainer resumes a completed run
        return outcome.status
    finally:
        bridge.stop()
        if ledger.is_alive() or started:
            ledger.stop()
        pump.stop()
        exporter.close()
        store.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workbench_cloud.job", description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--hash", required=True)
    ap.add_argument("--spec", required=True, help="JSON: run_id, config (run tables), stream (log spec), cost")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text())
    log = open_log(spec["stream"])
    try:
        status = run_remote(args.bundle, args.hash, spec["config"], log, run_id=spec["run_id"],
                            workdir=args.workdir, cost=spec["cost"], threads=args.threads)
    except WorkbenchError as e:
        print(f"workbench launch: {e}", file=sys.stderr, flush=True)
        log.append([{"kind": "run", "row": {"id": spec["run_id"], "status": "failed", "error": str(e),
                                            "finished_at": time.time(), "summary": "{}", "model": ""}}])
        return 2
    return 0 if status in ("completed", "stopped") else 1


if __name__ == "__main__":
    sys.exit(main())
