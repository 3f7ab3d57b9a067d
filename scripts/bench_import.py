"""Benchmark ``workbench import``: OpenAI chat JSONL conversations into a fresh SQLite store.

    python scripts/bench_import.py [--n 200000] [--dir DIR] [--repeat 3] [--json]

Writes N realistic conversations (a system prompt, a user question, an assistant answer; every fifth a
tool call and its result, most with a reward and named rewards) to a JSONL file, then imports it with
``import_file`` into a fresh store, as ``workbench import FILE --format openai-jsonl`` does: the whole
path, reading and checking each line, task grouping, the run and rollout rows, scores and the
full-text index, in one transaction. Reported: conversations/s (median of ``--repeat`` imports, each
into its own new store), beside the baseline of the same run: only reading and parsing the file's
lines (what no import can go below). The goal is at least 20,000 conversations/s.

Also reported: the CPU time each side spent per conversation (the importing process reading and
building rows; the writer process in SQLite), and the load average. The two sides run at once, so on
a machine with two free cores the rate is bound by the busier side (``cpu_bound_per_s``); on a
shared machine the wall-clock rate is lower by the CPU the other processes take.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402

from workbench.runs.import_traces import import_file  # noqa: E402
from workbench.store import Store  # noqa: E402

GOAL = 20_000.0
WORDS = ["the", "answer", "is", "so", "we", "add", "then", "carry", "one", "check", "result", "value", "number", "total", "sum", "step", "first", "next", "finally", "because", "therefore", "compute"]


def conversation(i: int, rng: random.Random) -> dict[str, Any]:
    a, b = rng.randint(0, 999), rng.randint(0, 999)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful assistant. Answer with a number."},
                                  {"role": "user", "content": f"What is {a} + {b}? Show your work briefly."}]
    if i % 5 == 0:
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function",
                     "function": {"name": "add", "arguments": orjson.dumps({"a": a, "b": b}).decode()}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": str(a + b)})
    work = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60)))
    msgs.append({"role": "assistant", "content": f"{work}. The answer is {a + b + (i % 3 == 0)}."})
    row: dict[str, Any] = {"messages": msgs, "id": f"prod-{i}", "metadata": {"user": f"u{i % 97}", "ts": 1.7e9 + i}}
    if i % 4:
        row["rewards"] = {"correct": float(i % 3 != 0), "format": 1.0}
    return row


def write_file(path: Path, n: int, seed: int = 7) -> int:
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for i in range(n):
            f.write(orjson.dumps(conversation(i, rng)) + b"\n")
    return path.stat().st_size


def parse_only(path: Path) -> float:
    """Seconds to read and parse every line (the baseline)."""
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb") as f:
        for line in f:
            n += len(orjson.loads(line)["messages"])
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=200_000, help="conversations in the file")
    p.add_argument("--dir", type=Path, default=None, help="where the file and the stores go (default: a temp dir)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        d = Path(tmp)
        src = d / "conversations.jsonl"
        size = write_file(src, a.n)
        parse_s = min(parse_only(src) for _ in range(a.repeat))
        runs, cpu_self, cpu_writer = [], [], []
        for k in range(a.repeat):
            store = Store(d / f"store-{k}.db")
            try:
                me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                res = import_file(store, src, "openai-jsonl")
                runs.append(time.perf_counter() - t0)
                me2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu_self.append(me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime)
                cpu_writer.append(kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime)
                assert res.rollouts == a.n, res.rollouts
            finally:
                store.close()
        median = statistics.median(runs)
        rate = a.n / median
        report = {"conversations": a.n, "file_mb": size / 1e6, "import_s": runs, "median_s": median,
                  "conversations_per_s": rate, "best_per_s": a.n / min(runs),
                  "parse_only_per_s": a.n / parse_s, "goal_per_s": GOAL, "meets_goal": rate >= GOAL,
                  "cpu_us_per_conversation": {"reader": statistics.median(cpu_self) / a.n * 1e6,
                                              "writer": statistics.median(cpu_writer) / a.n * 1e6},
                  "load_average": os.getloadavg()[0], "cpus": os.cpu_count()}
        report["cpu_bound_per_s"] = 1e6 / max(report["cpu_us_per_conversation"].values())
    print(f"import: {a.n:,} conversations ({size / 1e6:.1f} MB of JSONL) into a fresh SQLite store: "
          f"median {median:.2f}s of {a.repeat} = {rate:,.0f} conversations/s (best {report['best_per_s']:,.0f}/s); "
          f"goal {GOAL:,.0f}/s: {'ok' if rate >= GOAL else 'SLOW'}")
    print(f"baseline: reading and parsing the lines alone = {report['parse_only_per_s']:,.0f} conversations/s")
    cpu = report["cpu_us_per_conversation"]
    print(f"cpu per conversation: reader {cpu['reader']:.1f} us, writer process {cpu['writer']:.1f} us: with two free "
          f"cores at most {report['cpu_bound_per_s']:,.0f}/s (this machine: {report['cpus']} cpus, load average "
          f"{report['load_average']:.2f})")
    if a.json:
        sys.stdout.write(orjson.dumps(report).decode() + "\n")


if __name__ == "__main__":
    main()
