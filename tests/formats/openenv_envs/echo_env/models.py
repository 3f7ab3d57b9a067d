"""The echo environment's action and observation."""

from openenv.core.env_server.types import Action, Observation
from pydantic import Field


class EchoAction(Action):
    message: str = Field(description="The message to send")


class EchoObservation(Observation):
    echoed: str = Field(default="", description="What the environment heard")
