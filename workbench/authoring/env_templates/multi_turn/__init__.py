"""__env_name__: a multi-turn environment. The model guesses a secret number; after every guess the
environment answers "higher", "lower" or "correct" until it is found or the turns run out.

Made from the ``multi-turn`` template (``workbench new __env_name__ --template multi-turn``).

    workbench validate __env_name__
    workbench eval __env_name__ -n 4 -r 4
    workbench show ROLLOUT --tokens            # multi-turn token traces: each turn must extend the last

A multi-turn harness is a `wb.MultiTurn` subclass: `respond(messages, state)` is the environment's
move after each model turn. Return the messages to append (feedback as a user message), or None to
end the episode. Games, scripted users and simulators all fit this shape.
"""

from __future__ import annotations

import random
import re
from typing import Any

import workbench as wb

SYSTEM_PROMPT = ("Guess the secret whole number. After each guess you are told whether the secret is higher "
                 "or lower. Reply with one number per turn and nothing else.")
PROMPT = "I am thinking of a whole number from {low} to {high}. Guess it."

_NUMBER = re.compile(r"-?\d+")


def parse_guess(text: str | None) -> int | None:
    """The last whole number in a reply, or None."""
    found = _NUMBER.findall(text or "")
    return int(found[-1]) if found else None


def guesses_in(messages: list[dict[str, Any]]) -> list[int | None]:
    """Every assistant turn's guess, in order (None for a turn without a number)."""
    return [parse_guess(m.get("content")) for m in messages if m.get("role") == "assistant"]


def make_rows(n: int, high: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)  # seeded: the same arguments always give the same tasks
    rows = []
    for i in range(n):
        secret = rng.randint(1, high)
        rows.append({"prompt": PROMPT.format(low=1, high=high), "answer": str(secret),
                     "info": {"low": 1, "high": high, "game": i}})
    return rows


class GuessingGame(wb.MultiTurn):
    """The environment's side of the game. `state` is a dict private to one rollout."""

    async def setup(self, task: Any, state: dict[str, Any]) -> None:
        state["secret"] = int(task.answer)  # read once from the task, before the first model turn

    async def respond(self, messages: list[dict[str, Any]], state: dict[str, Any]) -> list[dict[str, Any]] | None:
        guess = parse_guess(messages[-1].get("content"))
        state["guesses"] = state.get("guesses", 0) + 1
        if guess is None:
            return [{"role": "user", "content": "Reply with a single whole number."}]
        if guess == state["secret"]:
            state["solved"] = True
            return None  # the episode ends here
        hint = "higher" if state["secret"] > guess else "lower"
        return [{"role": "user", "content": f"{guess} is wrong: the secret is {hint}. Guess again."}]


def load_environment(n: int = 8, high: int = 50, seed: int = 0, max_turns: int = 8) -> wb.Environment:
    """``n`` games with a secret in 1..``high``; ``max_turns`` guesses each (7 suffice for 1..100)."""
    if not isinstance(high, int) or high < 2:
        raise wb.EnvLoadError(f"__env_name__: high must be a whole number of at least 2, got {high!r}")
    rubric = wb.Rubric()

    # The usual holes, which `workbench probe` tries on this rubric before any training does: a substring
    # check that a list of every number passes, a reward for length, a check that another task's answer or a
    # wrong value in the right format satisfies, a judge model that can be told to give full marks, a test
    # the agent can edit in its sandbox. Compare the whole final answer, keep your own copy of what you
    # check against, and run `workbench probe __env_name__` after every rubric change.
    # Rewards read the conversation (`messages`), not only the harness state: `workbench validate`
    # scores the gold answer as a one-turn conversation, and a reward that only trusts state could
    # not tell a right answer from a wrong one there.
    @rubric.reward(weight=1.0)
    def solved(messages: list[dict[str, Any]], answer: str) -> float:
        """1.0 when some guess hit the secret."""
        return float(int(answer) in guesses_in(messages))

    @rubric.reward(weight=0.3)
    def efficiency(messages: list[dict[str, Any]], answer: str) -> float:
        """For a solved game: 1.0 on the first guess, falling linearly to 0 at the turn limit."""
        guesses = guesses_in(messages)
        if int(answer) not in guesses:
            return 0.0
        used = guesses.index(int(answer)) + 1
        return max(0.0, 1.0 - (used - 1) / max_turns)

    @rubric.metric
    def turns(messages: list[dict[str, Any]]) -> float:
        """How many guesses the model made."""
        return float(len(guesses_in(messages)))

    # A metric to catch a bad strategy: guessing outside the announced range.
    @rubric.metric
    def out_of_range(messages: list[dict[str, Any]], info: dict[str, Any]) -> float:
        """The share of guesses outside [low, high] (or with no number)."""
        guesses = guesses_in(messages)
        bad = [g for g in guesses if g is None or not info["low"] <= g <= info["high"]]
        return len(bad) / len(guesses) if guesses else 0.0

    return wb.Environment(
        name="__env_name__",
        tasks=wb.TaskSet.from_records(make_rows(n, high, seed), name="__env_name__"),
        harness=GuessingGame(max_turns=max_turns, system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=32, temperature=1.0),
        description="Find a secret number from higher/lower feedback (multi turn).",
    )
