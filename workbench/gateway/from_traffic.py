"""``workbench tasks from-traffic``: the conversations a product's traffic held, as a new environment.

Each recorded exchange (``recorder.py``) whose feedback is at least ``min_feedback`` (its own feedback, else its
session's; every exchange when no minimum is asked) is a task: the conversation as the product sent it (up to
its user turn) is the prompt, the answer it got is the reference. Near-duplicates are removed (the same words
in the conversation, compared as sets of word triples: Jaccard similarity 0.9 or more; the one with the better
feedback, then the later one, is kept). Sessions are split, never a session in both: the ``held_out`` fraction
of them (chosen by a hash of the session, so the same traffic splits the same way) are the held-out tasks, and
they are written last, so ``workbench train ENV --loop.eval_tasks N`` holds exactly them out.

The folder (written beside its target and moved into place whole) holds ``tasks.jsonl``, an ``__init__.py``
whose rubric is a judge comparing each reply with the reference (``traffic_env.py``; the judge is a registered
model named in the file, or ``none``) plus the user's own rubric when ``--rubric FILE`` names one (copied in as
``rubric.py``), and a ``README.md`` saying where the tasks came from and how many texts were redacted when they
were recorded.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from workbench.errors import ConfigError, EnvLoadError
from workbench.fsutil import staged_folder
from workbench.store.traffic import traffic_exchanges

from .traffic_env import DEFAULT_JUDGE, NO_JUDGE, RUBRIC_FILE, TASKS_FILE, user_rubric

SIMILAR = 0.9

_INIT = '''"""{name}: tasks from a product's own traffic through `workbench gateway` (README.md says which).

Each task is a conversation the product held, up to its user turn; the reference is the answer it got. The
rubric asks the judge model whether a reply says what the reference says. `load_environment(split=...)`
takes "all" (the default), "train" or "held_out".
"""

from __future__ import annotations

from pathlib import Path

import workbench as wb
from workbench.gateway.traffic_env import build_environment

#: The registered model (or "local", the embedded one) that judges replies against the references.
JUDGE = {judge!r}


def load_environment(split: str = "all", judge: str = JUDGE) -> wb.Environment:
    return build_environment(Path(__file__).resolve().parent, name={name!r}, split=split, judge=judge)
'''


@dataclass(frozen=True, slots=True)
class TrafficTasks:
    """What ``from-traffic`` wrote."""

    path: str
    name: str
    tasks: int
    train: int
    held_out: int
    sessions: int
    held_out_sessions: int
    exchanges: int
    below_feedback: int
    duplicates: int
    redactions: int
    judge: str
    rubric: list[str]  # the functions --rubric added

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _words(prompt: list[dict[str, Any]]) -> set[tuple[str, ...]]:
    text = " ".join(str(m.get("content") or "") for m in prompt if isinstance(m, dict)).lower()
    words = re.findall(r"\w+", text)
    return {tuple(words[i:i + 3]) for i in range(max(1, len(words) - 2))} if words else {()}


def _similar(a: set[tuple[str, ...]], b: set[tuple[str, ...]]) -> bool:
    return len(a & b) / len(a | b) >= SIMILAR


def _held_out_sessions(sessions: list[str], fraction: float) -> set[str]:
    if fraction <= 0 or len(sessions) < 2:
        return set()
    ranked = sorted(sessions, key=lambda s: hashlib.sha256(s.encode()).hexdigest())
    n = min(len(sessions) - 1, max(1, round(fraction * len(sessions))))
    return set(ranked[:n])


def check_held_out(held_out: float) -> None:
    if not 0.0 <= held_out < 1.0:
        raise ConfigError(f"--held-out {held_out:g}: the fraction of sessions held out, at least 0 and below 1")


def parse_since(text: str | None) -> float | None:
    """``--since``: a date (``2026-12-01``), a date and time (``2026-12-01T09:30``), or a Unix time."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"):
        try:
            return time.mktime(time.strptime(text, fmt))
        except ValueError:
            continue
    raise ConfigError(f"--since {text!r}: give a date (2026-12-01), a date and time (2026-12-01T09:30) or a Unix time")


class RubricFile(NamedTuple):
    """A checked ``--rubric FILE``: the file, resolved (None without one), and the functions its ``rubric`` adds."""

    path: Path | None
    names: list[str]


def check_rubric(rubric: str | Path | None, judge: str) -> RubricFile:
    """``--rubric FILE`` checked against ``--judge``: the file loads and defines a rubric, and some reward is left."""
    if rubric is None:
        if judge == NO_JUDGE:
            raise ConfigError(f"--judge {NO_JUDGE} needs --rubric FILE: the environment would have no reward")
        return RubricFile(None, [])
    path = Path(rubric).expanduser().resolve()
    if not path.is_file() or path.suffix != ".py":
        raise ConfigError(f"--rubric {rubric}: not a Python file (.py) that defines `rubric`")
    try:
        theirs = user_rubric(path)
    except EnvLoadError as e:
        raise ConfigError(f"--rubric {e}") from None
    if judge == NO_JUDGE and not theirs.rewards:
        raise ConfigError(f"--rubric {rubric}: its rubric has no reward, and --judge {NO_JUDGE} leaves none")
    return RubricFile(path, [f.name for f in theirs.functions])


def from_traffic(conn: Any, out: str | Path, *, app: str | None = None, since: str | None = None,
                 min_feedback: float | None = None, held_out: float = 0.2, judge: str = DEFAULT_JUDGE,
                 rubric: str | Path | RubricFile | None = None) -> TrafficTasks:
    """Write the environment folder ``out`` (absent or empty) from the store's traffic; nothing is written when
    anything is refused. ``rubric`` is a file, or one :func:`check_rubric` already checked."""
    check_held_out(held_out)
    extra, extra_names = rubric if isinstance(rubric, RubricFile) else check_rubric(rubric, judge)
    target = Path(out).expanduser().resolve()
    name = target.name
    if not name.isidentifier():
        raise ConfigError(f"{out}: an environment's folder name is its module name; {name!r} is not a Python "
                          "name (letters, digits, _)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{out} exists and is not an empty folder; nothing was written")
    rows = traffic_exchanges(conn, app=app, since=parse_since(since))
    if not rows:
        where = f" of app {app!r}" if app else ""
        raise ConfigError(f"the store holds no gateway traffic{where}" + (f" since {since}" if since else "") +
                          "; nothing was written (`workbench gateway` records it)")
    below = 0
    kept: list[dict[str, Any]] = []
    redactions = 0
    for row in rows:
        if min_feedback is not None and (row["feedback"] is None or row["feedback"] < min_feedback):
            below += 1
            continue
        prompt = orjson.loads(row["prompt"] or "[]")
        state = orjson.loads(row["state"] or "{}")
        if not isinstance(prompt, list) or not prompt or not row["completion"]:
            continue
        redactions += int(state.get("redactions") or 0)
        kept.append({"prompt": prompt, "answer": row["completion"], "session": str(state.get("session") or row["id"]),
                     "response_id": row["id"], "app": row["app"], "feedback": row["feedback"],
                     "created_at": row["created_at"], "shingles": _words(prompt)})
    if not kept:
        raise ConfigError(f"no recorded exchange has feedback of at least {min_feedback:g}; nothing was written "
                          f"({below} below it)" if min_feedback is not None else
                          "no recorded exchange holds a conversation and an answer; nothing was written")
    # better feedback first, then newer: the one kept of near-duplicates
    kept.sort(key=lambda t: (-(t["feedback"] if t["feedback"] is not None else float("-inf")), -t["created_at"]))
    unique: list[dict[str, Any]] = []
    for t in kept:
        if not any(_similar(t["shingles"], u["shingles"]) for u in unique):
            unique.append(t)
    duplicates = len(kept) - len(unique)
    sessions = sorted({t["session"] for t in unique})
    held = _held_out_sessions(sessions, held_out)
    unique.sort(key=lambda t: (t["session"] in held, t["created_at"]))
    lines = []
    for t in unique:
        split = "held_out" if t["session"] in held else "train"
        info = {"split": split, "session": t["session"], "response_id": t["response_id"], "app": t["app"],
                "feedback": t["feedback"]}
        lines.append(orjson.dumps({"prompt": t["prompt"], "answer": t["answer"], "info": info}))
    n_held = sum(1 for t in unique if t["session"] in held)
    result = TrafficTasks(str(target), name, len(unique), len(unique) - n_held, n_held, len(sessions), len(held),
                          len(rows), below, duplicates, redactions, judge, extra_names)
    try:
        with staged_folder(target) as staging:
            (staging / TASKS_FILE).write_bytes(b"\n".join(lines) + b"\n")
            (staging / "__init__.py").write_text(_INIT.format(name=name, judge=judge), encoding="utf-8")
            if extra is not None:
                (staging / RUBRIC_FILE).write_bytes(extra.read_bytes())
            (staging / "README.md").write_text(_readme(result, app, since, min_feedback, held_out), encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot write {out} ({e.strerror or e}); nothing was written") from None
    return result


def _readme(r: TrafficTasks, app: str | None, since: str | None, min_feedback: float | None, held_out: float) -> str:
    judged = ("no judge." if r.judge == NO_JUDGE else
              f"the judge `{r.judge}` says whether a reply says what the reference says (`similar_to_reference`, "
              f"0 to 1). Change the judge with `-a '{{\"judge\": \"NAME\"}}'` or `JUDGE` in `__init__.py`.")
    added = (f"\n- Your own rubric (`{RUBRIC_FILE}`, given with `--rubric`) adds: "
             + ", ".join(f"`{n}`" for n in r.rubric) + ".") if r.rubric else ""
    picked = [f"the app {app!r}" if app else "every app", f"since {since}" if since else "all recorded time",
              f"feedback of at least {min_feedback:g}" if min_feedback is not None else "any feedback or none"]
    return f"""# {r.name}

Tasks from a product's own traffic, recorded by `workbench gateway` and written by
`workbench tasks from-traffic` on {time.strftime('%Y-%m-%d %H:%M')}.

- Picked: {', '.join(picked)}.
- Exchanges read: {r.exchanges}; below the feedback asked for: {r.below_feedback}; near-duplicates removed
  (Jaccard similarity of word triples {SIMILAR} or more): {r.duplicates}.
- Tasks: {r.tasks} from {r.sessions} sessions. Each task is a conversation up to its user turn; its reference
  is the answer it got.
- Split by session (no session in both): {r.train} training tasks; {r.held_out} held-out tasks from
  {r.held_out_sessions} sessions ({held_out:g} of the sessions), written last:
  `workbench train {r.name} --loop.eval_tasks {r.held_out}` holds exactly them out.
- Redactions made when the traffic was recorded (keys, tokens, email addresses, phone and card numbers):
  {r.redactions}.
- Rubric: {judged}{added}
"""


__all__ = ["RubricFile", "TrafficTasks", "check_held_out", "check_rubric", "from_traffic", "parse_since"]
