"""Benchmark: environments read from other formats, end to end through the CLI.

``harbor``: a Harbor dataset of N copies of tests/formats/harbor_tasks/hello (each its own task folder; one
image, built once before the timed rounds), played by the terminal agent against the scripted mock OpenAI server
(one bash tool call that solves the task, then a final answer), every task in a fresh container of its own,
its tests run and its reward read. Prints Harbor tasks per minute of `workbench eval` (the run's own
rollouts/s, and the whole command's wall time with the process start) and of `workbench validate` (each task
scored twice: the reference solution and doing nothing, one container each), and, in the same run, of
`harbor run` with Harbor's no-op agent on the same tasks (Harbor 0.26 on podman, in a Python 3.12 environment,
as the oracle tests run it: a container and the tests a task, no model), and the ratio of eval's whole command to
Harbor's. The tasks are copied as Harbor can run them offline (its default network, an `org/name` task name).
Needs the Docker engine (and, for Harbor, Python >= 3.12 and podman). Run:
python scripts/bench_formats.py harbor [--tasks 16] [-c 4] [--repeat 2] [--no-harbor] [--json]

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
    """N copies of ``hello``, each as Harbor can run it offline too (``harbor_oracle.harbor_copy``)."""
    from tests.formats.harbor_oracle import harbor_copy

    root = where / "harbor-bench"
    for i in range(n):
        harbor_copy(HELLO, root / f"hello-{i:03d}")
    return root


def harbor_baseline(root: Path, where: Path, concurrency: int, repeat: int) -> dict:
    """`harbor run` of its no-op agent on the same tasks (Harbor 0.26 on podman, as its oracle tests run it):
    a container and the tests per task, no model. Tasks per minute of the whole command, one value a round."""
    from tests.formats import harbor_oracle

    python = harbor_oracle.find_python312()
    if python is None or not shutil.which("podman"):
        return {"harbor": "not measured: Harbor needs Python >= 3.12 and podman, which this machine lacks"}
    venv = harbor_oracle.harbor_venv(python, Path.home() / ".cache" / "workbench-tests")
    podman = harbor_oracle.start_podman(where / "podman")
    try:
        harbor_oracle.load_base_image(podman, "workbench-sandbox:2", where / "base-image")
        per_min, lost = [], 0
        for i in range(repeat):
            t0 = time.perf_counter()
            trials = harbor_oracle.harbor_run(venv, podman, root, "nop", where / "jobs", f"round{i}", concurrency)
            wall = time.perf_counter() - t0
            lost += sum(t.exception is not None for t in trials)
            per_min.append(sum(t.exception is None for t in trials) / wall * 60)
        return {"harbor_nop_tasks_per_min": round(statistics.median(per_min), 1), "harbor_lost_trials": lost}
    finally:
        podman.run("system", "reset", "--force", timeout=300)


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


def bench_harbor(n: int, concurrency: int, repeat: int, with_harbor: bool = True) -> dict:
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
            theirs = harbor_baseline(root, Path(tmp) / "harbor", concurrency, repeat) if with_harbor else {}
    finally:
        mock.terminate()
        mock.wait(15)
    result = {"format": "harbor", "tasks": n, "concurrency": concurrency, "repeat": repeat,
              "eval_tasks_per_min": round(statistics.median(evals), 1),
              "eval_tasks_per_min_with_start": round(statistics.median(evals_wall), 1),
              "validate_tasks_per_min": round(statistics.median(validates), 1), **theirs}
    if "harbor_nop_tasks_per_min" in theirs:
        result["ratio_with_start"] = round(result["eval_tasks_per_min_with_start"] / theirs["harbor_nop_tasks_per_min"], 2)
    return result


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
    ap.add_argument("--no-harbor", action="store_true", help="harbor: leave out Harbor's own run of the same tasks")
    a = ap.parse_args()
    if a.format == "verifiers":
        result = bench_verifiers(a.tasks, a.concurrency, a.repeat)
    else:
        result = bench_harbor(a.tasks, a.concurrency, a.repeat, with_harbor=not a.no_harbor)
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
              f"process start), validate {result['validate_tasks_per_min']} tasks/min (two containers a task); "
              + (f"harbor run (nop agent, podman) {result['harbor_nop_tasks_per_min']} tasks/min, "
                 f"{result['harbor_lost_trials']} trials lost: eval {result['ratio_with_start']}x with its start"
                 if "ratio_with_start" in result else str(result.get("harbor", "harbor run not measured"))))

if __name__ == "__main__":
    main()
