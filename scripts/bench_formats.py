"""Benchmark: environments read from other formats, end to end through the CLI.

``harbor``: a Harbor dataset of N copies of tests/formats/harbor_tasks/hello (each its own task folder; one
image, built once before the timed rounds), played by the terminal agent against the scripted mock OpenAI server
(one bash tool call that solves the task, then a final answer), every task in a fresh container of its own,
its tests run and its reward read. Prints Harbor tasks per minute of `workbench eval` (the run's own
rollouts/s, and the whole command's wall time with the process start) and of `workbench validate` (each task
scored twice: the reference solution and doing nothing, one container each). Needs the Docker engine. Run:
python scripts/bench_formats.py harbor [--tasks 16] [-c 4] [--repeat 2] [--json]

``verifiers``: a verifiers 0.4 (v1) single-turn taskset (tests/frameworks/v1_envs/v1_single, N tasks), evaluated
by `workbench eval` (the env in verifiers' own isolated environment, reached through Workbench's bridge) and by
verifiers' own eval CLI in that same environment, against the same instant mock server, in the same rounds.
Prints rollouts per second of each (the whole command, process start included, for both; and Workbench's run
rate) and their ratio. Run:
python scripts/bench_formats.py verifiers [--tasks 200] [-c 32] [--repeat 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_eval import start_mock  # noqa: E402

HELLO = ROOT / "tests" / "formats" / "harbor_tasks" / "hello"
SCRIPT = [{"tool_calls": [{"id": "c1", "type": "function", "function": {
    "name": "bash", "arguments": json.dumps({"command": "echo hello > /app/greeting.txt"})}}]}, "Done."]


def dataset(where: Path, n: int) -> Path:
    root = where / "harbor-bench"
    for i in range(n):
        shutil.copytree(HELLO, root / f"hello-{i:03d}")
    return root


def workbench(args: list[str], home: Path) -> tuple[dict, float]:
    from workbench.frameworks.venvs import frameworks_dir

    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "OPENAI_"))}
    # a fresh home per round, but the frameworks' environments built once, as verifiers' own is
    env.update(XDG_DATA_HOME=str(home / "data"), XDG_CONFIG_HOME=str(home / "config"),
               XDG_CACHE_HOME=str(home / "cache"), WORKBENCH_DB=str(home / "wb.db"), NO_COLOR="1",
               WORKBENCH_FRAMEWORKS_DIR=str(frameworks_dir()))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True, env=env,
                         cwd=home)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args[:2])} failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def bench_harbor(n: int, concurrency: int, repeat: int) -> dict:
    mock, base_url = start_mock("script", "--by-turn", "--script", json.dumps(SCRIPT))
    try:
        with tempfile.TemporaryDirectory(prefix="wb-bench-harbor-") as tmp:
            root = dataset(Path(tmp), n)
            workbench(["validate", str(root), "--no-probe", "--sample", "1", "--json"], Path(tmp))  # builds the image
            evals, evals_wall, validates = [], [], []
            for i in range(repeat):
                home = Path(tmp) / f"round{i}"
                home.mkdir()
                out, wall = workbench(["eval", str(root), "-n", str(n), "-c", str(concurrency), "--base-url", base_url,
                                       "-m", "mock-model", "--json"], home)
                if out["errors"] or out["rollouts"] != n or out["mean_reward"] != 1.0:
                    raise SystemExit(f"eval round {i}: {out['errors']} errors, {out['rollouts']} rollouts, "
                                     f"mean reward {out['mean_reward']}")
                evals.append(out["rollouts_per_s"] * 60)
                evals_wall.append(n / wall * 60)
                res, wall = workbench(["validate", str(root), "--no-probe", "--sample", str(n), "--json"], home)
                if res["gold"].get("total") != 1.0 or res["empty"].get("total") != 0.0:
                    raise SystemExit(f"validate round {i}: gold {res['gold']}, empty {res['empty']}")
                validates.append(n / wall * 60)
    finally:
        mock.terminate()
        mock.wait(15)
    return {"format": "harbor", "tasks": n, "concurrency": concurrency, "repeat": repeat,
            "eval_tasks_per_min": round(statistics.median(evals), 1),
            "eval_tasks_per_min_with_start": round(statistics.median(evals_wall), 1),
            "validate_tasks_per_min": round(statistics.median(validates), 1)}


V1_ENVS = ROOT / "tests" / "frameworks" / "v1_envs"
VF_EVAL = "from verifiers.v1.cli.eval.main import main; main()"


def verifiers_eval(python: Path, base_url: str, n: int, concurrency: int, out: Path) -> float:
    """verifiers' own eval CLI over v1_single: the whole command's wall time."""
    argv = [str(python), "-c", VF_EVAL, "v1_single", "-m", "mock-model", "-n", str(n), "-r", "1", "-c",
            str(concurrency), "--no-push", "--no-rich", "-o", str(out), "--client.base-url", base_url,
            "--client.api-key-var", "BENCH_KEY", "--env.taskset.num-tasks", str(n),
            "--env.agent.runtime.type", "subprocess"]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PYTHONPATH=str(V1_ENVS), BENCH_KEY="bench")
    t0 = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=out.parent)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"verifiers' eval failed ({p.returncode}): {p.stderr[-2000:]}")
    (traces,) = out.glob("*/traces.jsonl")
    if len(traces.read_text().splitlines()) != n:
        raise SystemExit(f"verifiers' eval wrote {len(traces.read_text().splitlines())} episodes, not {n}")
    return wall


def bench_verifiers(n: int, concurrency: int, repeat: int) -> dict:
    from workbench.frameworks.verifiers_v1 import FRAMEWORK

    python = FRAMEWORK.ensure()
    mock, base_url = start_mock("instant", "--reply", "The answer is 3.")
    ours, ours_run, theirs = [], [], []
    try:
        with tempfile.TemporaryDirectory(prefix="wb-bench-vf-") as tmp:
            for i in range(repeat):
                home = Path(tmp) / f"round{i}"
                home.mkdir()
                out, wall = workbench(["eval", str(V1_ENVS / "v1_single"), "-a", json.dumps({"num_tasks": n}),
                                       "-n", str(n), "-c", str(concurrency), "--base-url", base_url,
                                       "-m", "mock-model", "--json"], home)
                if out["errors"] or out["rollouts"] != n:
                    raise SystemExit(f"workbench eval round {i}: {out['errors']} errors, {out['rollouts']} rollouts")
                ours.append(n / wall)
                ours_run.append(out["rollouts_per_s"])
                theirs.append(n / verifiers_eval(python, base_url, n, concurrency, home / "vf-out"))
    finally:
        mock.terminate()
        mock.wait(15)
    med = statistics.median
    return {"format": "verifiers v1", "tasks": n, "concurrency": concurrency, "repeat": repeat,
            "workbench_rollouts_per_s": round(med(ours), 1), "workbench_run_rollouts_per_s": round(med(ours_run), 1),
            "verifiers_rollouts_per_s": round(med(theirs), 1),
            "ratio": round(med(a / b for a, b in zip(ours, theirs, strict=True)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("format", choices=["harbor", "verifiers"])
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    bench = bench_verifiers if a.format == "verifiers" else bench_harbor
    result = bench(a.tasks, a.concurrency, a.repeat)
    if a.json:
        print(json.dumps(result))
    elif a.format == "verifiers":
        print(f"verifiers v1 single-turn, {a.tasks} rollouts at -c {a.concurrency} (median of {a.repeat}): "
              f"workbench eval {result['workbench_rollouts_per_s']} rollouts/s (run "
              f"{result['workbench_run_rollouts_per_s']}), verifiers' eval {result['verifiers_rollouts_per_s']} "
              f"rollouts/s: {result['ratio']}x (whole commands, process start included)")
    else:
        print(f"Harbor, {a.tasks} tasks at -c {a.concurrency} (median of {a.repeat}): eval "
              f"{result['eval_tasks_per_min']} tasks/min ({result['eval_tasks_per_min_with_start']} with the "
              f"process start), validate {result['validate_tasks_per_min']} tasks/min (two containers a task)")

if __name__ == "__main__":
    main()
