"""Toolsets from MCP servers (DESIGN.md "Toolsets from MCP servers").

``wb.MCPTools`` declares an MCP server whose tools the model may call; it sits in
``ToolLoop(tools=[...])`` (and ``UserSim(tools=[...])``) beside plain functions::

    crm = wb.MCPTools(command=[sys.executable, "crm_server.py"], per_rollout=True, name="crm")
    harness = wb.ToolLoop(tools=[crm, lookup_weather])

    @rubric.reward
    async def refunded(mcp, info) -> float:          # the same server session the rollout used
        order = await mcp.call("get_order", {"order_id": info["order_id"]})
        return float(order["status"] == "refunded")

The declaration is all this module holds; the sessions (the official ``mcp`` SDK's client over stdio,
streamable HTTP, or a socket into the rollout's sandbox) live in ``workbench.rollouts.mcp_sessions``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from workbench.errors import EnvLoadError, WorkbenchError

T = TypeVar("T")


class MCPToolError(WorkbenchError):
    """An MCP tool answered with an error (``isError``); raised by ``mcp.call`` in rewards."""


@dataclass(eq=False)
class MCPTools:
    """The tools of one MCP server, given to the model with the server's own JSON schemas.

    ``command``: the argv of a stdio server (``[sys.executable, "server.py"]``); ``url``: a streamable HTTP
    server. ``env`` is added to the server's clean environment, ``cwd`` is its working directory (relative
    to the environment's folder on the host; to the rollout's workdir in a sandbox).
    ``per_rollout``: each rollout gets its own server, started before the rollout and stopped after it is
    scored, so its state is that rollout's alone (stdio only). Such a server runs inside the rollout's
    sandbox (the environment's runtime) unless ``sandboxed=False``, so a stateful server cannot touch the
    host; an unsandboxed one is started ahead on the host, ``warm`` servers at a time (default: up to 8,
    never more than the run's concurrency), and never reused. Without ``per_rollout`` one server serves
    the whole run.
    ``name`` names the toolset in traces and errors (default: the script's or command's name);
    ``include`` keeps only the listed tools. ``startup_timeout`` bounds starting and ``initialize``;
    ``call_timeout`` one tool call (a call past it is a tool error the model sees).
    """

    command: Sequence[str] | None = None
    url: str | None = None
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    per_rollout: bool = False
    name: str | None = None
    sandboxed: bool = True
    warm: int | None = None
    include: Sequence[str] | None = None
    headers: Mapping[str, str] | None = None
    startup_timeout: float = 20.0
    call_timeout: float = 60.0

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise EnvLoadError("wb.MCPTools takes command=[...] (a stdio server) or url=... (streamable HTTP), "
                               "exactly one of them")
        if self.command is not None:
            if isinstance(self.command, str) or not self.command or not all(
                    isinstance(a, str | os.PathLike) and str(a) for a in self.command):
                raise EnvLoadError("wb.MCPTools(command=...) takes a non-empty list of strings, e.g. "
                                   "[sys.executable, 'server.py']")
            self.command = [str(a) for a in self.command]
        if self.url is not None and not (isinstance(self.url, str) and self.url.startswith(("http://", "https://"))):
            raise EnvLoadError(f"wb.MCPTools(url={self.url!r}): use an http:// or https:// URL of a streamable "
                               "HTTP MCP server")
        if self.per_rollout and self.command is None:
            raise EnvLoadError("wb.MCPTools(per_rollout=True) starts a server per rollout, so it needs "
                               "command=[...]; a url= server is one shared server")
        for key in ("startup_timeout", "call_timeout"):
            v = getattr(self, key)
            if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
                raise EnvLoadError(f"wb.MCPTools({key}={v!r}) must be a positive number of seconds")
        if self.warm is not None and (not isinstance(self.warm, int) or isinstance(self.warm, bool) or self.warm < 0):
            raise EnvLoadError(f"wb.MCPTools(warm={self.warm!r}) must be a whole number >= 0")
        if self.include is not None:
            if isinstance(self.include, str) or not all(isinstance(t, str) and t for t in self.include):
                raise EnvLoadError("wb.MCPTools(include=...) takes a list of tool names")
            self.include = list(self.include)
        if self.env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise EnvLoadError("wb.MCPTools(env=...) maps variable names to string values")
        self.env = dict(self.env or {})
        self.headers = dict(self.headers or {})
        if self.name is not None and not (isinstance(self.name, str) and self.name.strip()):
            raise EnvLoadError("wb.MCPTools(name=...) must be a non-empty string")

    @property
    def label(self) -> str:
        """How traces and errors name this toolset."""
        if self.name:
            return self.name
        if self.url is not None:
            return self.url
        assert self.command is not None
        for a in self.command[1:]:
            if a.endswith(".py"):
                return Path(a).stem
        return Path(self.command[0]).name

    @property
    def in_sandbox(self) -> bool:
        """Whether each rollout's server runs inside that rollout's sandbox."""
        return self.per_rollout and self.sandboxed

    def host_mounts(self) -> list[str]:
        """What a sandbox must mount (read-only) to run the server: the host paths its command names."""
        from workbench.records.program_mounts import program_mounts

        if not self.in_sandbox or self.command is None:
            return []
        return program_mounts(list(self.command), [])

    def describe(self) -> str:
        scope = "per rollout" + ("" if self.sandboxed else ", on the host") if self.per_rollout else "shared"
        return f"MCP {self.label} ({scope})"


def split_tools(tools: Sequence[T | MCPTools]) -> tuple[list[T], list[MCPTools]]:
    """Plain tools and MCP toolsets, in the order given."""
    plain = [t for t in tools if not isinstance(t, MCPTools)]
    sets = [t for t in tools if isinstance(t, MCPTools)]
    return plain, sets
