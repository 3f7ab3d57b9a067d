"""The learning curve of a ``workbench train`` run: reward against wall time, as data and as a plot.

    python scripts/learning_curve.py [--db STORE] [RUN] [--data curve.csv|curve.json] [--png curve.png]
                                     [--no-png]

RUN is a training run id (or a unique prefix); without it, the newest training run of the store.
One row per policy version, from the run's ``train_metric`` records:

* ``step``: the policy version (0 is the base model);
* ``wall_s``: seconds from the run's creation (the inference server is already up then) to the
  trainer's record of that step; 0 for step 0;
* ``reward_mean`` / ``reward_std``: the training batch the step was taken on (empty for step 0);
* ``eval_reward_mean``: the held-out eval of that policy, where one ran (``--loop.eval_tasks``);
  ``eval_done_s`` is when that eval finished.

The data is written as CSV or JSON (by the extension of ``--data``; default
``learning_curve_RUN.csv``), the plot as PNG (default ``learning_curve_RUN.png``): the batch reward
and the held-out reward as two series against wall time, each eval drawn at the time its policy
was published. The plot needs matplotlib (``pip install matplotlib``); ``--no-png`` writes the
data alone.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workbench.store import Store  # noqa: E402

COLUMNS = ("step", "wall_s", "reward_mean", "reward_std", "eval_reward_mean", "eval_done_s")


def newest_train_run(store: Store) -> str:
    row = store.conn.execute("SELECT id FROM run WHERE kind='train' ORDER BY created_at DESC LIMIT 1").fetchone()
    if row is None:
        raise SystemExit(f"no training run in {store.path}; `workbench train ENV --db {store.path}` makes one")
    return str(row[0])


def _round(v: float | None) -> float | None:
    return None if v is None else round(float(v), 6)


def curve_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """One row per policy version (see the module docstring); a step recorded twice (a resumed
    run redoing steps after its checkpoint) keeps its last record."""
    run = store.get_run(run_id)
    t0 = float(run["created_at"])
    rows: dict[int, dict[str, Any]] = {}

    def row(step: int) -> dict[str, Any]:
        return rows.setdefault(step, {c: None for c in COLUMNS} | {"step": step, "wall_s": 0.0 if step == 0 else None})

    for rec in store.train_records(run["id"]):
        m = rec["metrics"]
        if rec["kind"] == "step":
            r = row(rec["step"])
            r["wall_s"] = round(rec["created_at"] - t0, 3)
            r["reward_mean"] = _round(m.get("reward_mean"))
            r["reward_std"] = _round(m.get("reward_std"))
        elif rec["kind"] == "eval":
            r = row(rec["step"])
            r["eval_reward_mean"] = _round(m.get("reward_mean"))
            r["eval_done_s"] = round(rec["created_at"] - t0, 3)
    # Every version the orchestrator evaluated has a step record; the filter is a guard only.
    return [rows[s] for s in sorted(rows) if rows[s]["wall_s"] is not None]


def write_data(rows: list[dict[str, Any]], path: Path, run_id: str) -> None:
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps({"run_id": run_id, "columns": list(COLUMNS), "rows": rows}, indent=1) + "\n")
        return
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r[k] is None else r[k] for k in COLUMNS})


def write_png(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("the plot needs matplotlib: `pip install matplotlib` (or pass --no-png)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["wall_s"], r["reward_mean"]) for r in rows if r["reward_mean"] is not None]
    evals = [(r["wall_s"], r["eval_reward_mean"]) for r in rows if r["eval_reward_mean"] is not None]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if train:
        ax.plot(*zip(*train, strict=True), marker="o", markersize=3, linewidth=1.2, label="train batch reward")
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="s", markersize=5, linewidth=1.6, label="held-out eval reward")
    ax.set_xlabel("wall time since the run started (s)")
    ax.set_ylabel("mean reward")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", nargs="?", default=None, help="training run id or prefix (default: the newest)")
    ap.add_argument("--db", default=os.environ.get("WORKBENCH_DB"), help="store file (default: WORKBENCH_DB "
                    "or the default store)")
    ap.add_argument("--data", default=None, help="data file, .csv or .json (default learning_curve_RUN.csv)")
    ap.add_argument("--png", default=None, help="plot file (default learning_curve_RUN.png)")
    ap.add_argument("--no-png", action="store_true", help="write the data only")
    args = ap.parse_args(argv)

    if args.db is None:
        from workbench.config.paths import default_db

        args.db = str(default_db())
    with Store(args.db) as store:
        run_id = args.run or newest_train_run(store)
        run = store.get_run(run_id)
        if run["kind"] != "train":
            raise SystemExit(f"run {run['id']} is an {run['kind']} run, not a training run")
        rows = curve_rows(store, run["id"])
    run_id = run["id"]
    if not rows:
        raise SystemExit(f"run {run_id} has no training records yet")
    data = Path(args.data or f"learning_curve_{run_id}.csv")
    write_data(rows, data, run_id)
    print(f"{'step':>5} {'wall s':>8} {'reward':>7} {'± std':>6} {'held-out':>9}")
    for r in rows:
        fmt = lambda v, w: f"{v:>{w}.3f}" if v is not None else " " * (w - 1) + "-"  # noqa: E731
        print(f"{r['step']:>5} {r['wall_s']:>8.1f} {fmt(r['reward_mean'], 7)} {fmt(r['reward_std'], 6)} "
              f"{fmt(r['eval_reward_mean'], 9)}")
    print(f"data: {data}")
    if not args.no_png:
        png = Path(args.png or f"learning_curve_{run_id}.png")
        title = f"{run_id}: {run['env_name']}, {run['model'].rsplit('/', 1)[-1]}, {run['status']}"
        write_png(rows, png, title)
        print(f"plot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
