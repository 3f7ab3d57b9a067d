"""The guessing environment's action and observation."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class GuessAction(Action):
    guess: int = Field(description="Your guess, from 0 to 9")
    reason: str | None = Field(default=None, description="Why you guess it")


class GuessObservation(Observation):
    hint: str = Field(default="", description="What the environment says of the guess")
    attempts: int = Field(default=0, description="Guesses made so far")
