"""Benchmark the batch hand-off of ``workbench launch --backend local`` at the size of a long-context step.

    python scripts/bench_handoff.py [--rollouts 256] [--tokens 131072] [--seed 0] [--json]

A step of ``--rollouts`` finished rollouts of ``--tokens`` tokens each (token ids, logprobs, loss
mask) crosses from the orchestrator to the trainer twice in the same run, through real directory
logs (``DirLog``) in a temporary directory:

* ``bulk`` — the hand-off as it ships: control records in the batch log, the arrays in one
  safetensors file per shipment (``workbench_cloud.bulk``), each file's size and sha256 checked when
  the trainer reads it;
* ``inline`` — the baseline: the arrays base64-encoded inside the log events (what the Modal path
  puts into its ``modal.Dict`` when the spec names no bulk directory).

Shipments are as large as the bridge makes them (``bulk.FILE_TOKENS`` tokens, at least one rollout);
each is written by the bridge's code (``handoff.append_rollouts``: packing, file, fsync, log append)
and then read by the trainer's feed (``LogFeed.read``: log, checksum, decode into the token lists the
trainer takes), and compared with what was sent (outside the timings). Building the rollouts is not
timed. The files are in the page cache when read (same machine), as on the local backend. Prints,
for each path, write/read/total seconds (and the process's CPU seconds, steadier on a busy machine),
MB/s of array payload (9 bytes a token), the bytes in the log, the largest single event, and the
bytes in files; then the floor both paths share (the trainer's ``Branch`` holds Python lists: the
list <-> array conversion alone, no I/O); ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench_cloud.bulk import FILE_TOKENS, BulkDir, pack, unpack_branches  # noqa: E402
from workbench_cloud.handoff import LogFeed, append_rollouts  # noqa: E402
from workbench_cloud.stream import DirLog  # noqa: E402

from workbench.training.algorithms import Branch, TrainRollout  # noqa: E402

PAYLOAD_BYTES_PER_TOKEN = 4 + 4 + 1  # int32 id, float32 logprob, uint8 mask


def make_shipment(rng: np.random.Generator, first: int, count: int, tokens: int) -> list[TrainRollout]:
    """``count`` rollouts of one branch of ``tokens`` tokens, as the store hands them to the bridge."""
    out = []
    for i in range(first, first + count):
        ids = rng.integers(0, 151_936, tokens, dtype=np.int32)
        lps = -rng.random(tokens, dtype=np.float32) * 8
        mask = (np.arange(tokens) >= tokens // 8).astype(np.uint8)  # a prompt, then the completion
        branch = Branch(ids.tolist(), lps.tolist(), mask.tolist(), i // 32)
        out.append(TrainRollout(f"bench.{i // 8}.{i % 8}", f"bench:{i // 8}", float(i % 2), [branch], pk=i + 1))
    return out


def same(sent: list[TrainRollout], got: list[TrainRollout]) -> bool:
    return [r.id for r in sent] == [r.id for r in got] and all(
        a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.mask == b.mask
        and a.policy_version == b.policy_version
        for rs, rg in zip(sent, got, strict=True) for a, b in zip(rs.branches, rg.branches, strict=True))


def run(rollouts: int, tokens: int, seed: int, root: Path) -> dict[str, Any]:
    per_file = max(1, min(500, FILE_TOKENS // tokens))  # the bridge's shipment size (HandoffBridge.page)
    rng = np.random.default_rng(seed)
    paths: dict[str, dict[str, Any]] = {}
    sides: dict[str, tuple[DirLog, BulkDir | None, LogFeed]] = {}
    for name in ("bulk", "inline"):
        batches, records = DirLog(root / name / "batches"), DirLog(root / name / "records")
        bulk = BulkDir(root / name / "bulk") if name == "bulk" else None
        sides[name] = (batches, bulk, LogFeed(batches, records, bulk))
        paths[name] = {"path": name, "write_s": 0.0, "read_s": 0.0, "cpu_s": 0.0, "file_bytes": 0, "files": 0,
                       "cursor": 0}
    floor = {"path": "lists", "write_s": 0.0, "read_s": 0.0, "cpu_s": 0.0}
    for first in range(0, rollouts, per_file):
        shipment = make_shipment(rng, first, min(per_file, rollouts - first), tokens)
        for name, (batches, bulk, feed) in sides.items():
            stats = paths[name]
            c0, t0 = time.process_time(), time.perf_counter()
            append_rollouts(batches, bulk, shipment)
            t1 = time.perf_counter()
            got, stats["cursor"] = feed.read(stats["cursor"])
            t2 = time.perf_counter()
            stats["write_s"] += t1 - t0
            stats["read_s"] += t2 - t1
            stats["cpu_s"] += time.process_time() - c0
            if not same(shipment, got):
                raise SystemExit(f"bench_handoff: the {name} path changed the rollouts {first}..{first + len(got)}")
            del got
        # The floor both paths share: the trainer's Branch holds Python lists, so every token is
        # converted list -> array on the way out and array -> list on the way in.
        c0, t0 = time.process_time(), time.perf_counter()
        arrays, places = pack(shipment)
        t1 = time.perf_counter()
        for spots in places:
            unpack_branches(arrays, spots)
        floor["write_s"] += t1 - t0
        floor["read_s"] += time.perf_counter() - t1
        floor["cpu_s"] += time.process_time() - c0
    payload = rollouts * tokens * PAYLOAD_BYTES_PER_TOKEN
    for name, (batches, bulk, _feed) in sides.items():
        stats = paths.pop(name)
        stats.pop("cursor")
        lines = batches.file.read_bytes().splitlines()
        if bulk is not None:
            stats["files"], stats["file_bytes"] = len(bulk.files()), bulk.size_bytes()
            bulk.release()  # what the bridge does once the trainer has checkpointed past them
            stats["files_left"] = len(bulk.files())
        stats.update(log_bytes=sum(len(line) + 1 for line in lines), largest_event_bytes=max(map(len, lines)),
                     events=len(lines))
        total = stats["write_s"] + stats["read_s"]
        stats.update(total_s=round(total, 3), write_s=round(stats["write_s"], 3), read_s=round(stats["read_s"], 3),
                     cpu_s=round(stats["cpu_s"], 3), mb_per_s=round(payload / total / 1e6, 1))
        paths[name] = stats
    total = floor["write_s"] + floor["read_s"]
    floor.update(total_s=round(total, 3), write_s=round(floor["write_s"], 3), read_s=round(floor["read_s"], 3),
                 cpu_s=round(floor["cpu_s"], 3), mb_per_s=round(payload / total / 1e6, 1))
    return {"rollouts": rollouts, "tokens_per_rollout": tokens, "tokens": rollouts * tokens,
            "payload_bytes": payload, "rollouts_per_file": per_file, "runs": [paths["bulk"], paths["inline"]],
            "lists_floor": floor,
            "speedup": round(paths["inline"]["total_s"] / paths["bulk"]["total_s"], 2),
            "log_bytes_ratio": round(paths["inline"]["log_bytes"] / paths["bulk"]["log_bytes"], 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=131_072, help="tokens per rollout")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="only the JSON line")
    args = ap.parse_args(argv)
    if args.rollouts < 1 or args.tokens < 1:
        ap.error("--rollouts and --tokens must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-handoff-") as tmp:
        out = run(args.rollouts, args.tokens, args.seed, Path(tmp))
    if not args.json:
        mb = out["payload_bytes"] / 1e6
        print(f"hand-off of {out['rollouts']} rollouts x {out['tokens_per_rollout']} tokens = {out['tokens']:,} "
              f"tokens ({mb:,.0f} MB of arrays), {out['rollouts_per_file']} rollouts a shipment")
        for r in [*out["runs"], out["lists_floor"]]:
            files = f", {r['file_bytes'] / 1e6:,.1f} MB in {r['files']} files" if r["path"] == "bulk" else ""
            log = (f"  log {r['log_bytes'] / 1e6:9.3f} MB ({r['events']} events, largest "
                   f"{r['largest_event_bytes']:,} B){files}" if "log_bytes" in r else
                   "  (list <-> array conversion alone, no I/O: the floor of both)")
            print(f"  {r['path']:<6}  write {r['write_s']:7.2f} s  read+verify {r['read_s']:7.2f} s  "
                  f"total {r['total_s']:7.2f} s (cpu {r['cpu_s']:6.2f} s)  {r['mb_per_s']:7.1f} MB/s{log}")
        print(f"  bulk is {out['speedup']}x faster and puts {out['log_bytes_ratio']}x fewer bytes in the log")
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
