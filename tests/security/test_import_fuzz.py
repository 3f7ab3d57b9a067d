"""A fuzz of ``workbench import``: random JSON shapes, mutated conversations and random bytes through
every ``--format``. Each case ends in success or in one clear line (a ``WorkbenchError``, as the CLI
prints it); never a traceback, never a hang, memory bounded; and the store holds exactly what the
successful cases reported (nothing half-stored, no non-finite value, ``PRAGMA integrity_check`` ok).

The cases are seeded, and counted: a failure names the seed and the case that broke.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import assert_user_error, write_file

# slow: a hundred seeded cases through every --format (inspect_ai loaded), then the CLI on random input
pytestmark = pytest.mark.slow

SEED = 20261204
CASES = {"openai-jsonl": 60, "verifiers": 30, "inspect": 12}
MAX_RSS_MIB = 1024  # the importing process and its writer, each: far above what these small inputs need

HARNESS = r'''
import io, json, math, os, random, resource, sqlite3, sys, traceback, zipfile
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.runs.import_traces import import_file
from workbench.store import Store

seed, out_dir, store_path = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
counts = json.loads(sys.argv[4])
rng = random.Random(seed)
KEYS = ["messages", "role", "content", "tool_calls", "function", "name", "arguments", "id", "type", "text",
        "reward", "rewards", "metadata", "info", "tools", "answer", "model", "example_id", "prompt", "completion",
        "metrics", "tool_defs", "token_usage", "timing", "tool_call_id", "parameters", "error", "x"]


def dumps(obj):
    """JSON text of obj, deep nesting included (the limit is raised for the harness's own encoding only)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        return json.dumps(obj)
    finally:
        sys.setrecursionlimit(old)


def scalar():
    return rng.choice([None, True, False, 0, -1, 10 ** 30, -(10 ** 30), 1e308, -1e308, 5e-324, -0.0, 0.5, "",
                       "x", "\x1b]52;c;aGk=\x07", "[/x]", "\u0000\ud7ff", "{", "[]", "{\"a\": 1}", "9" * 50,
                       rng.random(), rng.randint(-5, 5), "".join(chr(rng.randint(0, 0x2FF)) for _ in range(5))])


def value(depth=0):
    r = rng.random()
    if depth > 4 or r < 0.45:
        return scalar()
    if r < 0.7:
        return [value(depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.75:  # nested deeper than any encoder allows
        v = scalar()
        for _ in range(rng.choice([100, 255, 300, 1100])):
            v = [v] if rng.random() < 0.5 else {"a": v}
        return v
    return {rng.choice(KEYS): value(depth + 1) for _ in range(rng.randint(0, 5))}


def conversation():
    return {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "What is 2 + 3?"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": "It is 5"}],
        "tools": [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}],
        "reward": 1.0, "rewards": {"a": 0.5, "b": 0.5}, "metadata": {"info": {"k": 1}, "answer": "5"}, "id": "q"}


def verifiers_row():
    return {"example_id": rng.randint(0, 3), "prompt": [{"role": "user", "content": "What is 2 + 3?"}],
            "completion": [{"role": "assistant", "content": "", "tool_calls": [
                json.dumps({"id": "c1", "name": "add", "arguments": "{\"a\": 2}"})]},
                {"role": "tool", "tool_call_id": "c1", "content": "5"},
                {"role": "assistant", "content": "The answer is 5"}],
            "answer": "5", "info": {}, "reward": 1.0, "metrics": {"correct": 1.0},
            "tool_defs": [{"name": "add", "parameters": {"type": "object"}}],
            "token_usage": {"input_tokens": 3, "output_tokens": 2}, "timing": {"total": 0.1}}


def mutate(obj):
    """Replace, delete or deepen a random place in obj, a few times."""
    for _ in range(rng.randint(1, 3)):
        parent, key, node = None, None, obj
        for _ in range(rng.randint(0, 5)):
            if isinstance(node, dict) and node:
                parent, key = node, rng.choice(list(node))
            elif isinstance(node, list) and node:
                parent, key = node, rng.randrange(len(node))
            else:
                break
            node = parent[key]
        if parent is None:
            return value()
        r = rng.random()
        if r < 0.2 and isinstance(parent, dict):
            del parent[key]
        else:
            parent[key] = value()
    return obj


def line():
    r = rng.random()
    if r < 0.55:
        return dumps(mutate(conversation())).encode()
    if r < 0.65:
        return json.dumps(conversation()).encode()
    if r < 0.8:
        return dumps(value()).encode()
    if r < 0.9:
        return json.dumps(conversation()).encode()[: rng.randint(0, 200)]
    return bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300)))


def jsonl_file(path, make):
    path.write_bytes(b"\n".join(make() for _ in range(rng.randint(0, 8))) + rng.choice([b"", b"\n"]))


def case(fmt, i):
    base = out_dir / f"{fmt}-{i}"
    if fmt == "openai-jsonl":
        path = base.with_suffix(".jsonl")
        if rng.random() < 0.1:
            path.write_bytes(bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 2000))))
        else:
            jsonl_file(path, line)
        return path
    if fmt == "verifiers":
        base.mkdir()
        meta = rng.choice([{"env_id": "e", "model": "m"}, value(), {"env_id": value(), "model": value()}])
        (base / "metadata.json").write_bytes(dumps(meta).encode() if rng.random() < 0.9 else b"\xff{")
        rows = lambda: dumps(mutate(verifiers_row()) if rng.random() < 0.7 else verifiers_row()).encode() \
            if rng.random() < 0.85 else line()
        jsonl_file(base / "results.jsonl", rows)
        return base
    path = base.with_suffix(".eval")
    r = rng.random()
    if r < 0.3:
        path.write_bytes(bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 2000))))
    elif r < 0.5:
        path = base.with_suffix(".json")
        path.write_bytes(dumps(value()).encode())
    else:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name in rng.sample(["header.json", "_journal/start.json", "samples/1_epoch_1.json",
                                    "summaries.json", "reductions.json"], rng.randint(1, 4)):
                z.writestr(name, dumps(value()) if rng.random() < 0.8 else bytes(rng.randint(0, 255)
                                                                                      for _ in range(50)))
        path.write_bytes(buf.getvalue())
    return path


def snapshot():
    conn = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        n = conn.execute("SELECT COUNT(*) FROM rollout").fetchone()[0]
        bad = conn.execute("SELECT COUNT(*) FROM score WHERE value IS NULL OR abs(value) > 1.7976931348623157e308"
                           ).fetchone()[0]
        rewards = [r for (r,) in conn.execute("SELECT reward FROM rollout WHERE reward IS NOT NULL")]
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        return n, bad, all(math.isfinite(r) for r in rewards), ok
    finally:
        conn.close()


Store(store_path).close()
done = {"ok": 0, "refused": 0}
for fmt, n in counts.items():
    for i in range(n):
        path = case(fmt, i)
        before = snapshot()[0]
        where = f"seed {seed} {fmt} case {i} ({path})"
        try:
            with Store(store_path) as store:
                res = import_file(store, path, fmt)
        except WorkbenchError as e:
            msg = str(e)
            if "\n" in msg or not msg.strip():
                print(f"{where}: not one line: {msg!r}")
                sys.exit(1)
            after = snapshot()
            if after[0] != before:
                print(f"{where}: refused ({msg}) but the store changed: {before} -> {after[0]}")
                sys.exit(1)
            done["refused"] += 1
        except BaseException:
            print(f"{where}: a traceback")
            traceback.print_exc(file=sys.stdout)
            sys.exit(1)
        else:
            after = snapshot()
            if after[0] != before + res.rollouts or res.mean_reward is not None and not math.isfinite(res.mean_reward):
                print(f"{where}: imported {res.rollouts} but the store went {before} -> {after[0]} "
                      f"(mean {res.mean_reward})")
                sys.exit(1)
            done["ok"] += 1
n, bad, finite, ok = snapshot()
if bad or not finite or ok != "ok":
    print(f"seed {seed}: the store holds non-finite values or fails its check: {bad} {finite} {ok}")
    sys.exit(1)
# VmHWM is this process's own peak (ru_maxrss would carry the forking pytest's peak across the exec)
self_mib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:")) // 1024
child_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
print(json.dumps({**done, "rollouts": n, "self_mib": self_mib, "child_mib": child_mib}))
'''


def test_every_format_survives_random_input(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    script = write_file(tmp_path / "fuzz.py", HARNESS)
    cases = tmp_path / "cases"
    cases.mkdir()
    # a hang fails the test here instead of stalling the suite
    proc = subprocess.run([sys.executable, script, str(SEED), cases, tmp_path / "fuzz.db", json.dumps(CASES)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"] + out["refused"] == sum(CASES.values())
    assert out["ok"] > 0 and out["refused"] > 0 and out["rollouts"] > 0  # both outcomes were exercised
    assert out["self_mib"] < MAX_RSS_MIB and out["child_mib"] < MAX_RSS_MIB, out


CLI_CASES = [  # (what the file holds, --format, fragment of the one line)
    (b"\x00\xff\xfe garbage", "openai-jsonl", "nothing in"),
    (b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": {"a": 1}}]}\n',
     "openai-jsonl", "not a list"),
    (b"[[[[[[[[[[" * 200, "openai-jsonl", "nothing in"),
    (b"PK\x03\x04" + b"\x01" * 100, "inspect", "not a readable inspect ai log"),
    (b'{"version": 2, "status": "success"}', "inspect", "not a readable inspect ai log"),
]


@pytest.mark.parametrize(("data", "fmt", "fragment"), CLI_CASES, ids=[f"{f}-{i}" for i, (_, f, _) in
                                                                      enumerate(CLI_CASES)])
def test_random_input_through_the_cli_is_one_clear_line(cli: Callable[..., Any], tmp_path: Path, store_path: Path,
                                                        data: bytes, fmt: str, fragment: str) -> None:
    path = tmp_path / ("in.eval" if fmt == "inspect" else "in.jsonl")
    path.write_bytes(data)
    assert_user_error(cli("import", path, "--format", fmt, timeout=120), fragment)
    assert not store_path.exists() or _count(store_path) == 0


def _count(db: Path) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM rollout").fetchone()[0])
    finally:
        conn.close()
