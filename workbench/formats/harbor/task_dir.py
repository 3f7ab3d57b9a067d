"""One Harbor task folder, read: its instruction, its ``task.toml`` and where its environment, tests and
reference solution lie.

A Harbor task is a folder::

    instruction.md        the prompt
    task.toml             metadata, agent and verifier timeouts, environment limits
    environment/Dockerfile  the container the agent works in
    tests/test.sh         run after the agent; writes the reward to /logs/verifier/reward.txt (or reward.json)
    solution/solve.sh     the reference solution (optional)

Everything is read from inside the folder: a file that links outside it refuses the task. What Workbench
does not run (docker-compose environments, several steps, Windows containers, GPUs) is refused by name.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.authoring.env_files import OutsideLinkError, env_file_paths
from workbench.errors import EnvLoadError

CONFIG = "task.toml"
INSTRUCTION = "instruction.md"
#: The compose files Harbor's Docker environment reads; Workbench runs one container per task.
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")
#: Harbor's defaults: the verifier's time limit, and the agent's when ``task.toml`` gives none.
VERIFIER_TIMEOUT_S = 600.0
AGENT_TIMEOUT_S = 1800.0
#: Harbor's default limit on building a task's image.
BUILD_TIMEOUT_S = 600.0
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?")
_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(slots=True)
class HarborTask:
    """A Harbor task, read and checked."""

    name: str
    dir: Path
    instruction: str
    dockerfile: Path | None  # environment/Dockerfile, or None with a prebuilt ``docker_image``
    docker_image: str | None
    test_script: str  # relative to tests/ (test.sh)
    solve_script: str | None  # relative to solution/ (solve.sh), None without a reference solution
    agent_timeout_s: float = AGENT_TIMEOUT_S
    verifier_timeout_s: float = VERIFIER_TIMEOUT_S
    cpus: float = 1.0
    memory_mb: int = 2048
    network: bool | tuple[str, ...] = True
    workdir: str | None = None
    agent_user: str | None = None  # [agent] user: who the agent's commands run as (None: the image's USER)
    verifier_user: str | None = None  # [verifier] user: who tests/test.sh runs as (None: the image's USER)
    build_timeout_s: float = BUILD_TIMEOUT_S
    storage_mb: int | None = None  # the container's writable layer, where the Docker engine can limit it
    verifier_env: dict[str, str] = field(default_factory=dict)
    solution_env: dict[str, str] = field(default_factory=dict)
    environment_env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    #: (path relative to the task folder, resolved file inside it) of every file of the task
    files: list[tuple[str, Path]] = field(default_factory=list)

    def files_under(self, folder: str) -> list[tuple[str, Path]]:
        """(path relative to ``folder``, file) of the task's files in ``folder`` (tests, solution)."""
        prefix = folder.rstrip("/") + "/"
        return [(rel[len(prefix):], f) for rel, f in self.files if rel.startswith(prefix)]

    def info(self) -> dict[str, Any]:
        """What a task record keeps of the task (JSON)."""
        return {"harbor": {"task": self.name, "dir": str(self.dir), "agent_timeout_s": self.agent_timeout_s,
                           "verifier_timeout_s": self.verifier_timeout_s, "cpus": self.cpus,
                           "memory_mb": self.memory_mb, "workdir": self.workdir, "env": self.environment_env,
                           "agent_user": self.agent_user, "verifier_user": self.verifier_user,
                           "metadata": self.metadata}}


def is_task_dir(p: Path) -> bool:
    """A folder with a ``task.toml`` that is not a Python package."""
    return p.is_dir() and (p / CONFIG).is_file() and not (p / "__init__.py").exists()


def task_dirs(dataset: Path) -> list[Path]:
    """The task folders of a dataset folder, by name."""
    return sorted(c for c in dataset.iterdir() if not c.name.startswith(".") and is_task_dir(c))


def read_task(folder: Path) -> HarborTask:
    """The task in ``folder`` (resolved); an :class:`EnvLoadError` (one line, naming the task) otherwise."""
    d = folder.resolve()
    where = f"Harbor task {d.name} ({d})"
    try:
        files = env_file_paths(d)
    except OutsideLinkError as e:
        raise EnvLoadError(f"{where}: {e}") from None
    names = {rel for rel, _ in files}
    if INSTRUCTION not in names:
        raise EnvLoadError(f"{where} has no {INSTRUCTION}: a Harbor task states its instruction there")
    try:
        config = tomllib.loads((d / CONFIG).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise EnvLoadError(f"{where}: {CONFIG} is not valid TOML ({e})") from None
    env_cfg = _table(config, "environment", where)
    agent_cfg = _table(config, "agent", where)
    verifier_cfg = _table(config, "verifier", where)
    solution_cfg = _table(config, "solution", where)
    _refuse_unsupported(config, env_cfg, names, where)
    tests = [rel for rel in ("tests/test.sh",) if rel in names]
    if not tests:
        raise EnvLoadError(f"{where} has no tests/test.sh: a Harbor task's tests write its reward, and without "
                           "them nothing can score it")
    image = env_cfg.get("docker_image")
    dockerfile = d / "environment" / "Dockerfile" if "environment/Dockerfile" in names else None
    if dockerfile is None and not (isinstance(image, str) and image):
        raise EnvLoadError(f"{where} has no environment/Dockerfile (nor [environment] docker_image): "
                           "nothing says what container its agent works in")
    instruction = (d / INSTRUCTION).read_text(errors="replace")
    if not instruction.strip():
        raise EnvLoadError(f"{where}: {INSTRUCTION} is empty")
    task_name = (config.get("task") or {}).get("name") if isinstance(config.get("task"), dict) else None
    return HarborTask(
        name=str(task_name or d.name), dir=d, instruction=instruction, dockerfile=dockerfile,
        docker_image=image if dockerfile is None else None, test_script="test.sh",
        solve_script="solve.sh" if "solution/solve.sh" in names else None,
        agent_timeout_s=_seconds(agent_cfg.get("timeout_sec"), AGENT_TIMEOUT_S, f"{where}: [agent] timeout_sec"),
        verifier_timeout_s=_seconds(verifier_cfg.get("timeout_sec"), VERIFIER_TIMEOUT_S,
                                    f"{where}: [verifier] timeout_sec"),
        cpus=_seconds(env_cfg.get("cpus"), 1.0, f"{where}: [environment] cpus"),
        memory_mb=_size_mb(env_cfg, "memory", where) or 2048, network=_network(env_cfg, where),
        workdir=_workdir(env_cfg.get("workdir"), where),
        agent_user=_user(agent_cfg.get("user"), f"{where}: [agent] user"),
        verifier_user=_user(verifier_cfg.get("user"), f"{where}: [verifier] user"),
        build_timeout_s=_seconds(env_cfg.get("build_timeout_sec"), BUILD_TIMEOUT_S,
                                 f"{where}: [environment] build_timeout_sec"),
        storage_mb=_size_mb(env_cfg, "storage", where),
        verifier_env=_env(verifier_cfg.get("env"), f"{where}: [verifier] env"),
        solution_env=_env(solution_cfg.get("env"), f"{where}: [solution] env"),
        environment_env=_env(env_cfg.get("env"), f"{where}: [environment] env"),
        metadata=_table(config, "metadata", where), files=files)


def _table(config: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    value = config.get(name) or {}
    if not isinstance(value, dict):
        raise EnvLoadError(f"{where}: [{name}] in {CONFIG} must be a table")
    return value


def _refuse_unsupported(config: dict[str, Any], env_cfg: dict[str, Any], names: set[str], where: str) -> None:
    compose = [f"environment/{n}" for n in COMPOSE_FILES if f"environment/{n}" in names]
    if compose:
        raise EnvLoadError(f"{where}: its environment is a docker-compose project ({compose[0]}); Workbench runs "
                           "a Harbor task in one container built from environment/Dockerfile")
    if config.get("steps"):
        raise EnvLoadError(f"{where} has several steps ([[steps]] in {CONFIG}); Workbench runs single-step "
                           "Harbor tasks")
    if str(env_cfg.get("os") or "linux").lower() != "linux":
        raise EnvLoadError(f"{where} runs on {env_cfg.get('os')}; Workbench runs Linux containers")
    if env_cfg.get("gpus") or env_cfg.get("tpu"):
        raise EnvLoadError(f"{where} asks for GPUs or TPUs ([environment] gpus/tpu); Workbench's Docker sandboxes "
                           "have none")
    verifier = _table(config, "verifier", where)
    if verifier.get("environment_mode") == "separate" or verifier.get("environment") is not None:
        raise EnvLoadError(f"{where} runs its tests in a separate verifier container ([verifier] environment); "
                           "Workbench runs them in the agent's container (environment_mode = \"shared\")")
    if env_cfg.get("mcp_servers"):
        raise EnvLoadError(f"{where} declares MCP servers ([[environment.mcp_servers]]); Workbench does not "
                           "start them for Harbor tasks")


def _seconds(value: Any, default: float, what: str) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise EnvLoadError(f"{what} must be a positive number, not {value!r}")
    return float(value)


def _size_mb(env_cfg: dict[str, Any], name: str, where: str) -> int | None:
    """``[environment] NAME_mb`` (or the older ``NAME = "2G"`` form) in megabytes; None when not given."""
    value = env_cfg.get(f"{name}_mb")
    if value is None and isinstance(env_cfg.get(name), str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([GMK])\s*", env_cfg[name].upper())
        if not m:
            raise EnvLoadError(f"{where}: [environment] {name} {env_cfg[name]!r} is not a size like '2G'")
        value = float(m.group(1)) * {"G": 1024, "M": 1, "K": 1 / 1024}[m.group(2)]
    if value is None:
        return None
    return max(1, int(_seconds(value, 1, f"{where}: [environment] {name}_mb")))


def _user(value: Any, what: str) -> str | None:
    """A user name or uid (``name``, ``1000``, ``name:group``) as ``docker exec --user`` takes it."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and _USER.fullmatch(value):
        return value
    raise EnvLoadError(f"{what} must be a user name or uid, not {value!r}")


def _network(env_cfg: dict[str, Any], where: str) -> bool | tuple[str, ...]:
    mode = env_cfg.get("network_mode")
    if mode is None and env_cfg.get("allow_internet") is not None:
        mode = "public" if env_cfg["allow_internet"] else "no-network"
    if mode in (None, "public"):
        return True
    if mode == "no-network":
        return False
    hosts = env_cfg.get("allowed_hosts")
    if mode == "allowlist" and isinstance(hosts, list) and hosts and all(isinstance(h, str) and h for h in hosts):
        return tuple(hosts)
    raise EnvLoadError(f"{where}: [environment] network_mode {mode!r} is not public, no-network or an allowlist "
                       "with allowed_hosts")


def _workdir(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise EnvLoadError(f"{where}: [environment] workdir must be an absolute path, not {value!r}")
    return value


def _env(value: Any, what: str) -> dict[str, str]:
    """Literal variables; a ``${VAR:-default}`` template takes its default (the host's environment never
    reaches a sandbox), and one without a default is refused."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise EnvLoadError(f"{what} must be a table of text values")
    out: dict[str, str] = {}
    for k, v in value.items():
        def default(m: re.Match[str], key: str = k) -> str:
            if m.group(2) is None:
                raise EnvLoadError(f"{what}: {key} reads the host's ${{{m.group(1)}}}; Workbench passes no host "
                                   "variable into a sandbox (give a literal value or a ${VAR:-default})")
            return m.group(2)

        out[k] = _TEMPLATE.sub(default, v)
    return out
