"""An eval: run an environment against a model, store every rollout, and answer its summary.

``workbench eval``, the ``run_eval`` MCP tool and ``wb.eval`` call :func:`run_eval`; each face renders the
:class:`EvalSummary` (the CLI's ``--json`` prints it as it is) and raises :class:`EveryRolloutFailed` when
nothing ran, pointing at the details its own way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from workbench.errors import EndpointError

if TYPE_CHECKING:
    from workbench.rollouts.engine import RunCounters
    from workbench.runs.evaluate import EvalOptions, EvalOutcome, StatusCallback
    from workbench.store import Store


class EvalSummary(TypedDict, total=False):
    """What an eval answers: ``workbench eval --json``'s object, ``run_eval``'s result and ``wb.eval``'s
    return value (a plain ``dict``; these are its keys)."""

    run_id: str  #: the stored run (``workbench show RUN``)
    env: str  #: the environment's name
    env_version: str  #: its content hash: code, data files and the arguments it was loaded with
    model: str  #: the model id the endpoint was asked for
    status: str  #: completed | interrupted | failed
    tasks: int  #: tasks with at least one rollout
    rollouts: int  #: rollouts stored
    errors: int  #: rollouts with any error (failed, or a reward that raised)
    failed: int  #: rollouts that failed outright (no reward)
    error_kinds: dict[str, int]  #: errors counted by kind (timeout, bad_response, reward_error, ...)
    top_failure: dict[str, str] | None  #: the commonest failure: ``{"kind", "message"}``
    mean_reward: float | None  #: over the scored rollouts
    stderr: float | None  #: the standard error of that mean
    pass_at_k: dict[str, float]  #: ``{"pass@1": ..., "pass@2": ...}`` up to the rollouts per task
    pass_threshold: float  #: a rollout passes when its total reward reaches this
    rewards: dict[str, float]  #: each reward function's mean
    metrics: dict[str, float]  #: each metric's mean
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float  #: 0 when ``unpriced``
    unpriced: bool  #: no price is known for the model (``workbench prices set``)
    mean_rollout_s: float | None
    rollouts_per_s: float
    retries: int  #: model calls retried (429, 5xx, connection errors)
    interrupted: bool  #: present (true) only when the run was stopped before its end


class EveryRolloutFailed(EndpointError):
    """An eval whose every rollout failed: the endpoint, the key or the model is wrong, not the policy.
    ``summary`` is the run's :class:`EvalSummary` (stored all the same)."""

    def __init__(self, summary: EvalSummary, see: str) -> None:
        top = summary.get("top_failure") or {}
        why = f"{top.get('kind')}: {' '.join(str(top.get('message', '')).split())[:300]}" if top else "see the run"
        super().__init__(f"every rollout of run {summary.get('run_id')} failed ({why}); {see}")
        self.summary = summary


@dataclass(slots=True)
class EvalResult:
    """A finished (or interrupted) eval: its summary, and the engine's outcome behind it."""

    summary: EvalSummary
    outcome: EvalOutcome

    @property
    def run_id(self) -> str:
        return self.outcome.run_id

    @property
    def interrupted(self) -> bool:
        return self.outcome.interrupted

    def failure(self, see: str) -> EveryRolloutFailed | None:
        """The error to raise when every rollout failed (None otherwise); ``see`` says where the details
        are, in the face's own words (a command, a tool call)."""
        s = self.summary
        if s.get("rollouts") and s.get("failed") == s.get("rollouts"):
            return EveryRolloutFailed(s, see)
        return None


async def run_eval(opts: EvalOptions, store: Store, *, on_start: Callable[[str, int], None] | None = None,
                   counters_cb: Callable[[RunCounters], None] | None = None,
                   on_status: StatusCallback | None = None) -> EvalResult:
    """Run the eval ``opts`` describes into ``store`` (``workbench.runs.evaluate.evaluate``) and answer its
    summary; an interrupted run's summary says so (``interrupted``)."""
    from workbench.runs.evaluate import evaluate

    outcome = await evaluate(opts, store, on_start=on_start, counters_cb=counters_cb, on_status=on_status)
    summary: Any = dict(outcome.summary)
    if outcome.interrupted:
        summary["interrupted"] = True
    return EvalResult(summary, outcome)


__all__ = ["EvalResult", "EvalSummary", "EveryRolloutFailed", "run_eval"]
