"""Harnesses: how the model acts on a task. The task set never depends on the harness."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .errors import EnvLoadError
from .rollout import Rollout
from .tasks import Message
from .tools import Tool


class Harness:
    """Base class. A harness fills ``rollout.messages`` by calling ``rollout.generate``."""

    system_prompt: str | None = None
    max_turns: int = 1

    def start(self, rollout: Rollout) -> None:
        rollout.messages = rollout.task.messages(self.system_prompt)

    async def run(self, rollout: Rollout) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


class SingleTurn(Harness):
    """One model call: the task's prompt in, one assistant message out."""

    def __init__(self, system_prompt: str | None = None) -> None:
        self.system_prompt = system_prompt

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        msg = await rollout.generate()
        rollout.messages.append(msg)


class ToolLoop(Harness):
    """The model calls tools (plain Python functions) until it answers without a tool call.

    A tool's signature and docstring become its JSON schema. Parameters named ``sandbox``,
    ``state``, ``task`` or ``info`` are injected and never shown to the model. Parallel tool calls
    run concurrently; a tool that raises returns the error to the model as the tool message.
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any] | Tool],
        max_turns: int = 10,
        system_prompt: str | None = None,
        parallel: bool = True,
    ) -> None:
        self.tools = [Tool.from_function(t) for t in tools]
        names = [t.name for t in self.tools]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise EnvLoadError(f"ToolLoop has two tools named {sorted(dupes)[0]!r}")
        self.by_name = {t.name: t for t in self.tools}
        self.schemas = [t.schema() for t in self.tools]
        if max_turns < 1:
            raise EnvLoadError("ToolLoop(max_turns=...) must be at least 1")
        self.max_turns = max_turns
        self.system_prompt = system_prompt
        self.parallel = parallel

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        for _ in range(self.max_turns):
            msg = await rollout.generate(tools=self.schemas)
            rollout.messages.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls:
                return
            if self.parallel:
                results = await asyncio.gather(*(self._call(rollout, c) for c in calls))
            else:
                results = [await self._call(rollout, c) for c in calls]
            rollout.messages.extend(results)
        rollout.state["max_turns_reached"] = True

    async def _call(self, rollout: Rollout, call: dict[str, Any]) -> Message:
        fn = call.get("function") or {}
        name = fn.get("name", "")
        call_id = call.get("id", "")
        tool = self.by_name.get(name)
        if tool is None:
            content = f"Error: there is no tool named {name!r}. Available tools: {', '.join(self.by_name)}."
            rollout.errors.append(_tool_error(name or "?", f"unknown tool {name!r}"))
            return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
        raw = fn.get("arguments") or "{}"
        try:
            args = orjson.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except Exception as e:
            rollout.errors.append(_tool_error(name, f"bad arguments: {e}"))
            return {"role": "tool", "tool_call_id": call_id, "name": name,
                    "content": f"Error: the arguments are not a valid JSON object ({e})."}
        try:
            result = await tool.call(args, {"sandbox": rollout.sandbox, "state": rollout.state,
                                            "task": rollout.task, "info": rollout.task.info})
            content = result if isinstance(result, str) else orjson.dumps(result, default=str).decode()
        except Exception as e:  # goes back to the model, not up the stack
            rollout.errors.append(_tool_error(name, f"{type(e).__name__}: {e}"))
            content = f"Error: {type(e).__name__}: {e}"
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}

    def describe(self) -> str:
        return f"ToolLoop({', '.join(self.by_name)})"


def _tool_error(source: str, message: str) -> Any:
    from .rollout import RolloutError

    return RolloutError("tool", source, message)


class MultiTurn(Harness):
    """Subclass and implement ``respond``: the environment's turn after each model turn.

    ``respond(messages, state)`` returns the messages to append (e.g. game feedback as a user
    message), or ``None`` to end the episode. ``setup(task, state)`` may prepare per-rollout state.
    """

    def __init__(self, max_turns: int = 10, system_prompt: str | None = None) -> None:
        if max_turns < 1:
            raise EnvLoadError(f"{type(self).__name__}(max_turns=...) must be at least 1")
        self.max_turns = max_turns
        self.system_prompt = system_prompt

    async def setup(self, task: Any, state: dict[str, Any]) -> None:
        return None

    async def respond(self, messages: list[Message], state: dict[str, Any]) -> list[Message] | None:
        raise NotImplementedError(f"{type(self).__name__} must implement respond(messages, state)")

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        rollout.state.setdefault("task", rollout.task)
        await self.setup(rollout.task, rollout.state)
        for turn in range(self.max_turns):
            msg = await rollout.generate()
            rollout.messages.append(msg)
            if turn == self.max_turns - 1:
                rollout.state["max_turns_reached"] = True
                break
            reply = await self.respond(rollout.messages, rollout.state)
            if reply is None:
                break
            if isinstance(reply, dict):
                reply = [reply]
            rollout.messages.extend(reply)


class UserSim(MultiTurn):
    """A simulated user: another model plays a persona and answers the assistant each turn.

    ``model`` names the user model (served by the same endpoint unless ``base_url`` is given).
    The user model ends the conversation by writing ``stop_token`` (default ``[DONE]``).
    """

    def __init__(
        self,
        persona: str,
        model: str | None = None,
        max_turns: int = 6,
        system_prompt: str | None = None,
        base_url: str | None = None,
        stop_token: str = "[DONE]",
    ) -> None:
        super().__init__(max_turns=max_turns, system_prompt=system_prompt)
        self.persona, self.user_model, self.user_base_url, self.stop_token = persona, model, base_url, stop_token

    async def respond(self, messages: list[Message], state: dict[str, Any]) -> list[Message] | None:
        rollout: Rollout = state["_rollout"]
        # The simulated user sees the conversation with roles flipped.
        flipped: list[Message] = [{"role": "system", "content": (
            f"You are a user talking to an assistant. Persona: {self.persona}\n"
            f"Reply as the user, briefly. When your need is met, reply with {self.stop_token}.")}]
        for m in messages:
            if m.get("role") == "system":
                continue
            role = "assistant" if m.get("role") == "user" else "user"
            flipped.append({"role": role, "content": m.get("content") or ""})
        resp = await rollout.client.chat(
            base_url=self.user_base_url or rollout.base_url, model=self.user_model or rollout.model,
            messages=flipped, tools=None, params={k: v for k, v in rollout.params.items() if k != "logprobs"},
        )
        text = (resp.message.get("content") or "").strip()
        if not text or self.stop_token in text:
            return None
        return [{"role": "user", "content": text}]

    async def run(self, rollout: Rollout) -> None:
        rollout.state["_rollout"] = rollout
        try:
            await super().run(rollout)
        finally:
            rollout.state.pop("_rollout", None)
