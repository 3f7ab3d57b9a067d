"""scripts/bench_long_context.py at a small size: each step in its own process, chunked and unchunked,
the same loss, and a last line of JSON with every run; bad arguments end in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs the script as a process; the first builds models and trains

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_long_context.py"


@pytest.mark.timeout(600)
def test_a_small_run_ends_with_one_json_line_of_both_steps() -> None:
    p = subprocess.run([sys.executable, str(SCRIPT), "--tokens", "512", "--vocab", "4096", "--chunk", "128", "--json"],
                       capture_output=True, text=True, timeout=580)
    assert p.returncode == 0, p.stderr[-3000:]
    last = json.loads(p.stdout.strip().splitlines()[-1])
    runs = {r["chunked"]: r for r in last["runs"]}
    assert set(runs) == {True, False} and last["skipped"] == []
    assert all(r["tokens"] == 512 and r["peak_bytes"] > 0 and r["rss_peak_bytes"] > r["baseline_bytes"]
               for r in runs.values())
    assert runs[True]["loss"] == pytest.approx(runs[False]["loss"], abs=1e-5)
    assert "unchunked / chunked step peak" in p.stdout


@pytest.mark.parametrize("args", [["--tokens", "64"], ["--tokens", ""], ["--vocab", "10"], ["--chunk", "0"]])
def test_bad_arguments_end_in_one_line(args: list[str]) -> None:
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "--tokens must be" in p.stderr
