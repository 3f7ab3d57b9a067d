"""What a debug session reports (its turns, each stored score with the function that produced it), and a
stored run's environment loaded again to name its scores and tools."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from workbench.authoring.environment import Environment
from workbench.records.rollout import ModelCall
from workbench.records.task import Message


@dataclass(slots=True)
class Turn:
    """One model call and everything that followed it until the next call (tool results, env reply)."""

    index: int  # 0-based model call index
    call: ModelCall | None  # None when the call failed (the rollout's error says why)
    messages: list[Message]  # the messages this turn added to the conversation
    wall_s: float  # model call + tools/sandbox + the environment's reply
    cost_usd: float | None  # None when the model has no price

    @property
    def model_s(self) -> float:
        return self.call.latency_s if self.call is not None else 0.0

    @property
    def env_s(self) -> float:
        """Time spent outside the model call: tools, sandbox, the environment's reply."""
        return max(0.0, self.wall_s - self.model_s)

    def as_dict(self) -> dict[str, Any]:
        c = self.call
        return {"turn": self.index + 1, "wall_s": self.wall_s, "model_s": self.model_s, "env_s": self.env_s,
                "prompt_tokens": c.prompt_tokens if c else 0, "completion_tokens": c.completion_tokens if c else 0,
                "finish_reason": c.finish_reason if c else None, "cost_usd": self.cost_usd, "messages": self.messages}


@dataclass(slots=True)
class ScoreLine:
    """One reward or metric value, with the function that produced it."""

    name: str  # as stored: the function's name, or ``function.key`` for a dict-returning function
    function: str
    kind: str  # reward | metric | group
    weight: float | None  # None for metrics
    value: float


@dataclass(slots=True)
class DebugResult:
    """The stored outcome of the debugged rollout (read back from the store, as Traces shows it)."""

    rollout_id: str
    status: str  # ok | error
    reward: float | None
    scores: list[ScoreLine]
    errors: list[dict[str, Any]]
    duration_s: float
    cost_usd: float
    scoring_s: float  # from the harness's end to the rollout in the store: rubric, sandbox release, write

    def as_dict(self) -> dict[str, Any]:
        return {"rollout_id": self.rollout_id, "status": self.status, "reward": self.reward,
                "scores": [asdict(s) for s in self.scores],
                "rewards": {s.name: s.value for s in self.scores if s.kind != "metric"},
                "metrics": {s.name: s.value for s in self.scores if s.kind == "metric"},
                "errors": self.errors, "duration_s": self.duration_s, "cost_usd": self.cost_usd,
                "scoring_s": self.scoring_s}


def score_lines(env: Environment, rewards: dict[str, float], metrics: dict[str, float]) -> list[ScoreLine]:
    """Stored scores matched to the rubric functions that produced them (``name`` or ``name.key``)."""
    fns = {f.name: f for f in env.rubric.functions}

    def owner(name: str) -> Any:
        return fns.get(name) or fns.get(name.split(".", 1)[0])

    out: list[ScoreLine] = []
    for name, v in rewards.items():
        f = owner(name)
        out.append(ScoreLine(name, f.name if f else name, f.kind if f else "reward", f.weight if f else None, v))
    for name, v in metrics.items():
        f = owner(name)
        out.append(ScoreLine(name, f.name if f else "(engine)", "metric", None, v))
    return out
