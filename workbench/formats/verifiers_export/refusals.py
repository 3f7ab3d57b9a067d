"""What a verifiers 0.4 package cannot carry of a Workbench environment, named in one line.

An exported package runs the environment's own code under verifiers with a small stand-in for
Workbench's authoring API: the task set, the harnesses ``SingleTurn``, ``ToolLoop`` (plain Python tools)
and ``MultiTurn`` subclasses, and the rubric. Anything that needs Workbench's machinery beyond that
(a sandbox, MCP servers, a simulated user's second model, an agent program, a person, the token
trace) has no counterpart there, and the export refuses the environment by name.
"""

from __future__ import annotations

from workbench.authoring.environment import Environment, needs_sandbox
from workbench.authoring.harness import MultiTurn, Program, SingleTurn, ToolLoop, UserSim
from workbench.authoring.human import Human
from workbench.authoring.runtimes import Local
from workbench.errors import WorkbenchError

#: Arguments a scoring function may ask for that an exported package cannot give.
UNCARRIED_ARGS = {
    "trace": "Workbench's token trace",
    "traces": "Workbench's token traces",
    "sandbox": "a sandbox",
    "sandboxes": "sandboxes",
    "mcp": "MCP sessions",
}


class ExportRefused(WorkbenchError):  # noqa: N818 - reads as what happened, like RolloutFailed
    """The environment uses something a verifiers package cannot carry; nothing was written."""


def refusal(env: Environment) -> str | None:
    """Why ``env`` cannot be exported to verifiers 0.4 (one line naming what does not translate), or None."""
    name = env.name
    if env.dialect != "workbench" or env.adapter:
        return (f"{name} is a {env.adapter or env.dialect} environment, not one written against Workbench's "
                "authoring API; only those export")
    h = env.harness
    if isinstance(h, UserSim):
        return f"{name} uses wb.UserSim: a simulated user is a second model, and verifiers 0.4 has no such harness"
    if isinstance(h, Program):
        return f"{name} uses wb.Program: an agent program runs in a sandbox, which an exported package does not carry"
    if isinstance(h, Human):
        return f"{name} uses wb.Human: a person cannot be the policy of a verifiers run"
    if not isinstance(h, SingleTurn | ToolLoop | MultiTurn):
        return (f"{name} uses its own harness {type(h).__name__}: only wb.SingleTurn, wb.ToolLoop and wb.MultiTurn "
                "subclasses export")
    if isinstance(h, ToolLoop) and h.toolsets:
        labels = ", ".join(s.label for s in h.toolsets)
        return f"{name} uses MCP toolsets ({labels}): MCP servers are not carried by an exported package"
    if isinstance(h, ToolLoop):
        injected = sorted({arg for t in h.tools for arg in t.injected if arg in ("sandbox", "mcp")})
        if injected:
            return f"{name} has tools that take {', '.join(injected)}: sandbox-needing tools do not translate"
    for f in env.rubric.functions:
        for arg in f.args:
            if arg in UNCARRIED_ARGS:
                return (f"{name}'s {'group reward' if f.kind == 'group' else f.kind} {f.name!r} asks for {arg!r}: "
                        f"{UNCARRIED_ARGS[arg]} has no counterpart in verifiers 0.4")
    if needs_sandbox(env):
        return f"{name} needs a sandbox for its rollouts, which an exported package does not carry"
    if not isinstance(env.runtime, Local):
        spec = getattr(env.runtime, "spec", type(env.runtime).__name__)
        return f"{name} runs on the {spec} runtime: only environments on wb.Local() export"
    if not env.source:
        return f"{name} has no source file to carry (it was not loaded from a file or package)"
    return None


def task_refusal(name: str, task_id: str, has_sandbox: bool) -> str | None:
    """Why one task of ``name`` cannot be exported, or None."""
    if has_sandbox:
        return f"{name}'s task {task_id} declares sandbox needs, which an exported package does not carry"
    return None
