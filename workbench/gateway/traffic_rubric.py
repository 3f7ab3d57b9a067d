"""An environment's rubric over a route's recorded answers: ``workbench compare --traffic ROUTE --env ENV``.

Each recorded exchange is scored as the rubric scores a rollout at eval time, without calling the answering
model again: its conversation and the answer it got (the rollout's messages), and, as its task, the environment's
task holding the same conversation (the same user and assistant turns, whatever system prompt either has; the
tasks ``tasks from-traffic`` writes are such conversations) when there is one. A rubric that reads the task's
``answer`` cannot score an exchange that matches no task: it is skipped, and counted with that reason. A rubric
that needs the rollout's live sandbox or MCP servers cannot score recorded traffic at all (one line says so);
group rewards are left out (traffic has no groups). A function that raises is counted, as in a run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.analysis.rescore import RubricScorer
from workbench.authoring.environment import Environment
from workbench.errors import ConfigError
from workbench.records.rollout import Rollout, Usage
from workbench.records.task import Task

UNMATCHED = "no task of the environment holds its conversation, and the rubric reads the task's answer"


def _turn_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def conversation_turns(prompt: Any) -> tuple[tuple[str, str], ...]:
    """A prompt (text, or messages) as its user and assistant turns: what matches a recorded conversation to an
    environment's task."""
    if isinstance(prompt, str):
        return (("user", prompt.strip()),)
    return tuple((str(m.get("role")), _turn_text(m.get("content")).strip()) for m in prompt or ()
                 if isinstance(m, dict) and m.get("role") in ("user", "assistant"))


@dataclass(slots=True)
class TrafficScores:
    """The rubric's weighted total of each scored exchange, by exchange id, and what was not scored."""

    env: str
    env_version: str
    totals: dict[str, float] = field(default_factory=dict)
    matched: int = 0  # exchanges scored against one of the environment's tasks
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> exchanges
    errors: Counter[str] = field(default_factory=Counter)  # function -> exchanges where it raised
    error_examples: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env, "env_version": self.env_version, "scored": len(self.totals), "matched": self.matched,
                "skipped": dict(self.skipped.most_common()), "errors": dict(self.errors.most_common()),
                "error_examples": self.error_examples}


def _rollout(row: dict[str, Any], task: Task | None, prompt: Any) -> Rollout:
    messages = orjson.loads(row["messages"] or "[]")
    if not messages:
        messages = [*prompt, {"role": "assistant", "content": row["completion"] or ""}]
    if task is None:
        task = Task(prompt=prompt, info={}, id=row["id"])
    return Rollout(id=row["id"], task=task, sample_index=0, client=None, base_url="",  # type: ignore[arg-type]
                   model=str(row.get("model") or ""), params={}, messages=messages,
                   state=orjson.loads(row["state"] or "{}"), usage=Usage(0, 0, 0.0), turns=1, duration_s=0.0)


async def score_traffic(env: Environment, rows: list[dict[str, Any]], *, concurrency: int = 16) -> TrafficScores:
    """Score the recorded exchanges ``rows`` (as :func:`workbench.store.traffic.traffic_exchanges` gives them)
    with ``env``'s rubric."""
    scorer = RubricScorer.of(env)
    if scorer.skip is not None:
        raise ConfigError(f"--env {env.name} cannot score recorded traffic: {scorer.skip.split(' (re-run')[0]}")
    needs_answer = any("answer" in f.args for f in scorer.rubric.functions)
    tasks: dict[tuple[tuple[str, str], ...], Task] = {}
    for t in env.tasks:
        tasks.setdefault(conversation_turns(t.prompt), t)
    out = TrafficScores(env.name, env.version)
    jobs: list[Rollout] = []
    for row in rows:
        prompt = orjson.loads(row["prompt"] or "[]")
        task = tasks.get(conversation_turns(prompt))
        if task is None and needs_answer:
            out.skipped[UNMATCHED] += 1
            continue
        out.matched += task is not None
        jobs.append(_rollout(row, task, prompt))
    sem = asyncio.Semaphore(concurrency)

    async def one(r: Rollout) -> None:
        async with sem:
            scores = await scorer.rubric.score_rollout(r.score_context())
        out.totals[r.id] = scores.total
        for fn, message in scores.errors:
            out.error_examples.setdefault(fn, message)
        for fn in {fn for fn, _ in scores.errors}:
            out.errors[fn] += 1

    await asyncio.gather(*(one(r) for r in jobs))
    return out


__all__ = ["UNMATCHED", "TrafficScores", "conversation_turns", "score_traffic"]
