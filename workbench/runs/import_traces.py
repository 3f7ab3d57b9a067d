"""``workbench import``: conversations from a file become the rollouts of an imported run.

The file is read by the reader ``import_sources`` picks (OpenAI chat JSONL, a verifiers results directory,
an Inspect AI log); every conversation it holds becomes a rollout with ``source = 'imported'``, its
rewards kept where the file has them, and every line that cannot be imported is reported with its
place in the file, never silently dropped. The run (``kind = 'import'``) records the file, the format
and the SHA-256 of the file's bytes: importing the same content again is refused and names the run
that holds it.

With an environment (``--env``) the run is one of that environment's runs, so ``workbench rescore ENV
--run RUN`` scores the imported conversations with its rubric; a conversation whose first user turn
is one of the environment's task prompts takes that task (its id, answer and info), so a reward that
compares with the answer has one.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.records.rollout import _text, searchable_text
from workbench.runs.import_formats import Conversation, Problem, Source
from workbench.runs.import_sources import check_kind, open_source
from workbench.store import RUN_DEFAULTS, Store, dumps
from workbench.store.imports import AlreadyImported, ImportRow, NothingToImport, find_import, write_import

_KEPT_PROBLEMS = 1000  # problems stored with the run (all are counted)
_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _dumps(obj: Any) -> str:
    """``store.dumps`` without its call through: this runs several times per imported conversation."""
    return orjson.dumps(obj, option=_OPTS, default=repr).decode()


@dataclass(slots=True)
class ImportResult:
    run_id: str
    file: str
    format: str
    sha256: str
    env: str
    env_version: str
    model: str
    rollouts: int = 0
    rewarded: int = 0
    matched: int | None = None  # with an environment: conversations whose first user turn is one of its tasks
    problems: list[Problem] = field(default_factory=list)
    mean_reward: float | None = None
    wall_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "rollouts": self.rollouts, "rewarded": self.rewarded, "matched": self.matched,
                "skipped": len(self.problems),
                "problems": [{"line": p.line, "where": p.where, "reason": p.reason} for p in self.problems],
                "file": self.file, "format": self.format, "sha256": self.sha256, "env": self.env,
                "env_version": self.env_version, "model": self.model, "mean_reward": self.mean_reward,
                "wall_s": self.wall_s,
                "conversations_per_s": self.rollouts / self.wall_s if self.wall_s > 0 else None}


def new_run_id() -> str:
    """A run id like eval's (``MMDD-xxxxxx``)."""
    return time.strftime("%m%d") + "-" + secrets.token_hex(3)


def file_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\x00")
    return h.hexdigest()


def _first_user_text(messages: Any) -> str | None:
    if isinstance(messages, str):
        return messages
    for m in messages or ():
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else _text(c)
    return None


class _Tasks:
    """Which task each conversation is: an environment's task its first user turn matches, else one
    task per group of the file (or per conversation)."""

    def __init__(self, env: Any | None) -> None:
        self.by_prompt: dict[str, tuple[int, Any]] = {}
        self.offset = 0
        if env is not None:
            tasks = list(env.tasks)
            self.offset = len(tasks)
            for i, t in enumerate(tasks):
                key = _first_user_text(t.prompt)
                if key is not None:
                    self.by_prompt.setdefault(key, (i, t))
        self.groups: dict[Any, int] = {}
        self.samples: dict[int, int] = {}
        self.next = self.offset  # the next task index of the file's own
        self.matched = 0

    def place(self, c: Conversation, prompt: list[dict[str, Any]]) -> tuple[int, int, Any]:
        """(task index, sample index, the matched task or None)."""
        if c.group is None and not self.by_prompt:  # a task of its own
            index, self.next = self.next, self.next + 1
            self.samples[index] = 1
            return index, 0, None
        task = None
        key = _first_user_text(prompt) if self.by_prompt else None
        if key is not None and key in self.by_prompt:
            index, task = self.by_prompt[key]
            self.matched += 1
        elif c.group is not None and (g := c.group if isinstance(c.group, str | int | float) else dumps(c.group)) \
                in self.groups:
            index = self.groups[g]
        else:
            index, self.next = self.next, self.next + 1
            if c.group is not None:
                self.groups[g] = index
        sample = self.samples.get(index, 0)
        self.samples[index] = sample + 1
        return index, sample, task


class _Mean:
    """A running mean that stays finite for any finite values (a plain sum of 1e308s would not)."""

    __slots__ = ("mean", "n")

    def __init__(self) -> None:
        self.mean, self.n = 0.0, 0

    def add(self, x: float) -> None:
        self.n += 1
        self.mean += x / self.n - self.mean / self.n

    @property
    def value(self) -> float | None:
        return self.mean if self.n else None


def _rows(conversations: Iterator[Conversation | Problem], problems: list[Problem], tasks: _Tasks,
          model: Callable[[Conversation], str], mean: _Mean, fmt: str) -> Iterator[ImportRow]:
    for c in conversations:
        if isinstance(c, Problem):
            problems.append(c)
            continue
        try:
            row = _row(c, tasks, model, fmt)
        except (TypeError, ValueError) as e:  # JSON that cannot be stored: nested past orjson's limit
            why = "it is nested too deeply to store (over 254 levels of JSON)" if "Recursion" in str(e) \
                else f"it cannot be stored as JSON ({e})"
            problems.append(Problem(c.where, _line(c.where), why))
            continue
        if c.reward is not None:
            mean.add(c.reward)
        yield row


def _line(where: str) -> int:
    number = where.rsplit(" ", 1)[-1]
    return int(number) if number.isdigit() else 0


def _row(c: Conversation, tasks: _Tasks, model: Callable[[Conversation], str], fmt: str) -> ImportRow:
    """One conversation as a store row: every JSON field is encoded before the conversation takes a task,
    so one that cannot be encoded is a problem of its own line and changes nothing else."""
    msgs, shape = c.messages, c.shape
    prompt = msgs[:shape.first_assistant]
    prompt_json, messages_json = _dumps(prompt), _dumps(msgs)
    imported = _provenance(c, fmt)
    state = _dumps({"import": imported})
    answer_json = "null" if c.answer is None else _dumps(c.answer)
    info_json = _dumps(c.info) if c.info else "{}"
    index, sample, task = tasks.place(c, prompt)
    if task is not None:
        task_id = task.id
        if c.answer in (None, ""):
            answer_json = "null" if task.answer is None else _dumps(task.answer)
        if task.info:
            info_json = _dumps({**task.info, **c.info})
    else:
        task_id = hashlib.sha256(f"{prompt_json}\x00{answer_json}".encode()).hexdigest()[:16]
    if tasks.by_prompt:  # imported with an environment: whether it took one of its tasks (rescore asks)
        imported["matched_task"] = task is not None
        state = _dumps({"import": imported})
    return ImportRow(task_id, index, sample, c.reward, prompt_json, answer_json, info_json, shape.completion,
                     messages_json, searchable_text(msgs), state, shape.turns, c.rewards, c.metrics, model(c),
                     c.prompt_tokens, c.completion_tokens, c.duration_s)


def _provenance(c: Conversation, fmt: str) -> dict[str, Any]:
    """What a rollout's state says of where it came from."""
    imported: dict[str, Any] = {"format": fmt, "where": c.where}
    if c.id is not None:
        imported["id"] = c.id
    if c.group is not None:
        imported["group"] = c.group
    if c.metadata:
        imported["metadata"] = c.metadata
    if c.tools:
        imported["tools"] = c.tools
    return imported


def _sniff(path: Path, fmt: str) -> None:
    """A file that is plainly another format, named in one line before anything is read."""
    if path.is_dir():
        return
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        raise ConfigError(f"{path} is empty: there are no conversations to import")
    if fmt == "openai-jsonl" and head == b"PK\x03\x04":
        raise ConfigError(f"{path} is a zip archive, not JSON lines (an Inspect AI .eval log?); "
                          "import it with --format inspect")


def import_file(store: Store, path: Path | str, fmt: str, *, env: str | None = None, model: str | None = None,
                env_args: dict[str, Any] | None = None) -> ImportResult:
    """Import the conversations of ``path`` (in format ``fmt``) as one run; see the module docstring."""
    t0 = time.perf_counter()
    path = Path(path).expanduser()
    check_kind(path)  # before anything opens it: a named pipe would block, a device be read forever
    _sniff(path, fmt)
    source: Source
    source, conversations = open_source(path, fmt)
    sha = file_hash(source.files)
    if (prior := find_import(store.conn, sha)) is not None:
        raise ConfigError(_already(source.path, prior))
    environment = None
    if env is not None:
        from workbench.authoring import discovery

        environment = discovery.load(env, env_args or {})
        store.register_env(environment.name, environment.version, environment.source, environment.description)
    env_name = environment.name if environment is not None else (source.env_name or "imported")
    run_model = model or source.model or "unknown"
    res = ImportResult(new_run_id(), str(source.path.resolve()), fmt, sha, env_name,
                       environment.version if environment is not None else "", run_model)
    tasks = _Tasks(environment)
    mean = _Mean()

    def pick_model(c: Conversation) -> str:
        return model or c.model or run_model

    config: dict[str, Any] = {"import": {"file": res.file, "format": fmt, "sha256": sha}, "env": env, "env_args": env_args or {}}
    run = {"id": res.run_id, **RUN_DEFAULTS, "kind": "import", "env_name": env_name, "env_version": res.env_version,
           "env_source": environment.source if environment is not None else "", "model": run_model,
           "harness": "imported", "config": dumps(config), "env_args": dumps(env_args or {}),
           "status": "running", "created_at": time.time()}

    def finish(n: int) -> dict[str, Any]:
        if n == 0:
            raise NothingToImport()
        res.rollouts, res.rewarded = n, mean.n
        res.mean_reward = mean.value
        res.matched = tasks.matched if environment is not None else None
        res.wall_s = time.perf_counter() - t0
        kept = [{"line": p.line, "where": p.where, "reason": p.reason} for p in res.problems[:_KEPT_PROBLEMS]]
        return {"status": "completed", "finished_at": time.time(), "n_tasks": len(tasks.samples),
                "config": {**config, "import": {**config["import"], "skipped": len(res.problems),
                                                "problems": kept, "matched_tasks": tasks.matched}},
                "summary": {"rollouts": n, "errors": 0, "mean_reward": res.mean_reward, "rewarded": res.rewarded,
                            "skipped": len(res.problems), "source": "imported", "format": fmt}}

    try:
        write_import(store.path, run, sha, _rows(conversations, res.problems, tasks, pick_model, mean, fmt), finish)
    except AlreadyImported as e:
        raise ConfigError(_already(source.path, e.run_id)) from None
    except NothingToImport:
        raise ConfigError(_nothing(source, res.problems)) from None
    except OSError as e:
        raise ConfigError(f"reading {path} failed ({e.strerror or e}); nothing was imported") from None
    res.wall_s = time.perf_counter() - t0
    return res


def _already(path: Path, run_id: str) -> str:
    return (f"{path} was already imported as run {run_id} (same content); nothing was imported again "
            f"(`workbench runs {run_id}` shows it)")


def _nothing(source: Source, problems: list[Problem]) -> str:
    if not problems:
        return f"{source.path} holds no conversations to import (it is empty)"
    p = problems[0]
    more = f" (and {len(problems) - 1} more bad)" if len(problems) > 1 else ""
    hint = "; is it another --format?" if "not valid JSON" in p.reason or "example_id" in p.reason else ""
    return f"nothing in {source.path} could be imported as {source.format}: {p.where}: {p.reason}{more}{hint}"


__all__ = ["ImportResult", "file_hash", "import_file"]
