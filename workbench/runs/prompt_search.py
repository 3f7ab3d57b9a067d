"""GEPA's side of ``workbench optimize``: an adapter that scores a candidate system prompt by running
it as a normal eval run, and the reflection model as GEPA calls it.

GEPA (the ``gepa`` library) runs its search loop synchronously in a worker thread; every evaluation
and every reflection call is sent back to the event loop that owns the store and the HTTP clients
(:meth:`Bridge.call`), so each evaluation is a run in the store like any other, browsable and
comparable, and each reflection call is priced into the optimisation's own record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gepa.core.adapter import EvaluationBatch, ProposalFn

from workbench.errors import WorkbenchError
from workbench.rollouts.client import ChatClient
from workbench.runs.evaluate import EvalOptions, evaluate
from workbench.store import Store
from workbench.store.reports import reflected_rollouts

T = TypeVar("T")
COMPONENT = "system_prompt"


class SearchStopped(WorkbenchError):
    """The search was stopped (the budget is spent or the user interrupted): no further evaluation."""


class Bridge:
    """Runs coroutines on the event loop from GEPA's worker thread and waits for their results."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.stop = threading.Event()

    def call(self, make: Callable[[], Awaitable[T]]) -> T:
        if self.stop.is_set():
            raise SearchStopped("the search was stopped")

        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result()


@dataclass(slots=True)
class Candidate:
    """One system prompt the search tried, with the runs that evaluated it."""

    index: int
    prompt: str
    runs: list[str] = field(default_factory=list)
    rollouts: int = 0
    reward_sum: float = 0.0
    parent: int | None = None
    score: float | None = None  # GEPA's mean over the training split, once it evaluated it on all of it

    @property
    def mean(self) -> float | None:
        return self.reward_sum / self.rollouts if self.rollouts else None

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "prompt": self.prompt, "parent": self.parent, "score": self.score,
                "mean_reward": self.mean, "rollouts": self.rollouts, "runs": list(self.runs)}


@dataclass(slots=True)
class SearchState:
    """What the search has done so far: shared by the adapter, the reflection model and the stopper."""

    candidates: list[Candidate] = field(default_factory=list)
    spent_usd: float = 0.0
    reflection_usd: float = 0.0
    reflection_calls: int = 0
    evals: int = 0  # rollouts run by the search (GEPA's metric calls)
    reflected_on: int | None = None  # the candidate last evaluated with traces: the parent of the next proposal

    def candidate(self, prompt: str) -> Candidate:
        for c in self.candidates:
            if c.prompt == prompt:
                return c
        c = Candidate(len(self.candidates), prompt, parent=self.reflected_on)
        self.candidates.append(c)
        return c


class RunAdapter:
    """GEPA's adapter: a data instance is a task index; a candidate ``{"system_prompt": text}`` is
    scored by an eval run of those tasks with that system prompt (one rollout each), each reward
    the environment's own rubric."""

    def __init__(self, bridge: Bridge, store: Store, base: EvalOptions, state: SearchState,
                 on_update: Callable[[], None] | None = None) -> None:
        self.bridge, self.store, self.base, self.state = bridge, store, base, state
        self.on_update = on_update or (lambda: None)
        self.propose_new_texts: ProposalFn | None = None  # None: GEPA's own reflective proposer

    def evaluate(self, batch: list[int], candidate: dict[str, str], capture_traces: bool = False) -> EvaluationBatch:
        return self.bridge.call(lambda: self._evaluate(batch, candidate[COMPONENT], capture_traces))

    async def _evaluate(self, batch: list[int], prompt: str, capture_traces: bool) -> EvaluationBatch:
        cand = self.state.candidate(prompt)
        if capture_traces:  # GEPA reflects on this candidate's rollouts next, and proposes a child of it
            self.state.reflected_on = cand.index
        unique = list(dict.fromkeys(batch))
        pipeline = {**(self.base.pipeline or {}), "stage": f"candidate {cand.index}"}
        opts = dataclasses.replace(self.base, task_indices=unique, system_prompt=prompt or None, rollouts_per_task=1,
                                   pipeline=pipeline, comparison_id=None, env_args=dict(self.base.env_args))
        outcome = await evaluate(opts, self.store)
        rows = {r["task_index"]: r for r in self._rollouts(outcome.run_id)}
        cand.runs.append(outcome.run_id)
        self.state.spent_usd += float(outcome.summary.get("cost_usd") or 0.0)
        self.state.evals += len(batch)
        outputs, scores, trajectories = [], [], []
        for i in batch:
            row = rows.get(i)
            reward = float(row["reward"]) if row is not None and row["reward"] is not None else 0.0
            cand.rollouts += 1
            cand.reward_sum += reward
            outputs.append(row["completion"] if row else "")
            scores.append(reward)
            trajectories.append(_trajectory(row, reward))
        self.on_update()
        return EvaluationBatch(outputs=outputs, scores=scores, trajectories=trajectories if capture_traces else None)

    def _rollouts(self, run_id: str) -> list[dict[str, Any]]:
        return reflected_rollouts(self.store.conn, run_id)

    def make_reflective_dataset(self, candidate: dict[str, str], eval_batch: EvaluationBatch,
                                components_to_update: list[str]) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        records = [{"Inputs": t["inputs"], "Generated Outputs": t["output"], "Feedback": t["feedback"]}
                   for t in eval_batch.trajectories or []]
        return {name: records for name in components_to_update}


def _trajectory(row: dict[str, Any] | None, reward: float) -> dict[str, Any]:
    if row is None:
        return {"inputs": "", "output": "", "feedback": "the rollout did not run"}
    feedback = f"reward {reward:g}"
    if row["scores"]:
        feedback += " (" + ", ".join(row["scores"]) + ")"
    if row["answer"] not in ("", "null", None):
        feedback += f"; the expected answer is {row['answer']}"
    if row["status"] != "completed":
        feedback += f"; the rollout ended with {row['error_kind'] or row['status']}"
    return {"inputs": row["prompt"], "output": row["completion"], "feedback": feedback}


class ReflectionModel:
    """GEPA's reflection language model: one chat call per proposal to an endpoint Workbench resolved
    (a registered model, a base URL, or the embedded server), priced into the search's spend."""

    def __init__(self, bridge: Bridge, state: SearchState, *, base_url: str, model: str, api_key: str | None,
                 provider: str, price: Any, max_tokens: int = 2048, record: Callable[[int, int, float], None]) -> None:
        self.bridge, self.state = bridge, state
        self.base_url, self.model, self.api_key, self.provider, self.price = base_url, model, api_key, provider, price
        self.max_tokens = max_tokens
        self.record = record

    def __call__(self, prompt: str | list[dict[str, Any]]) -> str:
        return self.bridge.call(lambda: self._ask(prompt))

    async def _ask(self, prompt: str | list[dict[str, Any]]) -> str:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        async with ChatClient(self.api_key, provider=self.provider, request_timeout=600.0) as client:
            resp = await client.chat(base_url=self.base_url, model=self.model, messages=messages,
                                     params={"max_tokens": self.max_tokens, "temperature": 1.0})
        usd = self.price.cost(resp.prompt_tokens, resp.completion_tokens) if self.price else 0.0
        self.state.reflection_calls += 1
        self.state.reflection_usd += usd
        self.state.spent_usd += usd
        self.record(resp.prompt_tokens, resp.completion_tokens, usd)
        return str(resp.message.get("content") or "")


class BudgetStopper:
    """GEPA's stop condition: the spend so far plus what the final held-out evaluation will cost
    reaches the budget (or the user stopped the search)."""

    def __init__(self, state: SearchState, budget_usd: float | None, reserve_usd: float, bridge: Bridge) -> None:
        self.state, self.budget, self.reserve, self.bridge = state, budget_usd, reserve_usd, bridge
        self.reason = ""

    def __call__(self, gepa_state: Any) -> bool:
        if self.bridge.stop.is_set():
            self.reason = self.reason or "stopped"
            return True
        if self.budget is not None and self.state.spent_usd + self.reserve >= self.budget:
            self.reason = (f"budget: ${self.state.spent_usd:.4f} spent, ${self.reserve:.4f} kept for the held-out "
                           f"evaluation, of ${self.budget:.4f}")
            return True
        return False


class ProgressLog:
    """GEPA's logger: its lines go to ``log`` with a timestamp-free prefix."""

    def __init__(self, log: Callable[[str], None] | None) -> None:
        self._log = log
        self.t0 = time.perf_counter()

    def log(self, message: str) -> None:
        if self._log:
            self._log(f"gepa: {message}")


__all__ = ["COMPONENT", "BudgetStopper", "Bridge", "Candidate", "ProgressLog", "ReflectionModel", "RunAdapter",
           "SearchState", "SearchStopped"]
