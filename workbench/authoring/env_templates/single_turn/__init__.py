"""__env_name__: a single-turn environment. One prompt in, one reply out, scored against a gold answer.

Made from the ``single-turn`` template (``workbench new __env_name__ --template single-turn``).

    workbench validate __env_name__              # gold answers must outscore an empty reply
    workbench eval __env_name__ -n 4 -r 4        # 4 tasks x 4 rollouts on the embedded model
    workbench eval __env_name__ -a '{"seed": 1}' # keyword arguments of load_environment

The three parts of an environment are independent: the task set (data), the harness (how the
model acts: here it answers once) and the rubric (how a reply is scored). Change one at a time.
"""

from __future__ import annotations

import re
from pathlib import Path

import workbench as wb

# Tasks are data, kept out of the code: one JSON object per line with "prompt", "answer" (the gold
# answer) and an optional "info" dict that reward functions can read. Every task gets a stable
# content-hash id, so runs stay comparable as long as the task text does not change.
TASKS_FILE = Path(__file__).with_name("tasks.jsonl")

SYSTEM_PROMPT = "Solve the problem. End your reply with the final answer as a plain number."

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def final_number(text: str | None) -> str | None:
    """The last number written in ``text`` ("so 95 minutes." -> "95"); "12.0" reads as "12"."""
    found = _NUMBER.findall(text or "")
    if not found:
        return None
    value = float(found[-1])
    return str(int(value)) if value.is_integer() else str(value)


def load_environment(n: int | None = None, seed: int | None = None) -> wb.Environment:
    """``n``: keep the first n tasks; ``seed``: shuffle them first (``-a '{"n": 4, "seed": 1}'``)."""
    if n is not None and (not isinstance(n, int) or n < 1):
        # Bad arguments end in one clear sentence: raise wb.EnvLoadError, never a bare exception.
        raise wb.EnvLoadError(f"__env_name__: n must be a positive integer, got {n!r}")
    tasks = wb.TaskSet.from_jsonl(TASKS_FILE, name="__env_name__")  # lazy: read when iterated
    if seed is not None:
        tasks = tasks.shuffle(seed)
    if n is not None:
        tasks = tasks.take(n)

    rubric = wb.Rubric()

    # The usual holes, which `workbench probe` tries on this rubric before any training does: a substring
    # check that a list of every number passes, a reward for length, a check that another task's answer or a
    # wrong value in the right format satisfies, a judge model that can be told to give full marks, a test
    # the agent can edit in its sandbox. Compare the whole final answer, keep your own copy of what you
    # check against, and run `workbench probe __env_name__` after every rubric change.
    # A reward is what training optimises. Its arguments are injected by name: `completion` is the
    # model's last reply, `answer` the task's gold answer (also available: prompt, messages, info,
    # task, state, usage). Return a float, or a dict of named floats.
    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        """1.0 when the reply's final number equals the gold answer."""
        return float(final_number(completion) == final_number(answer))

    # A metric is logged next to the rewards but never trained on: watch length, format or signs
    # of reward hacking with metrics before deciding to reward or penalise them.
    @rubric.metric
    def words(completion: str) -> float:
        """How many words the reply has."""
        return float(len(completion.split()))

    # A group reward sees every rollout of the same task at once (`-r 4` makes groups of 4) and
    # returns one value per rollout; `rewards` are the rollouts' weighted totals so far.
    @rubric.group_reward(weight=0.2)
    def shortest_correct(completions: list[str], answers: list[str]) -> list[float]:
        """A bonus for the shortest correct reply of the group: correct AND concise."""
        lengths = [len(c) if final_number(c) == final_number(a) else None
                   for c, a in zip(completions, answers, strict=True)]
        best = min((x for x in lengths if x is not None), default=None)
        return [1.0 if best is not None and x == best else 0.0 for x in lengths]

    return wb.Environment(
        name="__env_name__",
        tasks=tasks,
        harness=wb.SingleTurn(system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        # Sampling is sent with every model call; RL wants temperature ~1 for diverse groups.
        sampling=wb.Sampling(max_tokens=256, temperature=1.0),
        description="Short word problems with a numeric answer (single turn).",
    )
