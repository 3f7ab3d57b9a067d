"""Guess a number from 0 to 9: reward 1 and done on the target, else a hint; done after 5 guesses."""

from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import GuessAction, GuessObservation
except ImportError:
    from models import GuessAction, GuessObservation


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._target = 0

    def reset(self, seed: int | None = None, episode_id: str | None = None, target: int | None = None,
              **kwargs: Any) -> GuessObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._target = target if target is not None else (seed or 0) % 10
        return GuessObservation(hint="Guess a number from 0 to 9.", attempts=0)

    def step(self, action: GuessAction, timeout_s: float | None = None, **kwargs: Any) -> GuessObservation:  # type: ignore[override]
        self._state.step_count += 1
        n = self._state.step_count
        if action.guess == self._target:
            return GuessObservation(hint="right", attempts=n, done=True, reward=1.0)
        hint = "higher" if action.guess < self._target else "lower"
        return GuessObservation(hint=hint, attempts=n, done=n >= 5, reward=0.0)

    @property
    def state(self) -> State:
        return self._state
