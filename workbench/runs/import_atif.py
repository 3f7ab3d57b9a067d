"""Reading Harbor's Agent Trajectory Interchange Format (ATIF) for ``workbench import --format atif``
(see ``import_formats`` for what every reader yields; ``workbench.records.atif`` reads each step).

An ATIF trajectory is one JSON object: ``schema_version`` (``"ATIF-v1.0"`` to ``"ATIF-v1.8"``), the
``agent`` (``name``, ``version``, ``model_name``, ``tool_definitions``), ``steps`` (each with a
``step_id`` counted from 1, a ``source`` of ``system``, ``user`` or ``agent`` and a ``message``; agent
steps add ``reasoning_content``, ``tool_calls`` and ``metrics``; any step may carry an ``observation``)
and ``final_metrics``. Each trajectory becomes one conversation, its token usage the final metrics'
totals (else the sum of its steps').

The path is one trajectory file, or a folder: every ``trajectory.json`` below it (Harbor's job and
trial layout keeps one in each trial's ``agent/``, the verifier's rewards beside it in
``verifier/reward.json``, ``verifier/reward.txt`` or ``result.json``), or else every ``.json`` file
directly in it. What ``workbench export --format atif`` writes about the rollout (its reward, named
rewards, metrics, task, answer, info) is under ``extra.workbench`` of the trajectory and read back here.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.records.atif import (
    ATIF_VERSIONS,
    EXTRA,
    TRAJECTORY,
    Bad,
    maybe,
    need,
    short_repr,
    step_messages,
    workbench_extra,
)
from workbench.runs.import_formats import (
    MAX_LINE_BYTES,
    MAX_META_BYTES,
    Conversation,
    Problem,
    Source,
    as_number,
    check_messages,
    finite_total,
)


def _segment(doc: Any) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """A trajectory's (document, agent, steps), its header checked."""
    if not isinstance(doc, dict):
        raise Bad("not an ATIF trajectory (not a JSON object)")
    version = doc.get("schema_version")
    if version is None:
        raise Bad("schema_version is missing: not an ATIF trajectory (Harbor writes \"ATIF-v1.N\" there)")
    if version not in ATIF_VERSIONS:
        raise Bad(f"schema_version is {short_repr(version)}, not an ATIF version this reads "
                  f"({ATIF_VERSIONS[0]} to {ATIF_VERSIONS[-1]})")
    agent = need(doc, "agent", "", dict, "an object with name and version")
    need(agent, "name", "agent.", str, "text")
    need(agent, "version", "agent.", str, "text")
    steps = need(doc, "steps", "", list, "a list of steps")
    if not steps:
        raise Bad("steps is empty (a trajectory has at least one step)")
    return doc, agent, steps


def trajectory_conversation(doc: Any, where: str, continued: list[tuple[str, Any]] | None = None) -> Conversation:
    """One ATIF trajectory as a conversation; :class:`Bad` names the field that is not ATIF. ``continued``
    holds the (name, trajectory) of each file its ``continued_trajectory_ref`` chain names, in order:
    their steps follow, less those copied from before for context (``is_copied_context``), and the last
    one's ``final_metrics`` (Harbor's running totals) give the usage."""
    doc, agent, steps = _segment(doc)
    version = doc["schema_version"]
    messages: list[dict[str, Any]] = []
    prompt = completion = 0
    final = None
    for name, seg in [("", doc), *(continued or ())]:
        try:
            seg, _, seg_steps = _segment(seg)
            for i, step in enumerate(seg_steps):
                msgs, usage = step_messages(step, i)
                if name and step.get("is_copied_context") is True:
                    continue
                messages += msgs
                prompt += usage["prompt"]
                completion += usage["completion"]
            final = maybe(seg, "final_metrics", "", dict, "an object") or final
        except Bad as e:
            raise Bad(f"{name}: {e}" if name else str(e)) from None
    if isinstance(shape := check_messages(messages), str):
        raise Bad(shape)
    if final is not None:
        prompt = maybe(final, "total_prompt_tokens", "final_metrics.", int, "a whole number") or prompt
        completion = maybe(final, "total_completion_tokens", "final_metrics.", int, "a whole number") or completion
    tools = maybe(agent, "tool_definitions", "agent.", list, "a list of tool definitions")
    kept = workbench_extra(doc)
    model = agent.get("model_name") or next((s.get("model_name") for s in steps if s.get("model_name")), None)
    meta: dict[str, Any] = {"schema_version": version, "agent": {"name": agent["name"], "version": agent["version"]}}
    for key in ("session_id", "trajectory_id", "notes"):
        if doc.get(key) is not None:
            meta[key] = doc[key]
    if final is not None and as_number(final.get("total_cost_usd")) is not None:
        meta["total_cost_usd"] = final["total_cost_usd"]
    rid = doc.get("trajectory_id") or doc.get("session_id")
    info = kept.get("info")
    return Conversation(messages, where, shape, tools=tools or None, id=None if rid is None else str(rid),
                        metadata=meta, answer=kept.get("answer"), info=info if isinstance(info, dict) else {},
                        group=kept.get("task_id"), model=model if isinstance(model, str) else None,
                        prompt_tokens=prompt, completion_tokens=completion,
                        duration_s=as_number(kept.get("duration_s")) or 0.0)


# -- scores ---------------------------------------------------------------------------------------------
def _named(named: Any, where: str) -> dict[str, float]:
    """A flat object of named numbers (rewards, metrics)."""
    if named is None:
        return {}
    if not isinstance(named, dict):
        raise Bad(f"{where} is not an object of named numbers")
    out: dict[str, float] = {}
    for k, v in named.items():
        if (x := as_number(v)) is None:
            raise Bad(f"{where} value {short_repr(k)} is not a finite number (got {short_repr(v)})")
        out[str(k)] = x
    return out


def _scores(named: Any, where: str) -> tuple[float | None, dict[str, float]]:
    """A flat object of named rewards (Harbor's ``reward.json``) as (total, named): ``reward`` is the total
    when it is there, else the named rewards add up to it."""
    out = _named(named, where)
    if "reward" in out:
        return out.pop("reward"), out
    if not out:
        return None, out
    total = finite_total(out)
    if isinstance(total, str):
        raise Bad(f"{where}: {total}")
    return total, out


def _read_json(path: Path, limit: int) -> Any:
    if path.stat().st_size > limit:
        raise Bad(f"{path.name} is over {limit >> 20} MiB")
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        raise Bad(f"{path.name} is not valid JSON ({str(e).split(':')[0]})") from None


def trial_scores(trial: Path, root: Path) -> tuple[float | None, dict[str, float], Any]:
    """The rewards Harbor's verifier left in a trial folder (``verifier/reward.json``, else
    ``verifier/reward.txt``, else ``result.json``'s ``verifier_result``) and the trial's task name."""
    result = _inside(trial / "result.json", root)
    try:
        doc = _read_json(result, MAX_META_BYTES) if result is not None else None
    except Bad:
        doc = None  # only the task name is missed, unless the rewards are there (below)
    task = doc.get("task_name") if isinstance(doc, dict) else None
    if (path := _inside(trial / "verifier" / "reward.json", root)) is not None:
        return (*_scores(_read_json(path, MAX_META_BYTES), "verifier/reward.json"), task)
    if (path := _inside(trial / "verifier" / "reward.txt", root)) is not None:
        text = path.read_bytes()[:256].decode(errors="replace").strip()
        try:
            value = as_number(float(text))
        except ValueError:
            value = None
        if value is None:
            raise Bad(f"verifier/reward.txt does not hold a finite number (got {short_repr(text)})")
        return value, {}, task
    if result is not None and doc is None:
        _read_json(result, MAX_META_BYTES)  # the trial's result cannot be read: say why
    verified = doc.get("verifier_result") if isinstance(doc, dict) else None
    if isinstance(verified, dict) and verified.get("rewards") is not None:
        return (*_scores(verified["rewards"], "result.json verifier_result.rewards"), task)
    return None, {}, task


# -- files ----------------------------------------------------------------------------------------------
_CONTINUATION = re.compile(r"trajectory\.cont-\d+\.json")  # Harbor's name for a trajectory's continuation


def _inside(path: Path, root: Path) -> Path | None:
    """``path`` when it is a regular file whose real place is inside ``root``, else None."""
    try:
        real = path.resolve(strict=True)
        mode = real.stat().st_mode
    except (OSError, RuntimeError):
        return None
    return real if stat.S_ISREG(mode) and real.is_relative_to(root) else None


def trajectory_files(path: Path) -> list[Path]:
    """The trajectories a path holds: itself, every ``trajectory.json`` below a folder (Harbor's layout
    keeps it in each trial's ``agent/``), or else every ``.json`` file directly in it; only regular files
    inside the folder."""
    root = path.resolve()
    if not path.is_dir():
        return [root]
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):  # symlinked folders are not walked into
        dirs.sort()
        if TRAJECTORY in files and (real := _inside(Path(folder) / TRAJECTORY, root)) is not None:
            found.append(real)
    if not found:  # a continuation is read with the trajectory it continues
        found = sorted(real for p in root.iterdir() if p.suffix == ".json" and not _CONTINUATION.fullmatch(p.name)
                       and (real := _inside(p, root)) is not None)
    if not found:
        raise ConfigError(f"{path} holds no ATIF trajectories (no {TRAJECTORY} below it, no .json file in "
                          "it); give a trajectory file, or a Harbor job or trial folder")
    return found


def _in_trial(f: Path) -> bool:
    return f.name == TRAJECTORY and f.parent.name == "agent"


def read_atif(path: Path) -> tuple[Source, Iterator[Conversation | Problem]]:
    files = trajectory_files(path)
    # a trial's own trajectory file reads the scores of its trial folder
    root = path.resolve() if path.is_dir() else files[0].parent.parent if _in_trial(files[0]) else files[0].parent
    hashed = list(files)
    for folder in dict.fromkeys(f.parent for f in files):
        hashed += sorted(real for p in folder.iterdir() if _CONTINUATION.fullmatch(p.name)
                         and (real := _inside(p, root)) is not None)
    trials = [f.parent.parent for f in files if _in_trial(f)]
    for trial in trials:
        hashed += [p for name in ("verifier/reward.json", "verifier/reward.txt", "result.json")
                   if (p := _inside(trial / name, root)) is not None]
    source = Source("atif", path, hashed, model=_first_model(files[0]))

    def rows() -> Iterator[Conversation | Problem]:
        for n, f in enumerate(files, 1):
            where = f.relative_to(root).as_posix() if f != root else f.name
            try:
                yield _conversation(f, where, root)
            except Bad as e:
                yield Problem(where, n, str(e))
            except OSError as e:
                yield Problem(where, n, f"cannot be read ({e.strerror or e})")

    return source, rows()


def _first_model(f: Path) -> str | None:
    """The run's model: the first trajectory's agent's (each rollout keeps its own)."""
    try:
        if f.stat().st_size <= MAX_LINE_BYTES:
            agent = orjson.loads(f.read_bytes()).get("agent")
            model = agent.get("model_name") if isinstance(agent, dict) else None
            return model if isinstance(model, str) and model else None
    except (OSError, orjson.JSONDecodeError, AttributeError):
        pass
    return None


def _load(f: Path) -> Any:
    if f.stat().st_size > MAX_LINE_BYTES:
        raise Bad(f"the file is over {MAX_LINE_BYTES >> 20} MiB, more than one trajectory holds")
    try:
        return orjson.loads(f.read_bytes())
    except orjson.JSONDecodeError as e:
        raise Bad(f"not valid JSON: {str(e).split(':')[0]}") from None


def _continued(f: Path, doc: Any) -> list[tuple[str, Any]]:
    """The trajectories ``doc``'s ``continued_trajectory_ref`` chain names, files beside ``f``."""
    chain: list[tuple[str, Any]] = []
    seen = {f}
    while isinstance(doc, dict) and isinstance(ref := doc.get("continued_trajectory_ref"), str):
        nxt = _inside(f.parent / ref, f.parent)
        if nxt is None:
            raise Bad(f"continued_trajectory_ref {short_repr(ref)} names no file beside it")
        if nxt in seen:
            raise Bad(f"continued_trajectory_ref {short_repr(ref)} leads back to a trajectory already read")
        seen.add(nxt)
        try:
            doc = _load(nxt)
        except Bad as e:
            raise Bad(f"{ref}: {e}") from None
        chain.append((ref, doc))
    return chain


def _conversation(f: Path, where: str, root: Path) -> Conversation:
    doc = _load(f)
    c = trajectory_conversation(doc, where, _continued(f, doc))
    kept = workbench_extra(doc)
    if "reward" in kept:  # what Workbench exported: its own record of the scores
        c.reward = as_number(kept["reward"])
        if kept["reward"] is not None and c.reward is None:
            raise Bad(f"extra.{EXTRA}.reward is not a finite number (got {short_repr(kept['reward'])})")
        c.rewards = _named(kept.get("rewards"), f"extra.{EXTRA}.rewards")
        c.metrics = _named(kept.get("metrics"), f"extra.{EXTRA}.metrics")
    elif _in_trial(f):
        try:
            c.reward, c.rewards, task = trial_scores(f.parent.parent, root)
        except Bad as e:
            raise Bad(f"its trial's {e}") from None
        if c.group is None and isinstance(task, str):
            c.group = task
    return c
