"""Workbench: author, debug, evaluate and train LLM reinforcement-learning environments.

The public authoring API (see DESIGN.md)::

    import workbench as wb
    env = wb.Environment(name=..., tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                         rubric=rubric, sampling=wb.Sampling(max_tokens=256))

The main jobs, as the commands of the same name run them (docs/python_api.md)::

    summary = wb.eval("arithmetic", model="gpt-4o-mini", n=20)   # what `workbench eval --json` prints
    table = wb.compare([run_a, run_b])                          # what `workbench compare --json` prints
"""

from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import Harness, MultiTurn, Program, SingleTurn, ToolLoop, UserSim
from workbench.authoring.human import Human
from workbench.authoring.mcp_tools import MCPToolError, MCPTools
from workbench.authoring.probes import Probe, ProbeTurn
from workbench.authoring.rubric import Rubric
from workbench.authoring.runtimes import Docker, Local, ModalSandbox, Runtime
from workbench.authoring.sandbox import ExecResult, Limits, Sandbox, SandboxError
from workbench.authoring.tasks import TaskSet
from workbench.authoring.tools import Tool
from workbench.errors import EnvLoadError, RubricError, WorkbenchError
from workbench.records.rollout import Rollout, RolloutFailed
from workbench.records.task import Task

# Public as wb.eval and wb.compare, left out of __all__ so that a star import keeps the builtin eval.
from workbench.usecases.api import compare as compare
from workbench.usecases.api import eval as eval

__version__ = "0.1.0"

__all__ = [
    "Docker", "Environment", "EnvLoadError", "ExecResult", "Harness", "Human", "Limits", "Local", "MCPToolError", "MCPTools",
    "ModalSandbox", "MultiTurn", "Probe", "ProbeTurn",
    "Program", "Rollout", "Runtime", "RolloutFailed", "Rubric", "RubricError", "Sampling", "Sandbox", "SandboxError",
    "SingleTurn", "Task", "TaskSet", "Tool", "ToolLoop", "UserSim", "WorkbenchError", "__version__",
]
