"""OpenEnv environments (meta-pytorch/OpenEnv, openenv-core) as Workbench environments: the
``workbench.env_formats`` plugin ``openenv``.

An OpenEnv environment is a server with ``reset``/``step``/``state`` (``protocol``). What names one is in
``specs``; the servers Workbench starts for it in ``servers``; how a model plays it in ``harness``
(one session per rollout) and ``actions`` (the action schema -> a tool or the assistant's text). The
environment arguments (``-a``) are the reset's arguments, but three Workbench reads itself: ``episodes``
(how many tasks, default 100: task K resets with seed K), ``max_turns`` (model turns per episode, default
30) and ``system_prompt``. The reward is the episode's return: the sum of its step rewards.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any

from workbench.authoring.env_files import content_hash, read_env_files
from workbench.authoring.environment import Environment
from workbench.authoring.rubric import Rubric
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError
from workbench.formats.openenv import specs
from workbench.formats.openenv.actions import ActionMap
from workbench.formats.openenv.harness import OpenEnvHarness, episode_done, episode_return, episode_steps
from workbench.formats.openenv.protocol import read_info
from workbench.formats.openenv.servers import DockerLauncher, LocalLauncher, Servers, framework_python
from workbench.records.task import Task

DEFAULT_EPISODES = 100
DEFAULT_MAX_TURNS = 30
#: The environment arguments Workbench reads itself; the others go to the environment's reset.
OWN_ARGS = ("episodes", "max_turns", "system_prompt")

#: The servers of each environment named in this process, kept across loads (a reload starts none).
_servers: dict[str, Servers] = {}
_servers_lock = threading.Lock()


def _positive(env_args: dict[str, Any], key: str, default: int) -> int:
    value = env_args.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EnvLoadError(f"the OpenEnv environment argument {key} must be a whole number of at least 1, got {value!r}")
    return value


def tasks(name: str, episodes: int) -> TaskSet:
    def episodes_() -> list[Task]:
        return [Task(prompt=f"an episode of {name} (reset with seed {i}; the first observation is the prompt)",
                     info={"seed": i}, id=f"seed-{i}") for i in range(episodes)]

    return TaskSet(episodes_, name=name)


def servers_for(where: Path | str) -> tuple[Servers, str]:
    """The servers of the environment ``where`` names, and how it is called in errors. A folder's servers
    are those of its current files: an edited folder (a reload) is served anew."""
    key = str(where)
    if isinstance(where, Path):
        key += "#" + content_hash(read_env_files(where))
    with _servers_lock:
        found = _servers.get(key)
    if found is not None:
        return found, key
    if isinstance(where, Path):
        folder = specs.read_folder(where)
        python = framework_python((specs.OPENENV_CORE, *folder.requirements))
        servers = Servers(launcher=LocalLauncher(python, ("--app-dir", str(folder.root), "--app", folder.app),
                                                 str(where)))
    elif where.startswith(specs.DOCKER_PREFIX):
        servers = Servers(launcher=DockerLauncher(where.removeprefix(specs.DOCKER_PREFIX)))
    elif where.startswith(specs.PACKAGE_PREFIX):
        requirement, dist = specs.package_requirement(where)
        python = framework_python((specs.OPENENV_CORE, requirement))
        servers = Servers(launcher=LocalLauncher(python, ("--dist", dist), key))
    else:
        servers = Servers(url=where)
    with _servers_lock:
        return _servers.setdefault(key, servers), str(where)


class OpenEnvFormat:
    name = "openenv"

    def claims(self, spec: str) -> Path | str | None:
        return specs.claims(spec)

    def env_name(self, where: Path | str) -> str:
        return specs.env_name(where)

    def load(self, where: Path | str, env_args: dict[str, Any]) -> Environment:
        episodes = _positive(env_args, "episodes", DEFAULT_EPISODES)
        max_turns = _positive(env_args, "max_turns", DEFAULT_MAX_TURNS)
        system_prompt = env_args.get("system_prompt")
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise EnvLoadError("the OpenEnv environment argument system_prompt must be a text")
        servers, label = servers_for(where)
        info = read_info(servers.first_url())
        name = self.env_name(where)
        actions = ActionMap(info.action_schema, info.name or name, info.description)
        reset_args = {k: v for k, v in env_args.items() if k not in OWN_ARGS}
        rubric = Rubric()
        rubric.reward(episode_return, name="openenv_return")
        rubric.metric(episode_done, name="openenv_done")
        rubric.metric(episode_steps, name="openenv_steps")
        harness = OpenEnvHarness(servers, actions, reset_args, max_turns, system_prompt, label)
        harness.published = info.digest
        return Environment(name=name, tasks=tasks(name, episodes), harness=harness, rubric=rubric,
                           description=info.description)

    def version(self, where: Path | str, env: Environment) -> str:
        """A URL, package or image is versioned by what names it and what its server publishes (``/schema``
        and ``/metadata``): a server that changes its action schema behind the same URL is a new version. A
        folder's server is made from its files, which version it as any folder (an empty text)."""
        if isinstance(where, Path):
            return ""
        published = getattr(env.harness, "published", "")
        return hashlib.sha256(f"{where}\n{published}".encode()).hexdigest()[:12]


FORMAT = OpenEnvFormat()

__all__ = ["FORMAT", "OpenEnvFormat"]
