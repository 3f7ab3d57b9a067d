"""The harness of an OpenEnv environment: one session per rollout, the model's turns as its actions.

A rollout resets its own session (the reset arguments: the task's seed, the rollout's id as the episode's
id, and the environment arguments),
and the first observation is the user's message; an MCP environment's tools are listed then. Each model
turn is then one action (a tool call each, or the turn's text: ``actions``); each observation is the next message (a tool message per
call, or a user message). The episode ends when the environment says it is done, when the model takes
no action, or after ``max_turns`` model turns. What the environment answered is kept in the rollout's
``state["openenv"]``: every step's reward, whether it ended, how many steps, the last observation.
"""

from __future__ import annotations

from typing import Any

from workbench.authoring.harness import Harness
from workbench.errors import EnvLoadError
from workbench.formats.openenv.actions import ActionMap, Move, render
from workbench.formats.openenv.protocol import OpenEnvError, Session, StepResult
from workbench.formats.openenv.servers import Servers
from workbench.records.rollout import Rollout, RolloutFailed
from workbench.records.task import Message

#: The protocol's errors about one action (the model is told and may try again); any other ends the rollout.
ACTION_ERRORS = ("VALIDATION_ERROR", "EXECUTION_ERROR")
STATE_KEY = "openenv"


class OpenEnvHarness(Harness):
    #: the hash of what the server published when the environment was read (``ServerInfo.digest``)
    published: str = ""

    def __init__(self, servers: Servers, actions: ActionMap, reset_args: dict[str, Any], max_turns: int = 30,
                 system_prompt: str | None = None, label: str = "openenv") -> None:
        self.servers, self.actions, self.reset_args = servers, actions, dict(reset_args)
        self.max_turns = max_turns
        self.system_prompt = system_prompt if system_prompt is not None else actions.instructions()
        self.label = label

    def describe(self) -> str:
        return f"OpenEnv({self.label}, {self.actions.mode})"

    def reset_args_for(self, rollout: Rollout) -> dict[str, Any]:
        """The task's seed, the rollout's id as the episode's, and the environment arguments (which win)."""
        seed = (rollout.task.info or {}).get("seed")
        return {**({"seed": seed} if isinstance(seed, int) else {}), "episode_id": rollout.id, **self.reset_args}

    async def run(self, rollout: Rollout) -> None:
        try:
            session, first, release = await self.servers.open(self.reset_args_for(rollout))
        except OpenEnvError as e:
            raise RolloutFailed("harness", self.label, f"reset failed: {e.message}") from None
        except EnvLoadError as e:  # another server was needed and did not start
            raise RolloutFailed("harness", self.label, str(e)) from None
        try:
            await self._episode(rollout, session, first)
        finally:
            await session.close()
            release()

    async def _episode(self, rollout: Rollout, session: Session, first: StepResult) -> None:
        record: dict[str, Any] = {"rewards": [], "done": first.done, "steps": 0, "observation": first.observation}
        rollout.state[STATE_KEY] = record
        rollout.messages = [*([{"role": "system", "content": self.system_prompt}] if self.system_prompt else []),
                            {"role": "user", "content": render(first.observation)}]
        listed: list[dict[str, Any]] = []
        if self.actions.mcp:
            try:
                listed = await session.list_tools()
            except OpenEnvError as e:
                raise RolloutFailed("harness", self.label, e.message) from None
        names = frozenset(t["name"] for t in listed)
        tools = self.actions.tools(listed)
        for turn in range(self.max_turns):
            if record["done"]:
                return
            msg = await rollout.generate(tools=tools)
            rollout.messages.append(msg)
            moves = self.actions.moves(msg, names)
            if not moves:
                record["ended"] = "the model took no action"
                return
            replies = [await self._act(session, move, record) for move in moves]
            if record["done"]:
                return
            if turn == self.max_turns - 1:
                rollout.state["max_turns_reached"] = True
                rollout.state["final_feedback"] = replies
                return
            rollout.messages.extend(replies)

    async def _act(self, session: Session, move: Move, record: dict[str, Any]) -> Message:
        """Take one move; the message that answers it."""
        if record["done"]:
            text = "The episode is over; this action was not taken."
        elif move.action is None:
            text = f"Invalid action: {move.error}"
        else:
            try:
                res = await session.step(move.action)
            except OpenEnvError as e:
                if e.code not in ACTION_ERRORS:
                    raise RolloutFailed("harness", self.label, f"step failed: {e.message}") from None
                text = f"Invalid action: {e.message}"
            else:
                record["steps"] += 1
                record["rewards"].append(res.reward)
                record["done"] = res.done
                record["observation"] = res.observation
                text = render(res.observation)
        if move.call_id is not None:
            return {"role": "tool", "tool_call_id": move.call_id, "content": text}
        return {"role": "user", "content": text}


def episode_return(state: dict[str, Any]) -> float:
    """The sum of the episode's step rewards (a step without a reward counts 0)."""
    rec = state.get(STATE_KEY) or {}
    return float(sum(r for r in rec.get("rewards") or () if isinstance(r, int | float)))


def episode_done(state: dict[str, Any]) -> float:
    """1 when the environment ended the episode, else 0 (out of turns, or the model stopped acting)."""
    return 1.0 if (state.get(STATE_KEY) or {}).get("done") else 0.0


def episode_steps(state: dict[str, Any]) -> float:
    return float((state.get(STATE_KEY) or {}).get("steps") or 0)
