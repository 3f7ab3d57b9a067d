"""Reading conversation files for ``workbench import``: OpenAI chat JSONL, a verifiers ``vf-eval -s``
results directory, an Inspect AI ``.eval`` log.

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
from workbench.rollouts.rollout import _text

FORMATS = ("openai-jsonl", "verifiers", "inspect")
_NO_SCORES: dict[str, float] = {}  # shared, never changed: a conversation the file gave no scores
_NO_INFO: dict[str, Any] = {}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


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


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float) and math.isfinite(float(v)):
        return float(v)
    return None


@dataclass(frozen=True, slots=True)
class Shape:
    """What one pass over a valid conversation found: where the model first speaks, how often, what it said last."""

    first_assistant: int
    turns: int
    completion: str


def check_messages(messages: Any) -> str | Shape:
    """Why ``messages`` is not an importable conversation, or its :class:`Shape`."""
    if type(messages) is not list or not messages:
        return "'messages' is not a non-empty list of messages"
    first, turns, last = -1, 0, None
    for i, m in enumerate(messages):
        if type(m) is not dict:
            return f"message {i} is not an object"
        role = m.get("role")
        if role not in _ROLES:
            return f"message {i} has no valid role (got {role!r})"
        content = m.get("content")
        if content is not None and type(content) is not str and type(content) is not list:
            return f"message {i} has content that is neither text nor a list of parts"
        if role == "assistant":
            if first < 0:
                first = i
            turns += 1
            last = content
    if first < 0:
        return "the conversation has no assistant turn (nothing a model said to import)"
    return Shape(first, turns, last if type(last) is str else _text(last))


# -- OpenAI chat JSONL ----------------------------------------------------------------------------------
def _scores(obj: dict[str, Any], where: str) -> tuple[float | None, dict[str, float], str | None]:
    reward = obj.get("reward")
    rewards = obj.get("rewards")
    total = None
    if reward is not None:
        total = _number(reward)
        if total is None:
            return None, {}, f"'reward' is not a number (got {reward!r})"
    named: dict[str, float] = {}
    if rewards is not None:
        if isinstance(rewards, dict):
            for k, v in rewards.items():
                if (x := _number(v)) is None:
                    return None, {}, f"'rewards' value {k!r} is not a number"
                named[str(k)] = x
        elif isinstance(rewards, list) and len(rewards) == 1 and (x := _number(rewards[0])) is not None:
            total = x if total is None else total
        else:
            return None, {}, "'rewards' is not an object of named numbers"
        if total is None and named:
            total = sum(named.values())
    return total, named, None


def _json_lines(path: Path, label: str) -> Iterator[tuple[int, str, Any]]:
    """(line number, "LABEL N", the line's JSON value or a :class:`Problem` saying why it has none) for
    each non-blank line of a JSONL file."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, start=1):
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
        for n, where, obj in _json_lines(path, "line"):
            if isinstance(obj, Problem):
                yield obj
                continue
            if not isinstance(obj, dict):
                yield Problem(where, n, "not a JSON object")
                continue
            if "messages" not in obj:
                yield Problem(where, n, "no 'messages' field")
                continue
            if type(shape := check_messages(obj["messages"])) is str:
                yield Problem(where, n, shape)
                continue
            reward, rewards = None, _NO_SCORES
            if "reward" in obj or "rewards" in obj:
                reward, rewards, why = _scores(obj, where)
                if why is not None:
                    yield Problem(where, n, why)
                    continue
            meta = obj.get("metadata")
            meta = meta if type(meta) is dict else ({} if meta is None else {"metadata": meta})
            tools = obj.get("tools")
            rid = obj.get("id")
            yield Conversation(
                obj["messages"], where, shape, tools if type(tools) is list else None, reward, rewards, _NO_SCORES,
                None if rid is None else str(rid), meta, obj.get("answer", meta.get("answer")),
                meta.get("info") or _NO_INFO, None, obj.get("model") or meta.get("model"))

    return source, rows()


# -- verifiers vf-eval -s ------------------------------------------------------------------------------
_VF_FIELDS = frozenset({"example_id", "prompt", "completion", "answer", "info", "reward", "error", "timing",
                        "is_completed", "is_truncated", "stop_condition", "metrics", "tool_defs", "token_usage",
                        "error_chain", "long_error_chain", "task", "trajectory"})


def _vf_messages(v: Any) -> list[dict[str, Any]] | None:
    if v is None:
        return []
    if isinstance(v, str):
        return [{"role": "user", "content": v}]
    return v if isinstance(v, list) else None


def read_verifiers(path: Path) -> tuple[Source, Iterator[Conversation | Problem]]:
    """A ``vf-eval -s`` results directory: ``results.jsonl`` (one rollout output a line: ``example_id``,
    ``prompt``, ``completion``, ``answer``, ``info``, ``reward``, ``metrics`` (also flattened to top-level
    keys), ``timing``, ``token_usage``, ...) beside ``metadata.json`` (``env_id``, ``model``, ...)."""
    if not path.is_dir():
        if path.name == "results.jsonl" and (path.parent / "metadata.json").is_file():
            path = path.parent
        else:
            raise ConfigError(f"{path} is not a verifiers results directory (vf-eval -s writes a folder holding "
                              "results.jsonl and metadata.json); give that folder, or use --format openai-jsonl")
    results, meta_path = path / "results.jsonl", path / "metadata.json"
    if not results.is_file() or not meta_path.is_file():
        missing = " and ".join(p.name for p in (results, meta_path) if not p.is_file())
        raise ConfigError(f"{path} is not a verifiers results directory: it has no {missing} "
                          "(vf-eval -s writes both); give the folder vf-eval saved")
    try:
        meta = orjson.loads(meta_path.read_bytes())
    except orjson.JSONDecodeError:
        raise ConfigError(f"{meta_path} is not valid JSON; is {path} a complete vf-eval results directory?") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{meta_path} is not a JSON object; is {path} a vf-eval results directory?")
    source = Source("verifiers", path, [meta_path, results], env_name=meta.get("env_id") or meta.get("env") or None,
                    model=meta.get("model") or None)

    def rows() -> Iterator[Conversation | Problem]:
        for n, where, obj in _json_lines(results, "results.jsonl line"):
            if isinstance(obj, Problem):
                yield obj
                continue
            if not isinstance(obj, dict) or "example_id" not in obj:
                yield Problem(where, n, "not a verifiers rollout output (no example_id)")
                continue
            prompt, completion = _vf_messages(obj.get("prompt")), _vf_messages(obj.get("completion"))
            if prompt is None or completion is None:
                yield Problem(where, n, "prompt or completion is neither text nor a list of messages")
                continue
            if isinstance(obj.get("completion"), str):
                completion = [{"role": "assistant", "content": obj["completion"]}]
            messages = prompt + completion
            if type(shape := check_messages(messages)) is str:
                yield Problem(where, n, shape)
                continue
            metrics = obj.get("metrics") if isinstance(obj.get("metrics"), dict) else {}
            named = {str(k): x for k, v in metrics.items() if (x := _number(v)) is not None}
            timing = obj.get("timing") if isinstance(obj.get("timing"), dict) else {}
            usage = obj.get("token_usage") if isinstance(obj.get("token_usage"), dict) else {}
            extra = {k: v for k, v in obj.items() if k not in _VF_FIELDS and k not in metrics}
            if obj.get("error"):
                extra["error"] = obj["error"]
            info = obj.get("info") if isinstance(obj.get("info"), dict) else {}
            total_s = _number(timing.get("total"))
            if total_s is None and (ms := _number(timing.get("total_ms"))) is not None:
                total_s = ms / 1000.0
            # verifiers records each rubric function's value but not its weight: they are kept as
            # metrics, beside the weighted total it computed (the reward).
            yield Conversation(
                messages, where, shape, tools=obj.get("tool_defs") or None, reward=_number(obj.get("reward")),
                metrics=named, metadata=extra, answer=obj.get("answer", ""), info=info,
                group=obj["example_id"], prompt_tokens=int(_number(usage.get("input_tokens")) or 0),
                completion_tokens=int(_number(usage.get("output_tokens")) or 0),
                duration_s=total_s or 0.0)

    return source, rows()


# -- Inspect AI .eval logs -----------------------------------------------------------------------------
def _inspect_content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts = []
    for c in content:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append({"type": "text", "text": c.text})
        elif kind == "reasoning":
            continue  # the model's hidden reasoning is not a chat message part
        else:
            parts.append(c.model_dump(exclude_none=True))
    if all(p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def inspect_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Inspect ``ChatMessage`` objects as OpenAI chat dicts (text, tool calls, tool results)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d: dict[str, Any] = {"role": m.role, "content": _inspect_content(m.content)}
        if m.role == "assistant" and m.tool_calls:
            d["tool_calls"] = [{"id": tc.id, "type": "function", "function": {
                "name": tc.function, "arguments": orjson.dumps(tc.arguments).decode()}} for tc in m.tool_calls]
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id
        out.append(d)
    return out


def read_inspect(path: Path) -> tuple[Source, Iterator[Conversation | Problem]]:
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not an Inspect AI log; give one .eval (or .json) log file")
    from inspect_ai.log import read_eval_log  # heavy: only for this format
    from inspect_ai.scorer import value_to_float

    try:
        log = read_eval_log(str(path))
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise ConfigError(f"{path} is not a readable Inspect AI log ({type(e).__name__}: {first}); give a .eval "
                          "log written by `inspect eval`, or another --format") from None
    to_float = value_to_float()
    source = Source("inspect", path, [path], env_name=log.eval.task or None, model=log.eval.model or None)

    def rows() -> Iterator[Conversation | Problem]:
        for n, s in enumerate(log.samples or [], start=1):
            where = f"sample {s.id} (epoch {s.epoch})"
            messages = inspect_messages(s.messages)
            if type(shape := check_messages(messages)) is str:
                yield Problem(where, n, shape)
                continue
            named: dict[str, float] = {}
            for name, score in (s.scores or {}).items():
                value = score.value
                if isinstance(value, dict):
                    for k, v in value.items():
                        if (x := _number(to_float(v))) is not None:
                            named[f"{name}.{k}"] = x
                elif (x := _number(to_float(value))) is not None:
                    named[name] = x
            usage = next(iter((s.model_usage or {}).values()), None)
            target = s.target if isinstance(s.target, str) or s.target is None else list(s.target)
            meta: dict[str, Any] = {"sample_id": s.id, "epoch": s.epoch}
            if s.metadata:
                meta["metadata"] = s.metadata
            if s.error is not None:
                meta["error"] = s.error.message
            yield Conversation(
                messages, where, shape, reward=sum(named.values()) if named else None, rewards=named,
                id=None if s.uuid is None else str(s.uuid), metadata=meta, answer=target,
                info=dict(s.metadata or {}), group=s.id, model=s.output.model if s.output else None,
                prompt_tokens=usage.input_tokens if usage else 0, completion_tokens=usage.output_tokens if usage else 0,
                duration_s=float(s.total_time or 0.0))

    return source, rows()


READERS = {"openai-jsonl": read_openai_jsonl, "verifiers": read_verifiers, "inspect": read_inspect}


def open_source(path: Path, fmt: str) -> tuple[Source, Iterator[Conversation | Problem]]:
    if fmt not in READERS:
        raise ConfigError(f"unknown import format {fmt!r}; use one of {', '.join(FORMATS)}")
    if not path.exists():
        raise ConfigError(f"{path} does not exist; give the path of the file to import")
    return READERS[fmt](path)
