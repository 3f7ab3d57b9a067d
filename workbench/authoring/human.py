"""``wb.Human``: a person is the policy. The environment's own harness runs as it does for a model — its
tools, sandbox, user simulator, turn limits — and every assistant turn it asks for is written by a person
(``workbench play``, or ``p`` in the app); the rubric scores the rollout like any other, and it is stored
with ``source = "human"`` and the person's name."""

from __future__ import annotations

from workbench.authoring.harness import Harness, SingleTurn
from workbench.errors import EnvLoadError
from workbench.records.rollout import Rollout, RolloutFailed


class Human(Harness):
    """``wb.Human(harness)``: ``harness``'s rollouts with a person writing the assistant's turns (default:
    one turn, as ``wb.SingleTurn``). The person comes from whoever drives the run: ``policy`` here, or
    the one ``workbench play`` and the app give the rollout."""

    harness: Harness
    policy: object | None

    def __init__(self, harness: Harness | None = None, policy: object | None = None) -> None:
        if harness is not None and not isinstance(harness, Harness):
            raise EnvLoadError(f"wb.Human(harness) takes a harness such as wb.ToolLoop(...), not "
                               f"{type(harness).__name__}")
        if isinstance(harness, Human):
            harness = harness.harness
        if harness is not None and getattr(harness, "needs_proxy", False):
            raise EnvLoadError(f"wb.Human cannot stand in for the model of {harness.describe()}: an agent "
                               "program calls the model itself; play its environment with a harness such as "
                               "wb.ToolLoop")
        self.harness = harness or SingleTurn()
        self.policy = policy
        self.system_prompt = self.harness.system_prompt
        self.max_turns = self.harness.max_turns

    async def run(self, rollout: Rollout) -> None:
        rollout.policy = rollout.policy or self.policy
        if rollout.policy is None:
            raise RolloutFailed("harness", "wb.Human", "a person plays this harness: run it with "
                                                       "`workbench play ENV --task N` or press p in the app")
        rollout.source = "human"
        rollout.state["human"] = str(getattr(rollout.policy, "name", "") or "")
        await self.harness.run(rollout)

    def describe(self) -> str:
        return f"Human({self.harness.describe()})"

    def __getattr__(self, name: str) -> object:  # the tools, schemas, ... of the harness it plays
        if name == "harness":
            raise AttributeError(name)
        return getattr(self.harness, name)
