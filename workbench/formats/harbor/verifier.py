"""Scoring a Harbor task as Harbor does: after the agent, the task's ``tests/`` are copied to ``/tests`` in
its container and ``tests/test.sh`` runs there (its output in ``/logs/verifier/test-stdout.txt``); the reward
is what it wrote to ``/logs/verifier/reward.json`` (read first: an object of named numbers) or
``/logs/verifier/reward.txt`` (one number). Tests that write no reward are an error of the rollout,
never a reward of 0.

``workbench validate`` scores with no agent: its gold answer runs the reference solution
(``solution/solve.sh``, copied to ``/solution``) first, as Harbor's oracle agent does; its empty answer
runs nothing first, as Harbor's no-op agent does. Only a rollout that no agent played is scored that
way: every harness of a Harbor environment marks the rollout's state (``AGENT_KEY``) before the model
acts, so no model output can ask for the reference solution.
"""

from __future__ import annotations

import io
import json
import math
import shlex
import tarfile
from pathlib import Path
from typing import Any

from workbench.authoring.rubric import Rubric
from workbench.authoring.sandbox import Sandbox
from workbench.formats.harbor.task_dir import HarborTask

#: The state key a Harbor harness sets before the model acts (what played the task).
AGENT_KEY = "harbor_agent"
#: The gold answer of a Harbor task: validate's sign to run the reference solution first.
ORACLE = "harbor: the reference solution (solution/solve.sh)"
LOGS_DIRS = ("/logs/agent", "/logs/verifier", "/logs/artifacts")
VERIFIER_DIR = "/logs/verifier"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
_COPY_TIMEOUT_S = 300.0


class HarborScoreError(RuntimeError):
    """The task's tests (or its reference solution) could not be run or read."""


def tar_of(files: list[tuple[str, Path]]) -> bytes:
    """A tar of ``(relative path, host file)``, owned by root, modes kept."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, f in files:
            info = tar.gettarinfo(str(f), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            with open(f, "rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


async def copy_in(sandbox: Sandbox, files: list[tuple[str, Path]], dest: str, what: str, first: str = "") -> None:
    """Put ``files`` at ``dest`` in the container (replacing it), after the shell command ``first``, as root:
    the files are root's, their modes kept, as Harbor copies them."""
    q = shlex.quote(dest)
    r = await sandbox.exec(f"{first + ' && ' if first else ''}rm -rf {q} && mkdir -p {q} && tar -xf - -C {q}",
                           stdin=tar_of(files), timeout=_COPY_TIMEOUT_S, user=ROOT)
    if not r.ok:
        raise HarborScoreError(f"copying {what} to {dest} in the container failed: {_tail(r.stderr or r.stdout)}")


#: Who makes /logs, /tests and /solution, as Harbor does, whoever the agent and the verifier run as.
ROOT = "0:0"
#: Makes the folders Harbor mounts into every task container (writable by every user, as mounts are).
MAKE_LOG_DIRS = f"mkdir -p {' '.join(LOGS_DIRS)} && chmod 777 {' '.join(LOGS_DIRS)}"


async def make_log_dirs(sandbox: Sandbox) -> None:
    """The folders Harbor mounts into every task container, there before the agent starts."""
    r = await sandbox.exec(MAKE_LOG_DIRS, user=ROOT)
    if not r.ok:
        raise HarborScoreError(f"creating /logs in the container failed: {_tail(r.stderr or r.stdout)}")


async def run_solution(sandbox: Sandbox, task: HarborTask, state: dict[str, Any]) -> None:
    """Harbor's oracle agent: the reference solution, run in the container (its exit is kept, as Harbor's)."""
    if task.solve_script is None:
        raise HarborScoreError(f"Harbor task {task.name} has no solution/solve.sh to score as its gold answer")
    await copy_in(sandbox, task.files_under("solution"), SOLUTION_DIR, "solution/", first=MAKE_LOG_DIRS)
    script = f"{SOLUTION_DIR}/{task.solve_script}"
    await sandbox.exec(f"chmod +x {script}", user=ROOT)
    r = await sandbox.exec(f"({script}) > /logs/agent/oracle.txt 2>&1", user=task.agent_user,
                           timeout=task.agent_timeout_s, cwd=task.workdir,
                           env={"DEBIAN_FRONTEND": "noninteractive", **task.environment_env, **task.solution_env})
    state["harbor_solution_exit"] = r.exit_code


async def run_tests(sandbox: Sandbox, task: HarborTask, state: dict[str, Any]) -> dict[str, float]:
    """Copy the tests in, run ``test.sh``, and read the rewards it wrote."""
    await copy_in(sandbox, task.files_under("tests"), TESTS_DIR, "tests/",
                  first=f"{MAKE_LOG_DIRS} && rm -f {REWARD_JSON} {REWARD_TXT}")
    script = f"{TESTS_DIR}/{task.test_script}"
    await sandbox.exec(f"chmod +x {script}", user=ROOT)
    r = await sandbox.exec(f"({script}) > {VERIFIER_DIR}/test-stdout.txt 2>&1", user=task.verifier_user,
                           timeout=task.verifier_timeout_s, cwd=task.workdir,
                           env={**task.environment_env, **task.verifier_env})
    state["harbor_test_exit"] = r.exit_code
    # One command reads whichever reward file the tests wrote (reward.json first), else their output's end.
    found = await sandbox.exec(f"if [ -e {REWARD_JSON} ]; then echo json; cat {REWARD_JSON}; "
                               f"elif [ -e {REWARD_TXT} ]; then echo txt; cat {REWARD_TXT}; "
                               f"else echo none; tail -c 4000 {VERIFIER_DIR}/test-stdout.txt; fi", user=ROOT)
    kind, _, text = found.stdout.partition("\n")
    if kind == "json":
        rewards = _json_rewards(text)
    elif kind == "txt":
        rewards = {"reward": _text_reward(text)}
    else:
        ran = "timed out" if r.timed_out else f"exit {r.exit_code}"
        raise HarborScoreError(f"tests/{task.test_script} wrote no reward to {REWARD_TXT} or {REWARD_JSON} ({ran}): "
                               f"{_tail(text or found.stderr or r.stderr) or 'no output'}")
    state["harbor_rewards"] = rewards
    return rewards


def _json_rewards(text: str) -> dict[str, float]:
    try:
        value = json.loads(text)
    except ValueError:
        raise HarborScoreError(f"{REWARD_JSON} is not JSON: {_tail(text) or 'it is empty'}") from None
    values = value if isinstance(value, dict) else {"reward": value}
    if not values or not all(_number(v) for v in values.values()):
        raise HarborScoreError(f"{REWARD_JSON} must hold finite numbers, not {text.strip()[:200]!r}")
    return {str(k): float(v) for k, v in values.items()}


def _text_reward(text: str) -> float:
    try:
        reward = float(text.strip())
    except ValueError:
        raise HarborScoreError(f"{REWARD_TXT} holds {text.strip()[:200]!r}, not a number") from None
    if not math.isfinite(reward):
        raise HarborScoreError(f"{REWARD_TXT} holds {reward}, not a finite number")
    return reward


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def total(rewards: dict[str, float]) -> float:
    """The rollout's reward: ``reward`` when the tests name it, else the mean of what they wrote."""
    return rewards["reward"] if "reward" in rewards else sum(rewards.values()) / len(rewards)


def make_rubric(tasks: dict[str, HarborTask]) -> Rubric:
    """The reward (the tests' ``reward``) and a metric per reward the tests name (``rewards.NAME``)."""
    rubric = Rubric()

    async def harbor(task: Any, completion: str, state: dict[str, Any], sandbox: Sandbox | None) -> float:
        if sandbox is None:
            raise HarborScoreError("a Harbor task is scored in its container, and this rollout has none")
        info = (task.info or {}).get("harbor") or {}
        ht = tasks.get(str(info.get("task")))
        if ht is None:
            raise HarborScoreError(f"task {task.id!r} is not one of this environment's Harbor tasks")
        if not state.get(AGENT_KEY):  # validate: no agent played; the gold answer is the oracle's
            if completion == ORACLE:
                await run_solution(sandbox, ht, state)
            elif completion:
                raise HarborScoreError("a Harbor task scores what an agent did in its container, not a text "
                                       "answer; run it with `workbench eval`")
        return total(await run_tests(sandbox, ht, state))

    async def rewards(state: dict[str, Any]) -> dict[str, float]:
        named = state.get("harbor_rewards") or {}
        return {k: v for k, v in named.items() if k != "reward"} if len(named) > 1 else {}

    rubric.reward(harbor)
    rubric.metric(rewards)
    return rubric
