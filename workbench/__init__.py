"""Workbench: author, debug, evaluate and train LLM reinforcement-learning environments.

The public authoring API (see DESIGN.md)::

    import workbench as wb
    env = wb.Environment(name=..., tasks=wb.TaskSet.from_records(rows), harness=wb.SingleTurn(),
                         rubric=rubric, sampling=wb.Sampling(max_tokens=256))
"""

from .environment import Environment, Local, Sampling
from .errors import EnvLoadError, RubricError, WorkbenchError
from .harness import Harness, MultiTurn, Program, SingleTurn, ToolLoop, UserSim
from .rollout import Rollout, RolloutFailed
from .rubric import Rubric
from .sandbox import Docker, ExecResult, Limits, ModalSandbox, Sandbox, SandboxError
from .tasks import Task, TaskSet
from .tools import Tool

__version__ = "0.1.0"

__all__ = [
    "Docker", "Environment", "EnvLoadError", "ExecResult", "Harness", "Limits", "Local", "ModalSandbox", "MultiTurn",
    "Program", "Rollout", "RolloutFailed", "Rubric", "RubricError", "Sampling", "Sandbox", "SandboxError",
    "SingleTurn", "Task", "TaskSet", "Tool", "ToolLoop", "UserSim", "WorkbenchError", "__version__",
]
