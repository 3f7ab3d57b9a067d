"""Benchmark: `workbench hub push` and `hub pull` wall time for each bundled environment against a real
package index on 127.0.0.1 (pypiserver with authentication), and pull-then-eval of `arithmetic` on a fresh
home directory (goal: the pull under 10 s, plus the eval).

Each command is a fresh `workbench` process, timed end to end (its start-up included), as a user runs it.
A bundled name is taken on every machine, so each pull installs it under another name (`--as NAME_hub`).

    python scripts/bench_hub.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_eval import start_mock  # noqa: E402

from tests.package_index import PASSWORD, USER, start_index  # noqa: E402

ENVS = sorted(p.name for p in (ROOT / "envs").iterdir() if (p / "__init__.py").is_file())


def home(root: Path, url: str) -> dict[str, str]:
    (root / "config" / "workbench").mkdir(parents=True, exist_ok=True)
    (root / "config" / "workbench" / "tui.toml").write_text(
        f'[hub]\ndefault = "bench"\n[hub.indexes.bench]\nurl = "{url}"\n')
    return {**{k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")}, "PYTHONPATH": str(ROOT),
            "XDG_CONFIG_HOME": str(root / "config"), "XDG_DATA_HOME": str(root / "data"),
            "XDG_CACHE_HOME": str(root / "cache"), "WORKBENCH_DB": str(root / "store.db"),
            "WORKBENCH_INDEX_USERNAME": USER, "WORKBENCH_INDEX_PASSWORD": PASSWORD,
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}


def timed(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "workbench.cli", *args, "--json"], capture_output=True, text=True,
                         env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed: {out.stderr[-1500:]}")
    return wall, orjson.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    mock, mock_url = start_mock("arithmetic", "--accuracy", "1.0")
    with tempfile.TemporaryDirectory() as tmp:
        index = start_index(Path(tmp) / "index", private=True)
        try:
            publisher = home(Path(tmp) / "publisher", index.simple)
            rows: dict[str, dict[str, float]] = {}
            for env in ENVS:
                pushes, pulls = [], []
                for i in range(a.repeat):
                    wall, _ = timed(["hub", "push", env], publisher)
                    pushes.append(wall)
                    fresh = home(Path(tmp) / f"pull-{env}-{i}", index.simple)
                    wall, _ = timed(["hub", "pull", env, "--as", f"{env}_hub"], fresh)
                    pulls.append(wall)
                rows[env] = {"push_s": statistics.median(pushes), "pull_s": statistics.median(pulls)}
            fresh = home(Path(tmp) / "fresh", index.simple)
            t_pull, _ = timed(["hub", "pull", "arithmetic", "--as", "arithmetic_hub"], fresh)
            t_eval, ev = timed(["eval", "arithmetic_hub", "--base-url", mock_url, "-m", "mock-model", "-n", "200"], fresh)
        finally:
            index.stop()
            mock.terminate()
            mock.wait()
    print(f"hub push / pull against pypiserver on 127.0.0.1 (median of {a.repeat}; each a fresh process)")
    for env, r in rows.items():
        print(f"  {env:<14} push {r['push_s']:5.2f} s   pull {r['pull_s']:5.2f} s")
    print(f"  pull-then-eval of arithmetic on a fresh home: pull {t_pull:.2f} s (goal under 10 s: "
          f"{'MET' if t_pull < 10 else 'NOT MET'}), then eval of 200 tasks {t_eval:.2f} s "
          f"(mean reward {ev['mean_reward']:.2f})")
    if a.json:
        print(orjson.dumps({"envs": rows, "pull_then_eval": {"pull_s": t_pull, "eval_s": t_eval}}).decode())


if __name__ == "__main__":
    main()
