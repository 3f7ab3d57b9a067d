"""``workbench compare``: runs of one environment side by side, and each against a baseline, task by task.

Per run: the mean reward with a 95% confidence interval, pass@k, errors, tokens, cost (in total, per
rollout and per solved task), rollout latency p50/p95. Against the baseline: the paired per-task
difference (each task's mean reward in the run minus in the baseline, over the tasks both ran: ``delta``) with a
95% CI from a paired bootstrap over tasks (seeded, so the same runs give the same interval; past
:data:`BOOTSTRAP_MAX_TASKS` tasks the normal approximation, which is as good there and says so),
whether it is significant (the CI excludes 0), and the tasks that regressed (worst first) and improved.
Tasks are named for people by their index and the start of their prompt (``task_labels``), not by their id (a hash).

A rollout that failed (no reward) counts as 0 here: a model that errors is worse, not absent. Runs of
different environments or versions, or over different tasks, are refused with the reason;
``allow_mismatch`` compares the tasks they share (across versions too) and says so.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from workbench.analysis.report import pass_at_ks
from workbench.errors import ConfigError, NotFoundError
from workbench.format import clip
from workbench.records.rollout import content_text
from workbench.store import reports, run_lookups

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_MAX_TASKS = 5000
Z95 = 1.959963984540054
#: Characters of a task's prompt a comparison keeps to name it (one line).
PROMPT_CHARS = 80


@dataclass(slots=True)
class RunStats:
    run_id: str
    model: str
    env: str
    env_version: str
    rollouts: int
    errors: int
    task_means: dict[str, float]  # task id -> mean reward (failed rollouts count 0)
    passed: dict[str, tuple[int, int]]  # task id -> (rollouts, passing rollouts)
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    rewards: dict[str, list[float]] = field(default_factory=dict)  # task id -> its rollouts' rewards
    latencies: dict[str, list[float]] = field(default_factory=dict)  # task id -> its rollouts' durations
    label: str = ""  # what a reader calls the run: the registered model name, and its pipeline stage
    scored: int = 0  # rollouts with a reward (failed and unscored ones count 0 in the means)
    task_labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id -> {task_index, prompt}

    def as_dict(self, tasks: set[str], pass_threshold: float) -> dict[str, Any]:
        rewards = [x for t in tasks for x in self.rewards.get(t, ())]
        n = len(rewards)
        mean = sum(rewards) / n if n else None
        half = normal_half_width(rewards) if n > 1 else None
        solved = sum(1 for t in tasks if self.passed.get(t, (0, 0))[1] > 0)
        lat = sorted(x for t in tasks for x in self.latencies.get(t, ()))
        return {
            "run_id": self.run_id, "model": self.model, "label": self.label or self.model, "rollouts": self.rollouts, "errors": self.errors,
            "tasks": len(tasks), "mean_reward": mean,
            "mean_ci95": [mean - half, mean + half] if mean is not None and half is not None else None,
            "pass_at_k": _pass_at_k(self.passed, tasks),
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd, "cost_per_rollout": self.cost_usd / self.rollouts if self.rollouts else None,
            "solved_tasks": solved, "cost_per_solved_task": self.cost_usd / solved if solved else None,
            "latency_p50_s": _quantile(lat, 0.5), "latency_p95_s": _quantile(lat, 0.95),
        }


def _quantile(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[i]


def _pass_at_k(passed: dict[str, tuple[int, int]], tasks: set[str]) -> dict[str, float]:
    rows = [passed[t] for t in tasks if t in passed]
    return pass_at_ks(rows, max((n for n, _ in rows), default=0))


def resolve_runs(conn: Any, targets: list[str]) -> list[str]:
    """Run ids for the targets: run ids, or comparison ids (``cmp-...`` of ``eval -m A -m B``, or the id of an
    ``optimize``/``distill`` pipeline: every run of that comparison)."""
    out: list[str] = []
    for t in targets:
        ids = run_lookups.comparison_runs(conn, t)
        if ids:
            out += ids
            continue
        if t.startswith("cmp-"):
            raise NotFoundError(f"no runs belong to comparison {t}")
        if not run_lookups.run_exists(conn, t):
            raise NotFoundError(f"no run {t} in the store")
        out.append(t)
    return list(dict.fromkeys(out))


def load_run(conn: Any, run_id: str, pass_threshold: float) -> RunStats:
    run = reports.compared_run(conn, run_id)
    if run is None:
        raise NotFoundError(f"no run {run_id} in the store")
    rewards: dict[str, list[float]] = defaultdict(list)
    lat: dict[str, list[float]] = defaultdict(list)
    passes: dict[str, int] = defaultdict(int)
    costs: list[float] = []
    stats = RunStats(run_id, run[0], run[1], run[2], 0, 0, {}, {}, 0, 0, 0.0)
    stats.label = (run[3] or run[0]) + (f" ({run[4]})" if run[4] else "")
    for task_id, reward, ptok, ctok, cost, dur in reports.task_results(conn, run_id):
        rewards[task_id].append(reward if reward is not None else 0.0)
        stats.scored += reward is not None
        if reward is not None and reward >= pass_threshold:
            passes[task_id] += 1
        lat[task_id].append(dur)
        stats.prompt_tokens += ptok
        stats.completion_tokens += ctok
        costs.append(cost)
    stats.cost_usd = math.fsum(costs)  # exactly rounded: the same total whatever order the rows come in
    stats.rewards, stats.latencies = dict(rewards), dict(lat)
    stats.rollouts = sum(len(v) for v in rewards.values())
    stats.errors = reports.errored_rollouts(conn, run_id)
    stats.task_means = {t: sum(v) / len(v) for t, v in rewards.items()}
    stats.passed = {t: (len(v), passes[t]) for t, v in rewards.items()}
    return stats


def prompt_start(prompt_json: str, chars: int = PROMPT_CHARS) -> str:
    """The start of a stored prompt on one line: a string prompt, or a message list's first user message
    (the system prompt is the same for every task), cut to ``chars``."""
    try:
        prompt = json.loads(prompt_json) if prompt_json else ""
    except ValueError:
        prompt = prompt_json
    if isinstance(prompt, list):
        messages = [m for m in prompt if isinstance(m, dict)]
        user = next((m for m in messages if m.get("role") == "user"), messages[-1] if messages else {})
        prompt = content_text(user.get("content"))
    return clip(str(prompt), chars)


def task_labels(conn: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """Each task of the run named for people: ``{task id: {"task_index": 3, "prompt": "What is …"}}``."""
    return {task_id: {"task_index": index, "prompt": prompt_start(prompt)}
            for task_id, index, prompt in reports.task_prompts(conn, run_id)}


def normal_half_width(values: list[float]) -> float:
    """Half the width of the normal-approximation 95% CI of the mean of ``values`` (two or more)."""
    return Z95 * statistics.stdev(values) / math.sqrt(len(values))


def percentile_interval(stats: list[float]) -> list[float]:
    """The 95% percentile interval of :data:`BOOTSTRAP_RESAMPLES` bootstrap statistics, sorted."""
    return [stats[int(0.025 * BOOTSTRAP_RESAMPLES)], stats[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]]


def paired_interval(d: list[float], seed: int = 0) -> tuple[float, list[float] | None, str]:
    """The mean of paired differences ``d``, its 95% CI and how it was found: a seeded bootstrap (the same
    differences give the same interval), the normal approximation past :data:`BOOTSTRAP_MAX_TASKS`, none
    under two."""
    n = len(d)
    delta = sum(d) / n if n else 0.0
    if n < 2:
        return delta, None, "none"
    if n > BOOTSTRAP_MAX_TASKS:
        half = normal_half_width(d)
        return delta, [delta - half, delta + half], "normal"
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(d, k=n)) / n for _ in range(BOOTSTRAP_RESAMPLES))
    return delta, percentile_interval(means), "paired bootstrap"


def paired(base: RunStats, other: RunStats, tasks: list[str], seed: int = 0) -> dict[str, Any]:
    """``other`` against ``base`` over ``tasks``: mean difference, 95% CI, significance, regressions."""
    d = [other.task_means[t] - base.task_means[t] for t in tasks]
    n = len(d)
    delta, ci, method = paired_interval(d, seed)
    order = sorted(range(n), key=lambda i: (d[i], i))  # ties in the order of ``tasks``
    return {
        "delta": delta, "ci95": ci, "ci_method": method,
        "significant": bool(ci is not None and (ci[0] > 0 or ci[1] < 0)),
        "regressions": [tasks[i] for i in order if d[i] < 0],
        "improvements": [tasks[i] for i in reversed(order) if d[i] > 0],
        "regression_deltas": {tasks[i]: d[i] for i in order if d[i] < 0},
        "improvement_deltas": {tasks[i]: d[i] for i in reversed(order) if d[i] > 0},
    }


def load_runs(conn: Any, targets: list[str], baseline: str | None = None,
              pass_threshold: float = 1.0) -> list[RunStats]:
    """The runs the targets name, the baseline (default: the first) first."""
    ids = resolve_runs(conn, targets)
    if baseline is not None:
        [baseline] = resolve_runs(conn, [baseline])
        ids = [baseline, *[i for i in ids if i != baseline]]
    if len(ids) < 2:
        raise ConfigError("compare needs at least two runs (or a comparison id whose runs they are)")
    runs = [load_run(conn, i, pass_threshold) for i in ids]
    runs[0].task_labels = task_labels(conn, runs[0].run_id)  # the baseline has every task compared
    return runs


def compare(conn: Any, targets: list[str], baseline: str | None = None, pass_threshold: float = 1.0,
            allow_mismatch: bool = False) -> dict[str, Any]:
    """The comparison ``workbench compare`` prints (see the module docstring)."""
    return compare_runs(load_runs(conn, targets, baseline, pass_threshold), pass_threshold, allow_mismatch)


def compare_runs(runs: list[RunStats], pass_threshold: float = 1.0, allow_mismatch: bool = False) -> dict[str, Any]:
    """:func:`compare` of runs already loaded, the first the baseline."""
    base = runs[0]
    notes: list[str] = []
    unscored = [r for r in runs if not r.scored]
    if unscored:
        which = ", ".join(f"{r.run_id} ({r.rollouts} rollouts)" for r in unscored)
        whose = "any of the runs" if len(unscored) == len(runs) else "run" + "s" * (len(unscored) > 1)
        raise ConfigError(f"there are no rewards to compare: no rollout of {whose} {which} has a reward; "
                          "`workbench runs RUN` shows why (rollouts that failed, or were imported unscored)")
    for r in runs[1:]:
        if r.env != base.env:
            raise ConfigError(f"run {r.run_id} is of {r.env!r} and run {base.run_id} of {base.env!r}: "
                              "runs of different environments cannot be compared")
        if r.env_version != base.env_version:
            if not allow_mismatch:
                raise ConfigError(f"run {r.run_id} is of {r.env} version {r.env_version} and run {base.run_id} of "
                                  f"version {base.env_version}; pass --allow-mismatch to compare the tasks they share")
            notes.append(f"run {r.run_id} is of env version {r.env_version}, the baseline of {base.env_version}")
    common = set(base.task_means)
    for r in runs[1:]:
        common &= set(r.task_means)
    differs = [r for r in runs if set(r.task_means) != common]
    if differs:
        if not allow_mismatch:
            raise ConfigError(f"the runs did not run the same tasks ({len(common)} in common; run {differs[0].run_id} "
                              f"has {len(differs[0].task_means)}); pass --allow-mismatch to compare the tasks they "
                              "share")
        notes.append(f"only the {len(common)} tasks every run has are compared")
    if not common:
        raise ConfigError("the runs share no task")
    # in task order (by index where the baseline names its tasks), so that equal differences list that way
    tasks = sorted(common, key=lambda t: (base.task_labels.get(t, {}).get("task_index", 0), t))
    models = [{**runs[0].as_dict(common, pass_threshold), "baseline": True}]
    models += [{**r.as_dict(common, pass_threshold), "baseline": False, **paired(base, r, tasks)} for r in runs[1:]]
    labels = {t: base.task_labels[t] for t in tasks if t in base.task_labels}
    return {"env": base.env, "env_version": base.env_version, "baseline": base.run_id, "tasks": len(tasks),
            "notes": notes, "models": models, "task_labels": labels}
