"""Summaries of runs, computed from the store (so a resumed run reports all of its rollouts)."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from workbench.analysis.reward_stats import stderr_of_sums
from workbench.store import Store, reports


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def pass_at_ks(rows: list[tuple[int, int]], max_k: int) -> dict[str, float]:
    """pass@1, pass@2, pass@4, ... up to ``max_k`` over tasks given as (rollouts, passing rollouts); each
    pass@k averages the tasks with at least k rollouts."""
    out: dict[str, float] = {}
    k = 1
    while rows and k <= max_k:
        vals = [pass_at_k(n, c, k) for n, c in rows if n >= k]
        if vals:
            out[f"pass@{k}"] = sum(vals) / len(vals)
        k *= 2
    return out


def run_summary(store: Store, run_id: str, pass_threshold: float = 1.0) -> dict[str, Any]:
    conn = store.conn
    run = store.get_run(run_id)
    rid = run["id"]
    agg = reports.rollout_totals(conn, rid)
    n, failed, mean, sumsq, n_scored, ptoks, ctoks, cost, mean_dur = agg
    failed = failed or 0
    # A rollout has an error when it failed or any part of it raised (a reward that raised is scored 0
    # and the rollout stays ok): ``errors`` counts every such rollout once, as ``error_kinds`` lists them.
    errors = reports.errored_rollouts(conn, rid)
    stderr = stderr_of_sums(n_scored, n_scored * mean, sumsq) if n_scored and mean is not None else None
    rewards: dict[str, float] = {}
    metrics: dict[str, float] = {}
    for name, kind, avg in reports.score_means(conn, rid):
        (rewards if kind == "reward" else metrics)[name] = avg
    error_kinds = reports.error_kinds(conn, rid)
    top = reports.top_failure(conn, rid)
    # pass@k over tasks, counting a rollout as passing when its total reward reaches the threshold.
    per_task: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for ti, reward in reports.task_rewards(conn, rid):
        per_task[ti][0] += 1
        if reward is not None and reward >= pass_threshold:
            per_task[ti][1] += 1
    passk = pass_at_ks([(tot, good) for tot, good in per_task.values()], run["rollouts_per_task"] or 1)
    return {
        "run_id": rid,
        "env": run["env_name"],
        "env_version": run["env_version"],
        "model": run["model"],
        "status": run["status"],
        "tasks": len(per_task),
        "rollouts": n,
        "errors": errors,
        "failed": failed,
        "error_kinds": error_kinds,
        "top_failure": {"kind": top[0], "message": top[1]} if top else None,
        "mean_reward": mean,
        "stderr": stderr,
        "pass_at_k": passk,
        "pass_threshold": pass_threshold,
        "rewards": rewards,
        "metrics": metrics,
        "prompt_tokens": ptoks or 0,
        "completion_tokens": ctoks or 0,
        "cost_usd": cost or 0.0,
        "mean_rollout_s": mean_dur,
    }


#: The per-step columns of a training run, as the CLI (`workbench runs RUN`) and the app show them:
#: (title, metric key, decimals).
STEP_COLUMNS = [("reward", "reward_mean", 3), ("sd", "reward_std", 3), ("loss", "loss", 4),
                ("mismatch_kl", "mismatch_kl", 4), ("masked", "masked_fraction", 3), ("entropy", "entropy", 3),
                ("tok/s", "tokens_per_s", 0), ("dropped", "dropped", 0), ("wait s", "wait_s", 1),
                ("train s", "train_s", 1), ("update s", "update_s", 1)]
