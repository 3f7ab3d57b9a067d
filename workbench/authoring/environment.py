"""The Environment: a task set, a harness, a runtime, a rubric and sampling settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.authoring.harness import Harness
from workbench.authoring.rubric import Rubric
from workbench.authoring.runtimes import Local
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError


@dataclass(slots=True)
class Sampling:
    """Sampling settings sent with every model call of the environment."""

    max_tokens: int = 512
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] | None = None
    seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise EnvLoadError("Sampling(max_tokens=...) must be at least 1")
        if not 0.0 <= self.temperature <= 5.0:
            raise EnvLoadError("Sampling(temperature=...) must be between 0 and 5")

    def to_params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.top_p != 1.0:
            p["top_p"] = self.top_p
        if self.stop:
            p["stop"] = list(self.stop)
        if self.seed is not None:
            p["seed"] = self.seed
        p.update(self.extra)
        return p


@dataclass(slots=True)
class Environment:
    name: str
    tasks: TaskSet
    harness: Harness
    rubric: Rubric = field(default_factory=Rubric)
    sampling: Sampling = field(default_factory=Sampling)
    runtime: Any = field(default_factory=Local)
    description: str = ""
    #: filled in by the loader: where the environment came from and its version hash
    source: str = ""
    version: str = ""
    #: filled in by the loader for an environment of another framework, e.g. ``"verifiers 0.3.1"``
    adapter: str = ""
    #: filled in by the loader: the format the environment is written in (``workbench``, ``verifiers legacy``,
    #: ``verifiers v1``, ``harbor``, ``openenv``, ``openai-eval``: a module's ``DIALECT`` names its own)
    dialect: str = "workbench"
    #: filled in by the loader: the override in effect (``workbench.authoring.overrides.Override``), or None
    override: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise EnvLoadError("Environment(name=...) must be a non-empty string")
        if not isinstance(self.tasks, TaskSet):
            raise EnvLoadError(f"Environment {self.name!r}: tasks must be a wb.TaskSet, not {type(self.tasks).__name__}")
        if not isinstance(self.harness, Harness):
            raise EnvLoadError(
                f"Environment {self.name!r}: harness must be a wb harness (SingleTurn, ToolLoop, MultiTurn, ...)"
            )
        if not isinstance(self.rubric, Rubric):
            raise EnvLoadError(f"Environment {self.name!r}: rubric must be a wb.Rubric")
        if not isinstance(self.sampling, Sampling):
            raise EnvLoadError(f"Environment {self.name!r}: sampling must be a wb.Sampling")

    @property
    def folder(self) -> Path | None:
        """The folder the environment's files live in (its package, or its module's folder); None when
        it was not loaded from a path that exists."""
        src = Path(self.source) if self.source else None
        if src is None or not src.exists():
            return None
        return src if src.is_dir() else src.parent


def needs_sandbox(env: Environment) -> bool:
    """Whether rollouts of ``env`` need a sandbox: a tool or scoring function declares ``sandbox``
    (or ``sandboxes``), or the harness says so. Tasks with ``sandbox`` needs get one regardless."""
    if getattr(env.harness, "needs_sandbox", False):
        return True
    for tool in getattr(env.harness, "tools", ()) or ():
        if "sandbox" in getattr(tool, "injected", ()):
            return True
    return any("sandbox" in f.args or "sandboxes" in f.args for f in env.rubric.functions)
