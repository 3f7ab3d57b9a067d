"""Harbor tasks (Terminal-Bench 2 and the other coding-agent benchmarks in Harbor's task format), read
natively: the ``harbor`` ``workbench.env_formats`` plugin.

``workbench eval PATH`` (``validate``, ``probe``, ...) reads PATH as Harbor's when it is a task folder (a
``task.toml``, not a Python package) or a dataset folder (task folders side by side): one environment whose
task set holds one task per task folder, each in its own container (``runtime``), played by a terminal
agent (``agent``) and scored by its own tests (``verifier``). See docs/formats/harbor.md.

Environment arguments (``-a``): ``max_turns`` (the terminal agent's, default 50), ``agent`` (an agent
program's argv, run with ``wb.Program`` instead of the terminal agent), ``agent_env`` (its variables),
``binds`` (host paths every task's container sees read-only: an agent program's files), ``tasks`` (a list of
task names to keep, for a dataset).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import Harness
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError
from workbench.formats.harbor.agent import ProgramAgent, TerminalAgent
from workbench.formats.harbor.runtime import HarborRuntime
from workbench.formats.harbor.task_dir import HarborTask, is_task_dir, read_task, task_dirs
from workbench.formats.harbor.verifier import ORACLE, make_rubric
from workbench.records.task import Task

_ARGS = ("max_turns", "agent", "agent_env", "binds", "tasks")
#: The model's reply budget per turn: a terminal agent writes commands and files.
MAX_TOKENS = 4096


class HarborFormat:
    """Reads Harbor task folders and dataset folders (``workbench.env_formats``: ``harbor``)."""

    name = "harbor"

    def claims(self, spec: str) -> Path | None:
        p = Path(spec).expanduser()
        if not p.is_dir():
            return None
        if is_task_dir(p):
            return p.resolve()
        if (p / "__init__.py").exists():
            return None
        try:
            return p.resolve() if task_dirs(p) else None
        except OSError:
            return None

    def env_name(self, where: Path | str) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(where).name).strip("-") or "harbor"

    def load(self, where: Path | str, env_args: dict[str, Any]) -> Environment:
        root = Path(where)
        unknown = sorted(set(env_args) - set(_ARGS))
        if unknown:
            raise EnvLoadError(f"the Harbor environment {root.name} takes no argument {unknown[0]!r}; it takes: "
                               f"{', '.join(_ARGS)}")
        skipped: list[str] = []
        tasks = [read_task(root)] if is_task_dir(root) else _read_dataset(root, skipped)
        tasks = _keep(tasks, env_args.get("tasks"), root)
        by_name: dict[str, HarborTask] = {}
        for t in tasks:
            if t.name in by_name:
                raise EnvLoadError(f"Harbor dataset {root}: two tasks are named {t.name!r} ({by_name[t.name].dir.name} "
                                   f"and {t.dir.name})")
            by_name[t.name] = t
        records = [_record(t) for t in tasks]
        return Environment(
            name=self.env_name(root), tasks=TaskSet(lambda: iter(records), name=self.env_name(root)),
            harness=_harness(env_args), rubric=make_rubric(by_name), sampling=Sampling(max_tokens=MAX_TOKENS),
            runtime=HarborRuntime(binds=_binds(env_args.get("binds")), tasks=by_name),
            description=f"Harbor {'task' if len(tasks) == 1 and root == tasks[0].dir else 'dataset'} {root.name}: "
                        f"{len(tasks)} task{'s' if len(tasks) != 1 else ''}, each in its own container"
                        + (f"; {len(skipped)} skipped ({'; '.join(skipped[:3])}{'; ...' if len(skipped) > 3 else ''})"
                           if skipped else ""))


def _read_dataset(root: Path, skipped: list[str]) -> list[HarborTask]:
    """The dataset's tasks; one Workbench cannot read or run is skipped (as Harbor skips a folder that is no
    valid task), said once on stderr, and a dataset left with none is an error naming the first reason."""
    tasks: list[HarborTask] = []
    for d in task_dirs(root):
        try:
            tasks.append(read_task(d))
        except EnvLoadError as e:
            skipped.append(str(e))
    if not tasks:
        raise EnvLoadError(f"Harbor dataset {root} has no task Workbench can run; the first: {skipped[0]}")
    if skipped:
        sys.stderr.write(f"workbench: warning: Harbor dataset {root.name}: {len(skipped)} of "
                         f"{len(tasks) + len(skipped)} tasks skipped; the first: {skipped[0]}\n")
    return tasks


def _record(t: HarborTask) -> Task:
    return Task(id=t.name, prompt=t.instruction, answer=ORACLE if t.solve_script else None, info=t.info())


def _keep(tasks: list[HarborTask], names: Any, root: Path) -> list[HarborTask]:
    if names is None:
        return tasks
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise EnvLoadError("the Harbor argument tasks must be a list of task names")
    have = {t.name for t in tasks}
    missing = [n for n in names if n not in have]
    if missing:
        raise EnvLoadError(f"Harbor dataset {root} has no task named {missing[0]!r}")
    return [t for t in tasks if t.name in set(names)]


def _binds(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(b, str) and b.startswith("/") for b in value):
        raise EnvLoadError('the Harbor argument binds must be a list of absolute host paths ("/opt/agent" or '
                           '"/host/path:/path/inside"), seen read-only in every task\'s container')
    return value


def _harness(env_args: dict[str, Any]) -> Harness:
    argv = env_args.get("agent")
    if argv is not None:
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise EnvLoadError('the Harbor argument agent must be a command line as a list, e.g. ["python3", "/agent.py"]')
        agent_env = env_args.get("agent_env") or {}
        if not isinstance(agent_env, dict) or not all(isinstance(v, str) for v in agent_env.values()):
            raise EnvLoadError("the Harbor argument agent_env must be an object of text values")
        return ProgramAgent(argv, env=agent_env)
    turns = env_args.get("max_turns", 50)
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        raise EnvLoadError("the Harbor argument max_turns must be a whole number, at least 1")
    return TerminalAgent(max_turns=turns)


FORMAT = HarborFormat()

__all__ = ["FORMAT", "HarborFormat"]
