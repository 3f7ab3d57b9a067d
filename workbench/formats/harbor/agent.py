"""The agents that play a Harbor task in its container.

``TerminalAgent`` (the default) is a terminal agent in the manner of Harbor's Terminus: the model gets the
task's instruction and one tool, ``bash``, that runs a command in the container (in the task's working
directory, as the task's ``[agent] user`` or else the image's user) and returns its exit status and output; it works until it answers without
a tool call or runs out of turns. Each command is its own shell, started where the last one ended (its
working directory is carried over, as in a terminal); the container's files persist, the shell's variables
do not.

``ProgramAgent`` runs any agent program (``wb.Program``) in the container instead, talking to the model
through the interception proxy (the image needs ``python3`` for the proxy's bridge).

Both mark the rollout's state before the model acts (``verifier.AGENT_KEY``) and make Harbor's ``/logs``
folders first (as root, writable by every user). The task's ``[agent] timeout_sec`` bounds each: when it runs out, the agent stops and its
tests still score what it did (``TIMED_OUT_KEY`` in the state), as in Harbor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workbench.authoring.harness import Program, ToolLoop
from workbench.authoring.sandbox import Sandbox
from workbench.formats.harbor.task_dir import AGENT_TIMEOUT_S
from workbench.formats.harbor.verifier import AGENT_KEY, make_log_dirs
from workbench.records.rollout import Rollout, RolloutFailed

SYSTEM_PROMPT = (
    "You are an AI agent solving a task in a Linux container through its terminal. Use the bash tool to run "
    "shell commands: each runs in a fresh shell that starts in the directory where the previous command ended "
    "(the first in the task's working directory); files you change persist, shell variables do not. Inspect "
    "before you change things, check your work, and when the task is complete reply with a short summary and "
    "no tool call."
)
#: The state key set when the agent ran out of the task's agent time (its tests still score it).
TIMED_OUT_KEY = "harbor_agent_timed_out"
#: The longest one command may run when the model does not say (seconds).
COMMAND_TIMEOUT_S = 180.0
_MAX_OUTPUT = 16_000
#: The state key holding the directory the agent's last command ended in.
CWD_KEY = "harbor_cwd"
#: Runs the model's command (``$2``) from the directory the last one ended in (``$1``), then reports where it
#: ended on stderr after a marker (``$3``) that the tool takes out of the output again.
_IN_LAST_DIR = ('[ -n "$1" ] && cd -- "$1" 2>/dev/null; eval "$2"; __wb_rc=$?; '
                'printf "\\n%s%s\\n" "$3" "$(pwd)" >&2; exit $__wb_rc')
_CWD_MARK = "\x1eworkbench-cwd:"


def _agent_limit(rollout: Rollout) -> float:
    harbor = (rollout.task.info or {}).get("harbor") or {}
    return float(harbor.get("agent_timeout_s") or AGENT_TIMEOUT_S)


def _task_env(harbor: dict[str, Any]) -> dict[str, str]:
    """The task's ``[environment] env``: every command of the agent sees it, as in Harbor's container."""
    env = harbor.get("env")
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def _workdir(rollout: Rollout) -> str | None:
    harbor = (rollout.task.info or {}).get("harbor") or {}
    wd = harbor.get("workdir")
    return wd if isinstance(wd, str) else None


async def bash(command: str, sandbox: Sandbox, info: dict[str, Any], state: dict[str, Any],
               timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Run a shell command in the task's container and return its exit status and output.

    Args:
        command: the shell command line (sh); chain steps with &&. It starts in the directory where the
            previous command ended.
        timeout: seconds before the command is killed (at most the task's agent time limit).
    """
    harbor = (info or {}).get("harbor") or {}
    limit = float(harbor.get("agent_timeout_s") or COMMAND_TIMEOUT_S)
    wait = min(max(1.0, float(timeout or COMMAND_TIMEOUT_S)), limit)
    last = str(state.get(CWD_KEY) or "")
    user = harbor.get("agent_user")
    r = await sandbox.exec(["/bin/sh", "-c", _IN_LAST_DIR, "sh", last, command, _CWD_MARK], timeout=wait,
                           cwd=harbor.get("workdir"), user=user if isinstance(user, str) else None,
                           env={**_task_env(harbor), "DEBIAN_FRONTEND": "noninteractive", "TERM": "dumb"})
    at = r.stderr.rfind(_CWD_MARK)
    if at >= 0:  # where the command ended, taken out of what the model sees
        ended = r.stderr[at + len(_CWD_MARK):].split("\n", 1)[0]
        if ended.startswith("/"):
            state[CWD_KEY] = ended
        r = replace(r, stderr=r.stderr[:at].removesuffix("\n"))
    return r.output(limit=_MAX_OUTPUT)


class TerminalAgent(ToolLoop):
    """A shell-tool loop on the model in the task's container (see the module)."""

    def __init__(self, max_turns: int = 50, system_prompt: str | None = SYSTEM_PROMPT) -> None:
        super().__init__([bash], max_turns=max_turns, system_prompt=system_prompt, parallel=False)

    async def run(self, rollout: Rollout) -> None:
        rollout.state[AGENT_KEY] = "terminal"
        if rollout.sandbox is None:
            raise RolloutFailed("harness", "harbor", "a Harbor task runs in its container, and the run opened none")
        await make_log_dirs(rollout.sandbox)
        limit = asyncio.timeout(_agent_limit(rollout))
        try:
            async with limit:
                await super().run(rollout)
        except TimeoutError:
            if not limit.expired():
                raise
            rollout.state[TIMED_OUT_KEY] = True  # as in Harbor: its time is up, and its tests still score it

    def describe(self) -> str:
        return "HarborTerminal(bash)"


class ProgramAgent(Program):
    """An agent program run in the task's container (``wb.Program``), its time bounded by the task's."""

    def __init__(self, argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 3600.0) -> None:
        super().__init__(argv, env=env, timeout=timeout)
        self.limit = self.timeout
        self.own_env = dict(self.env)

    async def run(self, rollout: Rollout) -> None:
        rollout.state[AGENT_KEY] = "program"
        if rollout.sandbox is not None:
            await make_log_dirs(rollout.sandbox)
        # Read by Program.run before its first await: no other rollout's task can change them in between.
        self.cwd = _workdir(rollout)
        user = ((rollout.task.info or {}).get("harbor") or {}).get("agent_user")
        self.user = user if isinstance(user, str) else None
        self.env = {**_task_env((rollout.task.info or {}).get("harbor") or {}), **self.own_env}
        self.timeout = min(self.limit, _agent_limit(rollout))
        try:
            await super().run(rollout)
        except RolloutFailed as e:
            if e.kind != "timeout":
                raise
            rollout.state[TIMED_OUT_KEY] = True  # its tests still score what it did, as in Harbor
