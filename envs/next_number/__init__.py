"""Counting on: "What number comes next?" and a number; the answer is the number after it.

The bundled environment where a local RL run learns something that generalises. The embedded model
knows the next number for every number here, but was pre-trained to say it only about a third of the
time and otherwise to decline ("I am not sure."). RL on the training numbers rewards answering, and
answering at all is one decision shared by every number, so the reward rises on the held-out numbers
the run never trains on as well.
"""

from __future__ import annotations

import random
import re
from typing import Any

import workbench as wb

SYSTEM_PROMPT = "Answer with a number."
PROMPT = "What number comes next?\n{n}"
_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str | None) -> int | None:
    """The last integer in ``text`` ("Up 39." -> 39), or None."""
    found = _INTEGER.findall(text or "")
    return int(found[-1]) if found else None


def _is_next(text: str | None, number: int) -> bool:
    text = text or ""
    return len(_INTEGER.findall(text)) == 1 and len(text.split()) <= 4 and last_integer(text) == number + 1


class CountOn(wb.MultiTurn):
    """``rounds`` questions in one conversation: after each reply the next question asks about the
    number that should have come, so a run of right answers counts on from the task's number."""

    def __init__(self, rounds: int) -> None:
        super().__init__(max_turns=rounds, system_prompt=SYSTEM_PROMPT)
        self.rounds = rounds

    async def setup(self, task: Any, state: dict[str, Any]) -> None:
        state["asked"], state["right"] = [task.info["n"]], []

    async def respond(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]] | None:
        asked = state["asked"][-1]
        state["right"].append(_is_next(messages[-1].get("content"), asked))
        if len(state["right"]) >= self.rounds:
            return None
        state["asked"].append(asked + 1)
        return [{"role": "user", "content": PROMPT.format(n=asked + 1)}]

    def describe(self) -> str:
        return f"CountOn(rounds={self.rounds})"


def make_rows(n: int = 60, seed: int = 0, start: int = 0) -> list[dict[str, Any]]:
    """The numbers ``start .. start+n-1`` in a seeded order."""
    numbers = list(range(start, start + n))
    random.Random(seed).shuffle(numbers)
    return [{"prompt": PROMPT.format(n=k), "answer": str(k + 1), "info": {"n": k}} for k in numbers]


def _check_args(n: Any, start: Any, rounds: Any) -> None:
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise wb.EnvLoadError(f"next_number: rounds must be a positive integer, got {rounds!r}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise wb.EnvLoadError(f"next_number: n must be a positive integer, got {n!r}")
    if not isinstance(start, int) or isinstance(start, bool):
        raise wb.EnvLoadError(f"next_number: start must be an integer, got {start!r}")


def load_environment(n: int = 60, seed: int = 0, start: int = 0, rounds: int = 1) -> wb.Environment:
    """The successors of ``n`` numbers from ``start`` (0..59 by default: the embedded model's range).
    With ``rounds`` above 1, each task is a conversation of that many questions (:class:`CountOn`)
    and the reward is the fraction answered right."""
    _check_args(n, start, rounds)
    tasks = wb.TaskSet.from_records(make_rows(n, seed, start), name="next_number")
    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    def next_one(completion: str, answer: str, state: dict[str, Any]) -> float:
        """1 when a short reply (at most 4 words) names one number and it is the next number: a list of
        candidates or a hedge ("37 or 38") is not an answer. Over several rounds, the fraction right."""
        if "right" in state:
            return sum(state["right"]) / len(state["right"]) if state["right"] else 0.0
        return 1.0 if _is_next(completion, int(answer) - 1) else 0.0

    @rubric.metric
    def declined(completion: str) -> float:
        """1 when the reply has no number at all: the habit RL trains away."""
        return 1.0 if last_integer(completion) is None else 0.0

    @rubric.metric
    def off_by(completion: str, answer: str) -> float:
        """The reply's last number minus the answer (0 when right; 0 too when there is none: see declined)."""
        got = last_integer(completion)
        return 0.0 if got is None else float(got - int(answer))

    return wb.Environment(
        name="next_number",
        tasks=tasks,
        harness=CountOn(rounds) if rounds > 1 else wb.SingleTurn(system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=8, temperature=0.7),
        description="What number comes next? The bundled env where local RL generalises to held-out numbers.",
    )
