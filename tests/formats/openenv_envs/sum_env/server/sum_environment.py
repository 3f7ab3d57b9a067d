"""An MCP environment: add numbers with the ``add`` tool, then ``submit`` the sum of 2 and 3 (or of ``a`` and
``b``, reset arguments). Reward 1 and done on the right answer; a wrong one ends the episode with 0."""

from typing import Any
from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State


class SumEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("sum_env")

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Add two whole numbers."""
            return a + b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submit your final answer."""
            return f"submitted {answer}"

        super().__init__(mcp)
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._target = 5

    def reset(self, seed: int | None = None, episode_id: str | None = None, a: int = 2, b: int = 3,
              **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._target = a + b
        return CallToolObservation(tool_name="", result=f"What is {a} + {b}? Submit the answer.")

    def _judge(self, action: Action, obs: Observation) -> Observation:
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            obs.reward = 1.0 if action.arguments.get("answer") == self._target else 0.0
            obs.done = True
        return obs

    def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._judge(action, super().step(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return self._judge(action, await super().step_async(action, timeout_s=timeout_s, **kwargs))

    def _step_impl(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return CallToolObservation(tool_name="", result="act with the tools", reward=0.0)

    @property
    def state(self) -> State:
        return self._state
