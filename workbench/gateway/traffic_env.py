"""The environment ``tasks from-traffic`` writes, built from its folder: the tasks of ``tasks.jsonl`` (all, the
training split or the held-out one), one reply each, and a judge rubric plus the user's own (``rubric.py``, when
``--rubric FILE`` gave one: its module-level ``rubric``, a ``wb.Rubric``, whose functions join the judge's).

``similar_to_reference`` asks the judge model (a registered one, or ``local``, the embedded model) whether a
reply says what the reference answer says, on a scale of 0 to 10, and is that over 10 (0 when the judge
answers with no number). The judge's calls go through their own client and are not part of the rollout's
trace."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import SingleTurn
from workbench.authoring.rubric import Rubric
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError

TASKS_FILE = "tasks.jsonl"
RUBRIC_FILE = "rubric.py"
DEFAULT_JUDGE = "local"
NO_JUDGE = "none"
SPLITS = ("all", "train", "held_out")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")

JUDGE_PROMPT = """You compare a reply with a reference answer to the same conversation.

Reference answer:
{answer}

Reply:
{completion}

Does the reply say what the reference answer says (the same facts, decision and next step; wording may
differ)? Answer with one number from 0 (not at all) to 10 (entirely), and nothing else."""


def judge_score(text: str) -> float:
    """The judge's answer as a score in [0, 1]: its first number over 10 (0 when it gives none)."""
    found = _NUMBER.search(text or "")
    return min(10.0, float(found.group(0))) / 10.0 if found else 0.0


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_workbench_rubric_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise EnvLoadError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def user_rubric(path: Path) -> Rubric:
    """The ``rubric`` (a ``wb.Rubric``) the Python file ``path`` defines; one line when it defines none or fails
    to load."""
    try:
        module = _module(path)
    except EnvLoadError:
        raise
    except Exception as e:  # the user's own code, failing as it may
        raise EnvLoadError(f"{path}: loading it raised {type(e).__name__}: {e}") from None
    rubric = getattr(module, "rubric", None)
    if not isinstance(rubric, Rubric):
        raise EnvLoadError(f"{path}: defines no `rubric` (a wb.Rubric at module level) to add to the judge's")
    return rubric


def build_environment(folder: Path, *, name: str, split: str = "all", judge: str = DEFAULT_JUDGE) -> Environment:
    from workbench.formats.openai_evals.judge import EndpointJudge

    if split not in SPLITS:
        raise EnvLoadError(f"{name}: split {split!r} is none of {', '.join(SPLITS)}")
    tasks = TaskSet.from_jsonl(folder / TASKS_FILE, name=name)
    if split != "all":
        tasks = tasks.filter(lambda t: t.info.get("split") == split)
    rubric = Rubric()
    if judge != NO_JUDGE:
        asker = EndpointJudge(judge)

        @rubric.reward(weight=1.0)
        async def similar_to_reference(completion: str, answer: str) -> float:
            """The judge's 0-10 verdict of the reply against the reference answer, over 10."""
            prompt = JUDGE_PROMPT.format(answer=answer, completion=completion)
            reply = await asker.ask([{"role": "user", "content": prompt}], {"temperature": 0.0, "max_tokens": 8})
            return judge_score(reply)

    @rubric.metric
    def reply_chars(completion: str) -> float:
        return float(len(completion))

    if (folder / RUBRIC_FILE).is_file():
        for fn in user_rubric(folder / RUBRIC_FILE).functions:
            if any(f.name == fn.name for f in rubric.functions):
                raise EnvLoadError(f"{folder / RUBRIC_FILE}: its {fn.name!r} is named as one of the judge's functions")
            rubric.functions.append(fn)
    if not rubric.rewards:
        raise EnvLoadError(f"{name}: no reward (the judge is {NO_JUDGE!r} and {RUBRIC_FILE} adds none)")

    return Environment(name=name, tasks=tasks, harness=SingleTurn(), rubric=rubric,
                       sampling=Sampling(max_tokens=512, temperature=1.0),
                       description=f"tasks from a product's traffic ({split}); a judge ({judge}) scores each reply "
                                   "against the answer it got")


def tasks_info(folder: Path) -> dict[str, Any]:
    """How many tasks of each split the folder holds."""
    counts = {"train": 0, "held_out": 0}
    for task in TaskSet.from_jsonl(folder / TASKS_FILE):
        split = task.info.get("split")
        if split in counts:
            counts[split] += 1
    return counts


__all__ = ["DEFAULT_JUDGE", "NO_JUDGE", "RUBRIC_FILE", "SPLITS", "TASKS_FILE", "build_environment", "judge_score",
           "user_rubric"]
