"""The tools a harness offers the model: plain functions and MCP toolsets, called the same way.

``ToolLoop`` and ``UserSim(tools=...)`` hold a :class:`Toolbox`. Plain tools are known when the
environment loads; an MCP toolset's tools are listed when the run starts, and each rollout calls them
through its own sessions (``rollout.mcp``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from workbench.authoring.mcp_tools import MCPTools, split_tools
from workbench.authoring.rubric import USER_CODE_ERRORS
from workbench.authoring.tools import Tool
from workbench.errors import EnvLoadError
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.records.task import Message


class Toolbox:
    def __init__(self, tools: Sequence[Callable[..., Any] | Tool | MCPTools], owner: str,
                 max_tool_output: int = 256_000, parallel: bool = True) -> None:
        if isinstance(tools, str | bytes) or not isinstance(tools, Sequence):
            raise EnvLoadError(f"{owner}(tools=...) takes a list of functions or wb.MCPTools")
        plain: list[Callable[..., Any] | Tool]
        plain, self.toolsets = split_tools(list(tools))
        self.tools = [Tool.from_function(t) for t in plain]
        if not isinstance(max_tool_output, int) or isinstance(max_tool_output, bool) or max_tool_output < 1:
            raise EnvLoadError(f"{owner}(max_tool_output=...) must be a whole number of characters, at least 1")
        self.max_tool_output = max_tool_output
        self.parallel = parallel
        names = [t.name for t in self.tools]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise EnvLoadError(f"{owner} has two tools named {sorted(dupes)[0]!r}")
        labels = [s.label for s in self.toolsets]
        twice = {n for n in labels if labels.count(n) > 1}
        if twice:
            raise EnvLoadError(f"{owner} has two MCP toolsets named {sorted(twice)[0]!r}; pass name=... to tell "
                               "them apart")
        self.by_name = {t.name: t for t in self.tools}
        self.schemas = [t.schema() for t in self.tools]

    def names(self) -> list[str]:
        return list(self.by_name)

    @property
    def needs_sandbox(self) -> bool:
        """A plain tool declares ``sandbox``, or an MCP server runs in each rollout's sandbox."""
        return any("sandbox" in t.injected for t in self.tools) or any(s.in_sandbox for s in self.toolsets)

    def describe(self) -> str:
        """The tools by name, each MCP toolset as ``mcp:LABEL``."""
        return ", ".join([*self.by_name, *(f"mcp:{s.label}" for s in self.toolsets)])

    def schemas_for(self, rollout: Rollout) -> list[dict[str, Any]]:
        if not self.toolsets:
            return self.schemas
        if rollout.mcp is None:
            raise RolloutFailed("harness", "mcp", "this rollout has no MCP sessions: MCP toolsets run only "
                                                  "inside a run (workbench eval, debug, train)")
        return [*self.schemas, *rollout.mcp.schemas]

    def host_mounts(self) -> list[str]:
        return [m for s in self.toolsets for m in s.host_mounts()]

    async def call_all(self, rollout: Rollout, calls: list[dict[str, Any]]) -> list[Message]:
        if self.parallel:
            return list(await asyncio.gather(*(self.call(rollout, c) for c in calls)))
        return [await self.call(rollout, c) for c in calls]

    async def call(self, rollout: Rollout, call: dict[str, Any]) -> Message:
        fn = call.get("function") or {}
        name = fn.get("name", "")
        call_id = call.get("id", "")
        tool = self.by_name.get(name)
        remote = tool is None and rollout.mcp is not None and rollout.mcp.owns(name)
        if tool is None and not remote:
            available = [*self.by_name, *(rollout.mcp.run.owner if rollout.mcp is not None else ())]
            content = f"Error: there is no tool named {name!r}. Available tools: {', '.join(available)}."
            rollout.errors.append(RolloutError("tool", name or "?", f"unknown tool {name!r}"))
            return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
        raw = fn.get("arguments") or "{}"
        try:
            args = orjson.loads(raw) if isinstance(raw, str | bytes) else dict(raw)
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except Exception as e:
            rollout.errors.append(RolloutError("tool", name, f"bad arguments: {e}"))
            return {"role": "tool", "tool_call_id": call_id, "name": name,
                    "content": f"Error: the arguments are not a valid JSON object ({e})."}
        if remote:
            content = await rollout.mcp.call_for_model(name, args)
        else:
            assert tool is not None
            try:
                result = await tool.call(args, {"sandbox": rollout.sandbox, "state": rollout.state, "task": rollout.task,
                                                "info": rollout.task.info, "mcp": rollout.mcp})
                content = result if isinstance(result, str) else orjson.dumps(result, default=str).decode()
            except USER_CODE_ERRORS as e:  # goes back to the model, not up the stack (even sys.exit)
                rollout.errors.append(RolloutError("tool", name, f"{type(e).__name__}: {e}"))
                content = f"Error: {type(e).__name__}: {e}"
        if len(content) > self.max_tool_output:
            size = len(content)
            rollout.errors.append(RolloutError("tool", name, f"output of {size:,} characters cut to the "
                                               f"{self.max_tool_output:,}-character cap (max_tool_output=...)"))
            content = content[: self.max_tool_output] + f"\n[output cut: {size:,} characters, over the cap]"
        return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}

    async def act(self, rollout: Rollout, max_calls: int) -> bool:
        """Model turns with tool calls until the model answers without one (True), or ``max_calls``
        rounds of calls ran out (False). Each message is appended to the conversation."""
        schemas = self.schemas_for(rollout)
        for _ in range(max_calls):
            msg = await rollout.generate(tools=schemas)
            rollout.messages.append(msg)
            calls = msg.get("tool_calls") or []
            if not calls:
                return True
            rollout.messages.extend(await self.call_all(rollout, calls))
        return False
