"""__env_name__: a sandboxed environment. Each task seeds a small log file into the rollout's own
sandbox; the model investigates it with shell commands and answers with a number.

Made from the ``sandboxed`` template (``workbench new __env_name__ --template sandboxed``).

    workbench validate __env_name__            # starts a sandbox per scoring, like a run does
    workbench eval __env_name__ -n 4 -r 4
    workbench eval __env_name__ --runtime docker   # the same environment in containers

A sandbox is where tools (and rewards) execute: `await sandbox.exec(cmd, timeout=...)`, `read_file`
and `write_file`, relative to the rollout's workdir. A tool or reward gets it by declaring a
parameter named `sandbox`. The runtime decides what a sandbox is: `wb.Local()` (processes isolated
with bubblewrap where available) or `wb.Docker(image=...)`; `--runtime` swaps it without an edit.
"""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import workbench as wb

LOG_FILE = "logs/app.log"
SYSTEM_PROMPT = (f"You are on a server investigating {LOG_FILE} (relative to the current directory). "
                 "Use the run tool to execute shell commands (grep, wc, awk, sort, uniq ...). When you know the "
                 "answer, reply with it as a plain number and no tool call.")

QUESTIONS = {
    "errors": f"How many lines of {LOG_FILE} have the level ERROR?",
    "users": f"How many distinct user ids (user=...) appear in {LOG_FILE}?",
    "slow": f"How many requests in {LOG_FILE} took longer than 500 ms (ms=...)?",
}


def make_log(rng: random.Random, lines: int) -> list[dict[str, Any]]:
    levels = ["INFO"] * 6 + ["WARN"] * 2 + ["ERROR"]
    paths = ["/", "/login", "/search", "/cart", "/checkout"]
    return [{"t": f"2024-05-01T10:{i // 60:02d}:{i % 60:02d}", "level": rng.choice(levels),
             "user": rng.randint(1, 12), "path": rng.choice(paths), "ms": rng.randint(5, 900)}
            for i in range(lines)]


def render(log: list[dict[str, Any]]) -> str:
    return "".join(f"{r['t']} {r['level']} user={r['user']} path={r['path']} ms={r['ms']}\n" for r in log)


def gold(kind: str, log: list[dict[str, Any]]) -> int:
    """The answer, computed from the same records the file is written from: it cannot disagree with it."""
    if kind == "errors":
        return sum(r["level"] == "ERROR" for r in log)
    if kind == "users":
        return len({r["user"] for r in log})
    return sum(r["ms"] > 500 for r in log)


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        log = make_log(rng, lines=rng.randint(40, 120))
        kind = list(QUESTIONS)[i % len(QUESTIONS)]
        text = render(log)
        rows.append({
            "prompt": QUESTIONS[kind],
            "answer": str(gold(kind, log)),
            "info": {"kind": kind, "sha256": hashlib.sha256(text.encode()).hexdigest()},
            # Sandbox needs: files written into the workdir before the rollout starts (also: "dir" to
            # copy a host folder, "setup" to run a shell command after seeding).
            "sandbox": {"files": {LOG_FILE: text}},
        })
    return rows


# -- tools ---------------------------------------------------------------------------------------
async def run(cmd: str, sandbox: wb.Sandbox) -> str:
    """Run a shell command in the server's working directory and return its exit code and output.

    Args:
        cmd: the command line, e.g. `grep -c ERROR logs/app.log`
    """
    result = await sandbox.exec(cmd, timeout=20)  # killed on timeout; partial output is kept
    return result.output(limit=4000)  # cap what goes back into the model's context


_NUMBER = re.compile(r"-?\d+")


def final_number(text: str | None) -> int | None:
    found = _NUMBER.findall(text or "")
    return int(found[-1]) if found else None


def load_environment(n: int = 6, seed: int = 0, max_turns: int = 6) -> wb.Environment:
    """``n`` tasks from ``seed``; ``max_turns`` model turns per episode."""
    if not isinstance(n, int) or n < 1:
        raise wb.EnvLoadError(f"__env_name__: n must be a positive integer, got {n!r}")
    rubric = wb.Rubric()

    # The usual holes, which `workbench probe` tries on this rubric before any training does: a substring
    # check that a list of every number passes, a reward for length, a check that another task's answer or a
    # wrong value in the right format satisfies, a judge model that can be told to give full marks, a test
    # the agent can edit in its sandbox. Compare the whole final answer, keep your own copy of what you
    # check against, and run `workbench probe __env_name__` after every rubric change.
    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        """1.0 when the final reply's last number equals the gold answer."""
        return float(final_number(completion) == int(answer))

    # Rewards and metrics can use the live sandbox too: it stays up through scoring. Here a check
    # that the model left the evidence alone (a reward-hacking signal worth logging).
    @rubric.metric
    async def log_untouched(sandbox: wb.Sandbox, info: dict[str, Any]) -> float:
        """1.0 when the log file is still byte-for-byte what the task seeded."""
        try:
            text = await sandbox.read_file(LOG_FILE)
        except OSError:
            return 0.0
        return float(hashlib.sha256(str(text).encode()).hexdigest() == info["sha256"])

    @rubric.metric
    def commands(messages: list[dict[str, Any]]) -> float:
        """How many shell commands the model ran."""
        return float(sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant"))

    return wb.Environment(
        name="__env_name__",
        tasks=wb.TaskSet.from_records(make_rows(n, seed), name="__env_name__"),
        harness=wb.ToolLoop(tools=[run], max_turns=max_turns, system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        # No network, CPU/memory limits and a timeout per command; wb.Docker(image=...) for containers;
        # warm_python=True where commands are mostly `python3 ...` (test suites): they fork warm.
        runtime=wb.Local(timeout=30),
        sampling=wb.Sampling(max_tokens=512, temperature=1.0),
        description="Answer questions about a log file by running shell commands in a sandbox.",
    )
