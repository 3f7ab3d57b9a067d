"""Reading conversation files for ``workbench import``: what every reader yields, the checks they share,
and the OpenAI chat JSONL reader (a verifiers ``vf-eval -s`` results directory is read by
``import_verifiers``, an Inspect AI ``.eval`` log by ``import_inspect``; ``import_sources`` picks one).

Each reader yields :class:`Conversation` objects and :class:`Problem` objects (a line or sample that
cannot be imported, with its place in the file and why), in file order, so the importer keeps every
valid conversation and reports every bad one. A file that is not in the format at all (nothing in it
parses, or it is not that kind of file) raises a :class:`~workbench.errors.ConfigError` instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.records.rollout import _text

_NO_SCORES: dict[str, float] = {}  # shared, never changed: a conversation the file gave no scores
_NO_INFO: dict[str, Any] = {}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: The longest line (one conversation) a JSONL file may hold, and the largest ``metadata.json``: what is
#: read into memory at once is bounded, whatever the file holds.
MAX_LINE_BYTES = 64 << 20
MAX_META_BYTES = 16 << 20


@dataclass(slots=True)
class Conversation:
    """One imported conversation: its messages as OpenAI chat dicts, what the file says about it."""

    messages: list[dict[str, Any]]
    where: str  # "line 3", "sample 7 (epoch 1)": how the report names it
    shape: Shape
    tools: list[Any] | None = None
    reward: float | None = None
    rewards: dict[str, float] = field(default_factory=dict)  # per reward function, when the file has them
    metrics: dict[str, float] = field(default_factory=dict)
    id: str | None = None  # the file's own id of the conversation
    metadata: dict[str, Any] = field(default_factory=dict)
    answer: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    group: Any = None  # conversations of one task share it (verifiers' example_id, inspect's sample id)
    model: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Problem:
    where: str  # "line 3"
    line: int  # the line (or sample) number
    reason: str


@dataclass(slots=True)
class Source:
    """What a reader found about the file as a whole."""

    format: str
    path: Path
    files: list[Path]  # the files whose bytes make the content hash
    env_name: str | None = None  # verifiers' env_id, inspect's task
    model: str | None = None


def as_number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        try:
            x = float(v)
        except OverflowError:  # an integer past a float's range
            return None
        return x if math.isfinite(x) else None
    return None


def finite_total(values: dict[str, float]) -> float | str:
    """The sum of named rewards, or why it has none: finite rewards can add up past a float's range."""
    try:
        total = math.fsum(values.values())
    except OverflowError:
        total = math.inf
    if not math.isfinite(total):
        return "the rewards add up past a float's range (a non-finite total); a reward must be a finite number"
    return total


@dataclass(frozen=True, slots=True)
class Shape:
    """What one pass over a valid conversation found: where the model first speaks, how often, what it said last."""

    first_assistant: int
    turns: int
    completion: str


def _content_problem(content: Any, i: int) -> str | None:
    """Why a message's content is neither text nor a list of typed parts (text parts holding text)."""
    if content is None or type(content) is str:
        return None
    if type(content) is not list:
        return f"message {i} has content that is neither text nor a list of parts"
    for j, part in enumerate(content):
        if type(part) is not dict or type(part.get("type")) is not str:
            return f"message {i} content part {j} is not an object with a 'type'"
        if "text" in part and type(part["text"]) is not str:
            return f"message {i} content part {j} has a 'text' that is not a string"
    return None


def _calls_problem(calls: Any, i: int) -> str | None:
    """Why a message's ``tool_calls`` are not OpenAI tool calls (a function name; arguments a JSON string
    or an object)."""
    if type(calls) is not list:
        return f"message {i} has 'tool_calls' that is not a list"
    for j, tc in enumerate(calls):
        fn = tc.get("function") if type(tc) is dict else None
        if type(fn) is not dict or type(fn.get("name")) is not str:
            return f"message {i} tool call {j} is not an object with a function name"
        args = fn.get("arguments")
        if args is not None and type(args) is not str and type(args) is not dict:
            return f"message {i} tool call {j} has arguments that are neither a JSON string nor an object"
        if tc.get("id") is not None and type(tc["id"]) is not str:
            return f"message {i} tool call {j} has an 'id' that is not a string"
    return None


def check_messages(messages: Any) -> str | Shape:
    """Why ``messages`` is not an importable conversation, or its :class:`Shape`. Every field a reader
    of the stored conversation relies on is checked here, so what passes can be stored, searched,
    rendered and exported."""
    if type(messages) is not list or not messages:
        return "'messages' is not a non-empty list of messages"
    first, turns, last = -1, 0, None
    for i, m in enumerate(messages):
        if type(m) is not dict:
            return f"message {i} is not an object"
        role = m.get("role")
        if type(role) is not str or role not in _ROLES:
            return f"message {i} has no valid role (got {short_repr(role)})"
        content = m.get("content")
        if content is not None and type(content) is not str and (why := _content_problem(content, i)):
            return why
        if (calls := m.get("tool_calls")) is not None and (why := _calls_problem(calls, i)):
            return why
        for key in ("tool_call_id", "name"):
            if m.get(key) is not None and type(m[key]) is not str:
                return f"message {i} has a {key!r} that is not a string"
        if role == "assistant":
            if first < 0:
                first = i
            turns += 1
            last = content
    if first < 0:
        return "the conversation has no assistant turn (nothing a model said to import)"
    return Shape(first, turns, last if type(last) is str else _text(last))


def short_repr(v: Any) -> str:
    """A value from the file, named in a reason: its repr, cut short."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def decoded(v: Any, kind: type) -> Any:
    """``v``, or the value of ``kind`` a JSON string ``v`` holds (how an SFT export writes its ``metadata``
    and ``tools`` columns)."""
    if type(v) is str and v[:1] in "{[":
        try:
            x = orjson.loads(v)
        except orjson.JSONDecodeError:
            return v
        return x if type(x) is kind else v
    return v


def info_object(v: Any, where: str) -> dict[str, Any] | str:
    """A conversation's ``info`` (an object), or why it is not one."""
    if v is None:
        return _NO_INFO
    if type(v) is dict:
        return v
    return f"'info' is not an object (got {type(v).__name__}); a task's info is a JSON object"


# -- OpenAI chat JSONL ----------------------------------------------------------------------------------
def _scores(obj: dict[str, Any], where: str) -> tuple[float | None, dict[str, float], str | None]:
    reward = obj.get("reward")
    rewards = obj.get("rewards")
    total = None
    if reward is not None:
        total = as_number(reward)
        if total is None:
            return None, {}, f"'reward' is not a finite number (got {short_repr(reward)})"
    named: dict[str, float] = {}
    if rewards is not None:
        if isinstance(rewards, dict):
            for k, v in rewards.items():
                if (x := as_number(v)) is None:
                    return None, {}, f"'rewards' value {short_repr(k)} is not a finite number (got {short_repr(v)})"
                named[str(k)] = x
        elif isinstance(rewards, list) and len(rewards) == 1 and (x := as_number(rewards[0])) is not None:
            total = x if total is None else total
        else:
            return None, {}, "'rewards' is not an object of named numbers"
        if total is None and named:
            if isinstance(t := finite_total(named), str):
                return None, {}, t
            total = t
    return total, named, None


def json_lines(path: Path, label: str) -> Iterator[tuple[int, str, Any]]:
    """(line number, "LABEL N", the line's JSON value or a :class:`Problem` saying why it has none) for
    each non-blank line of a JSONL file."""
    with open(path, "rb") as f:
        n = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            n += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                    pass  # the rest of the long line, read and dropped a MiB at a time
                yield n, f"{label} {n}", Problem(f"{label} {n}", n, f"the line is over {MAX_LINE_BYTES >> 20} MiB; "
                                                 "one conversation a line must be shorter")
                continue
            if not raw.strip():
                continue
            where = f"{label} {n}"
            try:
                yield n, where, orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                cut = "" if raw.endswith(b"\n") else " (the line is cut off: a truncated file?)"
                yield n, where, Problem(where, n, f"not valid JSON{cut}: {str(e).split(':')[0]}")


def read_openai_jsonl(path: Path) -> tuple[Source, Iterator[Conversation | Problem]]:
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not an OpenAI chat JSONL file; give the .jsonl file "
                          "(or --format verifiers for a vf-eval results directory)")
    source = Source("openai-jsonl", path, [path])

    def rows() -> Iterator[Conversation | Problem]:
        for n, where, obj in json_lines(path, "line"):
            if isinstance(obj, Problem):
                yield obj
                continue
            if not isinstance(obj, dict):
                yield Problem(where, n, "not a JSON object")
                continue
            if "messages" not in obj:
                yield Problem(where, n, "no 'messages' field")
                continue
            if isinstance(shape := check_messages(obj["messages"]), str):
                yield Problem(where, n, shape)
                continue
            reward, rewards = None, _NO_SCORES
            if "reward" in obj or "rewards" in obj:
                reward, rewards, why = _scores(obj, where)
                if why is not None:
                    yield Problem(where, n, why)
                    continue
            meta = decoded(obj.get("metadata"), dict)  # `workbench export` writes it as a JSON string
            meta = meta if type(meta) is dict else ({} if meta is None else {"metadata": meta})
            if isinstance(info := info_object(obj["info"] if "info" in obj else meta.get("info"), where), str):
                yield Problem(where, n, info)
                continue
            tools = decoded(obj.get("tools"), list)
            rid = obj.get("id")
            model = obj.get("model") or meta.get("model")
            yield Conversation(
                obj["messages"], where, shape, tools if type(tools) is list else None, reward, rewards, _NO_SCORES,
                None if rid is None else str(rid), meta, obj.get("answer", meta.get("answer")), info, None,
                model if type(model) is str else None)

    return source, rows()
