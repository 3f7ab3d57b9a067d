"""Echoes each message; reward 1 for a message holding "ping"; done after ``turns`` steps."""

from typing import Any
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import State

try:
    from ..models import EchoAction, EchoObservation
except ImportError:
    from models import EchoAction, EchoObservation


class EchoEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._turns = 2

    def reset(self, seed: int | None = None, episode_id: str | None = None, turns: int = 2,
              **kwargs: Any) -> EchoObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._turns = turns
        return EchoObservation(echoed=f"Episode {self._state.episode_id}: say something ({turns} turns).")

    def step(self, action: EchoAction, timeout_s: float | None = None, **kwargs: Any) -> EchoObservation:  # type: ignore[override]
        self._state.step_count += 1
        reward = 1.0 if "ping" in action.message.lower() else 0.0
        done = self._state.step_count >= self._turns
        return EchoObservation(echoed=f"step {self._state.step_count}: {action.message}", done=done, reward=reward)

    @property
    def state(self) -> State:
        return self._state
