"""Comparing runs: side by side, and each against a baseline task by task.

``workbench compare``, the app's Compare screen and ``wb.compare`` answer a :class:`Comparison`; the
statistics live in :mod:`workbench.analysis.compare`.
"""

from __future__ import annotations

from typing import Any, TypedDict


class ModelComparison(TypedDict, total=False):
    """One run of a :class:`Comparison` (the keys after ``baseline`` are only on the runs that are not)."""

    run_id: str
    model: str  #: the model id
    label: str  #: what a reader calls it: the registered model name (and its pipeline stage)
    rollouts: int
    errors: int  #: rollouts with any error (a failed rollout counts reward 0 in the means)
    tasks: int  #: tasks compared
    mean_reward: float | None
    mean_ci95: list[float] | None  #: the 95% confidence interval of the mean, ``[low, high]``
    pass_at_k: dict[str, float]  #: ``{"pass@1": ...}``
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cost_per_rollout: float | None
    solved_tasks: int  #: tasks with at least one passing rollout
    cost_per_solved_task: float | None
    latency_p50_s: float | None
    latency_p95_s: float | None
    baseline: bool  #: the run the others are compared with
    delta: float  #: the mean per-task difference from the baseline
    ci95: list[float] | None  #: its 95% CI (None with one task)
    ci_method: str  #: paired bootstrap | normal | none
    significant: bool  #: the CI excludes 0
    regressions: list[str]  #: task ids that got worse, worst first
    improvements: list[str]  #: task ids that got better, best first
    regression_deltas: dict[str, float]  #: each regressed task's difference
    improvement_deltas: dict[str, float]  #: each improved task's difference


class TaskLabel(TypedDict):
    """A task named for people: its index in the environment and the start of its prompt (one line)."""

    task_index: int
    prompt: str


class Comparison(TypedDict):
    """What ``workbench compare --json`` prints and ``wb.compare`` returns (a plain ``dict``)."""

    env: str
    env_version: str
    baseline: str  #: the baseline's run id
    tasks: int  #: tasks every run has (or shares, with ``allow_mismatch``)
    notes: list[str]  #: what was compared across (versions, a subset of tasks)
    models: list[ModelComparison]  #: the baseline first
    task_labels: dict[str, TaskLabel]  #: each compared task's id -> how a reader names it


def compare(conn: Any, targets: list[str], baseline: str | None = None, pass_threshold: float = 1.0,
            allow_mismatch: bool = False) -> Comparison:
    """The runs ``targets`` name (run ids, or a comparison id from ``eval -m A -m B``) compared against
    ``baseline`` (default: the first); a rollout passes when its total reward reaches ``pass_threshold``.
    Runs of different environments, versions or tasks are refused unless ``allow_mismatch``."""
    from workbench.analysis.compare import compare as compare_stored

    result: Any = compare_stored(conn, targets, baseline, pass_threshold, allow_mismatch)
    return result


__all__ = ["Comparison", "ModelComparison", "TaskLabel", "compare"]
