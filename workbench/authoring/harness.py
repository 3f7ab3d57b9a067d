"""Harnesses: how the model acts on a task. The task set never depends on the harness."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from workbench.authoring.mcp_tools import MCPTools
from workbench.authoring.toolbox import Toolbox
from workbench.authoring.tools import Tool
from workbench.errors import EnvLoadError
from workbench.records.rollout import Rollout
from workbench.records.task import Message, Task


class Harness:
    """Base class. A harness fills ``rollout.messages`` by calling ``rollout.generate``.

    A harness that talks to the model through its own OpenAI client (``rollout.base_url``) sets
    ``needs_proxy = True``: the run then starts the interception proxy and gives every rollout
    its own recorded base URL.
    """

    system_prompt: str | None = None
    max_turns: int = 1
    needs_proxy: bool = False

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
    """The model calls tools until it answers without a tool call.

    ``tools`` holds plain (async) Python functions and ``wb.MCPTools`` toolsets. A function's signature
    and docstring become its JSON schema; parameters named ``sandbox``, ``state``, ``task``, ``info`` or
    ``mcp`` are injected and never shown to the model. An MCP server's tools keep the server's own
    schemas. Parallel tool calls run concurrently; a tool that raises (or an MCP tool that returns an
    error) gives the model the error as the tool message. A tool result longer than ``max_tool_output``
    characters is cut to that length (the model is told, and a tool error is recorded with the full
    size), so one tool cannot flood the context or the store.
    """

    def __init__(
        self,
        tools: Sequence[Callable[..., Any] | Tool | MCPTools],
        max_turns: int = 10,
        system_prompt: str | None = None,
        parallel: bool = True,
        max_tool_output: int = 256_000,
    ) -> None:
        self.toolbox = Toolbox(tools, "ToolLoop", max_tool_output=max_tool_output, parallel=parallel)
        self.toolsets = self.toolbox.toolsets
        if max_turns < 1:
            raise EnvLoadError("ToolLoop(max_turns=...) must be at least 1")
        self.max_turns = max_turns
        self.system_prompt = system_prompt

    @property
    def tools(self) -> list[Tool]:
        """The plain tools (MCP toolsets are in ``toolsets``)."""
        return self.toolbox.tools

    @property
    def by_name(self) -> dict[str, Tool]:
        return self.toolbox.by_name

    @property
    def schemas(self) -> list[dict[str, Any]]:
        return self.toolbox.schemas

    @property
    def needs_sandbox(self) -> bool:
        return self.toolbox.needs_sandbox

    def host_mounts(self, kind: str = "local") -> list[str]:
        return self.toolbox.host_mounts()

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        if not await self.toolbox.act(rollout, self.max_turns):
            rollout.state["max_turns_reached"] = True

    def describe(self) -> str:
        return f"ToolLoop({self.toolbox.describe()})"


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

    async def model_turn(self, rollout: Rollout) -> None:
        """The model's move: one assistant message appended to the conversation."""
        rollout.messages.append(await rollout.generate())

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        rollout.state.setdefault("task", rollout.task)
        await self.setup(rollout.task, rollout.state)
        for turn in range(self.max_turns):
            await self.model_turn(rollout)
            # The environment always judges the model's move, the last one included.
            reply = await self.respond(rollout.messages, rollout.state)
            if reply is None:
                break
            if turn == self.max_turns - 1:
                # Out of turns: the episode ends on the model's message; the final feedback is kept in
                # state for rewards and the transcript, not sent to a model that will not answer it.
                rollout.state["max_turns_reached"] = True
                rollout.state["final_feedback"] = [reply] if isinstance(reply, dict) else list(reply)
                break
            if isinstance(reply, dict):
                reply = [reply]
            rollout.messages.extend(reply)


class UserSim(MultiTurn):
    """A simulated user: another model plays a persona and answers the assistant each turn.

    The task's prompt is the user's first message. ``persona`` is a text, or a function of the task
    that returns one (a persona per task). ``model`` names the user model (served by the same endpoint
    unless ``base_url`` is given). The user model ends the conversation by writing ``stop_token``
    (default ``[DONE]``). With ``tools`` (plain functions and ``wb.MCPTools``, as in ``ToolLoop``) each
    assistant turn may call tools, up to ``max_tool_calls`` rounds, before it answers the user; the
    simulated user sees only what the assistant says, never its tool calls.
    """

    def __init__(
        self,
        persona: str | Callable[[Task], str],
        model: str | None = None,
        max_turns: int = 6,
        system_prompt: str | None = None,
        base_url: str | None = None,
        stop_token: str = "[DONE]",
        tools: Sequence[Callable[..., Any] | Tool | MCPTools] = (),
        max_tool_calls: int = 8,
        max_tool_output: int = 256_000,
    ) -> None:
        super().__init__(max_turns=max_turns, system_prompt=system_prompt)
        if not (isinstance(persona, str) or callable(persona)):
            raise EnvLoadError("wb.UserSim(persona=...) takes a text or a function of the task that returns one")
        if not isinstance(max_tool_calls, int) or max_tool_calls < 1:
            raise EnvLoadError("wb.UserSim(max_tool_calls=...) must be at least 1")
        self.persona, self.user_model, self.user_base_url, self.stop_token = persona, model, base_url, stop_token
        self.toolbox = Toolbox(tools, "UserSim", max_tool_output=max_tool_output) if tools else None
        self.toolsets = self.toolbox.toolsets if self.toolbox else []
        self.max_tool_calls = max_tool_calls

    @property
    def needs_sandbox(self) -> bool:
        return self.toolbox is not None and self.toolbox.needs_sandbox

    def host_mounts(self, kind: str = "local") -> list[str]:
        return self.toolbox.host_mounts() if self.toolbox else []

    def persona_for(self, task: Task) -> str:
        return self.persona(task) if callable(self.persona) else self.persona

    async def model_turn(self, rollout: Rollout) -> None:
        if self.toolbox is None:
            return await super().model_turn(rollout)
        if not await self.toolbox.act(rollout, self.max_tool_calls):
            rollout.state["max_tool_calls_reached"] = True

    async def respond(self, messages: list[Message], state: dict[str, Any]) -> list[Message] | None:
        rollout: Rollout = state["_rollout"]
        # The simulated user sees what was said, with roles flipped: no tool calls, no tool results.
        flipped: list[Message] = [{"role": "system", "content": (
            f"You are a user talking to an assistant. Persona: {self.persona_for(rollout.task)}\n"
            f"Reply as the user, briefly. When your need is met, reply with {self.stop_token}.")}]
        for m in messages:
            role = m.get("role")
            if role in ("system", "tool") or (role == "assistant" and not m.get("content")):
                continue
            flipped.append({"role": "assistant" if role == "user" else "user", "content": m.get("content") or ""})
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

    def describe(self) -> str:
        return f"UserSim({self.toolbox.describe()})" if self.toolbox else "UserSim"


_OUTPUT_CAP = 64 * 1024
#: The API key a program sees (for both APIs): the interception proxy holds the real one.
PROXY_KEY = "workbench-proxy"
#: The interpreter that runs the bridge inside a sandbox (every runtime's image has one).
BRIDGE_PYTHON = "python3"


class Program(Harness):
    """An external agent program (a CLI agent) run once per rollout, inside the rollout's sandbox.

    The program runs in the environment's runtime (``wb.Local()`` by default): its own PID namespace
    (the host's processes, their environments included, are invisible), no network but the interception
    proxy, reached through the pool's bridge. It sees the rollout's proxy URL for both APIs an agent SDK
    speaks, ``OPENAI_BASE_URL`` (OpenAI) and ``ANTHROPIC_BASE_URL`` (Anthropic), and their keys
    ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY`` (placeholders: the proxy holds the real key), plus the
    task: the prompt text on stdin and in ``WORKBENCH_PROMPT``, the whole task as JSON in
    ``WORKBENCH_TASK``; ``{prompt}`` in ``argv`` is replaced by the prompt text. Only ``env`` is added to
    the sandbox's clean environment. A non-zero exit fails the rollout.

    Every model call it makes is recorded in the rollout's trace, with the tools that call sent. The
    rollout's messages are the whole conversation the program held: a call whose messages extend an
    earlier call's messages plus its reply continues that conversation, so a usual agent loop's messages
    are its last call's messages and reply. A program that holds several conversations (sub-agents, a
    compacted history, attempts from scratch) has them all, one after the other, in the order each
    last spoke (the last call's conversation last, so its reply is the completion); then
    ``state["conversations"]`` holds how many messages each one has, in that order.

    On ``wb.Local()`` a bare command (``python3``) is the sandbox's own (the system's); the program
    itself and what it needs to run (its executable as given and as its symlinks resolve, with its
    package folder: ``node_modules`` or virtual environment; the interpreter of its ``#!`` line; the
    script an interpreter runs) and ``binds`` are mounted read-only, at the same paths (under ``/host``
    where a path lies in the sandbox's own ``/work`` or ``/tmp``). Other arguments are passed as they
    are: a host folder is seen only when bound. On ``wb.Docker()`` ``argv`` names paths in the image.
    ``cwd`` is relative to the sandbox's workdir; ``timeout`` bounds the program (the rollout's own
    timeout bounds it too).
    """

    needs_proxy = True
    needs_sandbox = True

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None,
                 system_prompt: str | None = None, binds: Sequence[str] = (), timeout: float = 3600.0) -> None:
        if isinstance(argv, str) or not argv:
            raise EnvLoadError("wb.Program(argv) takes a non-empty list of strings, e.g. ['python', 'agent.py']")
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise EnvLoadError("wb.Program(timeout=...) must be a positive number of seconds")
        self.argv = [str(a) for a in argv]
        self.env = dict(env or {})
        self.cwd = cwd
        self.system_prompt = system_prompt
        self.binds = [str(b) for b in binds]
        self.timeout = float(timeout)
        self.user: str | None = None  # who the program runs as in the sandbox (None: the sandbox's user)

    def describe(self) -> str:
        return f"Program({' '.join(self.argv)[:60]})"

    def host_mounts(self, kind: str = "local") -> list[str]:
        """What a local sandbox mounts read-only for the program: ``HOST`` or ``HOST:SANDBOX`` entries
        (on Docker the command line names paths of the image: nothing)."""
        from workbench.records.program_mounts import program_mounts

        return program_mounts(self.argv, self.binds) if kind == "local" else []

    async def run(self, rollout: Rollout) -> None:
        from workbench.records.conversations import Conversations
        from workbench.records.program_mounts import sandbox_argv
        from workbench.records.rollout import RolloutFailed, url_key

        self.start(rollout)
        sb = rollout.sandbox
        if sb is None:
            raise RolloutFailed("harness", self.argv[0], "wb.Program runs in the rollout's sandbox, and the run "
                                                         "opened none (its runtime cannot open sandboxes)")
        task = rollout.task
        prompt = task.prompt if isinstance(task.prompt, str) else "\n".join(
            str(m.get("content") or "") for m in task.prompt if m.get("role") == "user")
        env = dict(self.env)
        env.update({"OPENAI_API_KEY": PROXY_KEY, "ANTHROPIC_API_KEY": PROXY_KEY, "WORKBENCH_PROMPT": prompt,
                    "WORKBENCH_MODEL": rollout.model,
                    "WORKBENCH_TASK": orjson.dumps({"id": task.id, "prompt": task.prompt, "info": task.info},
                                                   default=str).decode()})
        if sb.bridge_path is None:
            raise RolloutFailed("harness", self.argv[0], f"the {sb.kind} runtime has no bridge to the interception "
                                                         "proxy; run wb.Program on wb.Local() or wb.Docker()")
        argv = [a.replace("{prompt}", prompt) for a in sandbox_argv(self.argv, sb.kind if sb.isolated else "",
                                                                       self.binds)]
        where = sb.bridge_path
        bridge = [BRIDGE_PYTHON, f"{where}/bridge.py", f"{where}/proxy.sock", url_key(rollout.base_url), "--"]
        conversations = rollout.conversations = Conversations()
        try:
            as_user = {"user": self.user} if self.user is not None else {}
            r = await sb.exec([*bridge, *argv], timeout=self.timeout, cwd=self.cwd, env=env, stdin=prompt,
                              **as_user)
        finally:  # the conversation so far is kept when the rollout's own timeout ends the program too
            if len(conversations):
                rollout.messages = conversations.messages()
                if len(conversations) > 1:
                    rollout.state["conversations"] = conversations.lengths()
        rollout.state["exit_code"] = r.exit_code
        rollout.state["stdout"] = r.stdout[:_OUTPUT_CAP]
        rollout.state["stderr"] = r.stderr[-_OUTPUT_CAP:]
        if rollout.state["stdout"].strip() and (not rollout.calls or rollout.state["stdout"].strip() !=
                                                 (rollout.completion or "").strip()):
            rollout.state["final_output"] = rollout.state["stdout"].strip()
        if r.timed_out:
            raise RolloutFailed("timeout", self.argv[0], f"program ran past its {self.timeout:g}s timeout")
        if r.exit_code != 0:
            tail = rollout.state["stderr"].strip().splitlines()[-1:] or [""]
            raise RolloutFailed("harness", self.argv[0], f"program exited with {r.exit_code}: {tail[0][:300]}")
