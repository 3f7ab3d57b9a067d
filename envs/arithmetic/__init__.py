"""Single-turn arithmetic: "What is A op B?" with an exact-integer reward and a conciseness bonus.

The fastest bundled environment; the rollout benchmark runs it at more than a thousand rollouts per
second, so the per-rollout reward is one precompiled regex search and an integer comparison.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

import workbench as wb

SYSTEM_PROMPT = "Answer with a number."
PROMPT = "What is {a} {op} {b}? Answer with just the number."
SUPPORTED_OPS = "+-*"

#: An integer, optionally negative (ASCII or Unicode minus), with optional thousands separators
#: ("1,234") and an optional decimal part so "19.0" reads as 19 (and "19.5" is not an integer).
_NUMBER = re.compile(r"[-\u2212]?\d+(?:,\d{3})*(?:\.\d+)?")
#: Above this many distinct problems, draw by rejection sampling instead of enumerating them all.
_ENUMERATE_LIMIT = 200_000


def _canonical_integer(token: str) -> str | None:
    """A number as written ("-1,234", "19.0") as its integer's canonical decimal text ("-1234", "19"),
    or None for one with a non-zero decimal part. Text, not ``int``: a completion may hold a number of
    any length (Python refuses to convert one of more than 4,300 digits), and comparing text is exact."""
    token = token.replace(",", "").replace("\u2212", "-")
    sign = "-" if token.startswith("-") else ""
    whole, _, fraction = token.lstrip("-").partition(".")
    if fraction.strip("0"):
        return None
    whole = whole.lstrip("0") or "0"
    return "0" if whole == "0" else sign + whole


def _last_integer_text(text: str | None) -> str | None:
    if not text:
        return None
    found = _NUMBER.findall(text)
    return _canonical_integer(found[-1]) if found else None


def last_integer(text: str | None) -> int | None:
    """The last integer written in ``text`` ("The answer is -1,234." -> -1234), or None.

    A number with a non-zero decimal part ("2.5") is not an integer and yields None, as does one too
    long for Python to turn into an ``int``.
    """
    got = _last_integer_text(text)
    if got is None or len(got) > 4000:
        return None
    return int(got)


def _is_correct(completion: str | None, answer: Any) -> bool:
    if answer is None:
        return False
    got = _last_integer_text(completion)
    return got is not None and got == _canonical_integer(str(answer).strip())


def _apply(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b if op == "-" else a * b


def _iter_problems(seed: int, max_operand: int, ops: str) -> Iterator[tuple[int, str, int]]:
    """Problems in a seeded order that does not depend on how many are taken (the first 10 of n=200
    are the tasks of n=10), without end: distinct until every combination has been used, then
    repeating. Lazy, so a task set of any ``n`` costs only the tasks a run takes."""
    rng = random.Random(seed)
    size = max_operand + 1
    total = size * size * len(ops)
    if total <= _ENUMERATE_LIMIT:
        pool = [(a, op, b) for op in ops for a in range(size) for b in range(size)]
        rng.shuffle(pool)
        while True:
            yield from pool
    seen: set[tuple[int, str, int]] = set()
    while True:
        p = (rng.randint(0, max_operand), rng.choice(ops), rng.randint(0, max_operand))
        if p not in seen or len(seen) >= total:
            seen.add(p)
            yield p


def _problems(n: int, seed: int, max_operand: int, ops: str) -> list[tuple[int, str, int]]:
    """The first ``n`` problems of :func:`_iter_problems`."""
    return list(itertools.islice(_iter_problems(seed, max_operand, ops), n))


def _iter_rows(n: int, seed: int, max_operand: int, ops: str) -> Iterator[dict[str, Any]]:
    size = (max_operand + 1) ** 2 * len(ops)
    problems = itertools.islice(_iter_problems(seed, max_operand, ops), n)
    for i, (a, op, b) in enumerate(problems):
        info: dict[str, Any] = {"a": a, "op": op, "b": b}
        if i >= size:  # a repeated problem keeps a distinct task id
            info["round"] = i // size
        yield {"prompt": PROMPT.format(a=a, op=op, b=b), "answer": str(_apply(a, op, b)), "info": info}


def make_rows(n: int = 200, seed: int = 0, max_operand: int = 20, ops: str = SUPPORTED_OPS) -> list[dict[str, Any]]:
    """The task records: prompt, answer (the integer as a string) and info (operands, operator)."""
    return list(_iter_rows(n, seed, max_operand, ops))


def _check_args(n: int, max_operand: int, ops: str) -> str:
    if not isinstance(n, int) or n < 1:
        raise wb.EnvLoadError(f"arithmetic: n must be a positive integer, got {n!r}")
    if not isinstance(max_operand, int) or max_operand < 1:
        raise wb.EnvLoadError(f"arithmetic: max_operand must be an integer of at least 1, got {max_operand!r}")
    if not isinstance(ops, str) or not ops:
        raise wb.EnvLoadError(f"arithmetic: ops must be a non-empty string of operators from {SUPPORTED_OPS!r}")
    bad = sorted(set(ops) - set(SUPPORTED_OPS))
    if bad:
        raise wb.EnvLoadError(f"arithmetic: unsupported operator(s) {''.join(bad)!r}; ops may only use {SUPPORTED_OPS!r}")
    return "".join(dict.fromkeys(ops))  # de-duplicated, order kept


def load_environment(n: int = 200, seed: int = 0, max_operand: int = 20, ops: str = SUPPORTED_OPS) -> wb.Environment:
    """Arithmetic problems over operands 0..max_operand with the operators in ``ops``."""
    ops = _check_args(n, max_operand, ops)
    tasks = wb.TaskSet(lambda: (wb.Task.from_record(r) for r in _iter_rows(n, seed, max_operand, ops)),
                       name="arithmetic")
    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        """1 when the last integer in the completion equals the answer."""
        return 1.0 if _is_correct(completion, answer) else 0.0

    @rubric.metric
    def words(completion: str) -> float:
        """How many whitespace-separated words the completion has."""
        return float(len(completion.split())) if completion else 0.0

    @rubric.metric
    def has_number(completion: str) -> float:
        """1 when the completion contains any number at all (format compliance)."""
        return 1.0 if completion and _NUMBER.search(completion) else 0.0

    @rubric.group_reward(weight=0.2)
    def concise(completions: list[str], answers: list[Any]) -> list[float]:
        """1 for the shortest correct completion(s) of the group, 0 for everything else."""
        lengths = [
            len(c.strip()) if _is_correct(c, a) else None for c, a in zip(completions, answers, strict=True)
        ]
        correct_lengths = [x for x in lengths if x is not None]
        if not correct_lengths:
            return [0.0] * len(completions)
        best = min(correct_lengths)
        return [1.0 if x == best else 0.0 for x in lengths]

    return wb.Environment(
        name="arithmetic",
        tasks=tasks,
        harness=wb.SingleTurn(system_prompt=SYSTEM_PROMPT),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=16, temperature=1.0),
        description="Single-turn integer arithmetic (What is A op B?) with a bonus for the shortest correct answer.",
    )
