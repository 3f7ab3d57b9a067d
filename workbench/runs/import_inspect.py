"""Reading an Inspect AI ``.eval`` log for ``workbench import`` (see ``import_formats``)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.runs.import_formats import (
    Conversation,
    Problem,
    Source,
    as_number,
    check_messages,
    finite_total,
    short_repr,
)


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


def _inspect_scores(scores: dict[str, Any], to_float: Any) -> tuple[dict[str, float], str | None]:
    """A sample's scores as named numbers, or why they cannot be stored (a non-finite value)."""
    named: dict[str, float] = {}
    for name, score in scores.items():
        value = score.value
        items = [(f"{name}.{k}", v) for k, v in value.items()] if isinstance(value, dict) else [(name, value)]
        for key, v in items:
            x = to_float(v)
            if isinstance(x, int | float) and not isinstance(x, bool) and not math.isfinite(x):
                return {}, f"score {short_repr(key)} is not a finite number (got {x!r})"
            if (x := as_number(x)) is not None:
                named[key] = x
    return named, None


#: The most an Inspect log may hold, unpacked: it is read into memory whole.
MAX_LOG_BYTES = 2 << 30


def _log_size(path: Path) -> int:
    """What reading the log takes in: a ``.eval`` zip's members unpacked (as their headers declare them), else
    the file's size."""
    import zipfile

    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                return sum(info.file_size for info in z.infolist())
        except (zipfile.BadZipFile, OSError, ValueError):
            return path.stat().st_size  # read_eval_log names what is wrong with it
    return path.stat().st_size


def read_inspect(path: Path) -> tuple[Source, Iterator[Conversation | Problem]]:
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not an Inspect AI log; give one .eval (or .json) log file")
    if (size := _log_size(path)) > MAX_LOG_BYTES:
        raise ConfigError(f"{path} unpacks to {size / (1 << 30):.1f} GiB, over the {MAX_LOG_BYTES >> 30} GiB an Inspect "
                          "log may hold here; split the eval into smaller logs")
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
            try:
                messages = inspect_messages(s.messages)
            except (TypeError, ValueError) as e:  # tool-call arguments JSON cannot encode (nested too deep)
                yield Problem(where, n, f"its messages cannot be encoded as JSON ({e})")
                continue
            if isinstance(shape := check_messages(messages), str):
                yield Problem(where, n, shape)
                continue
            named, why = _inspect_scores(s.scores or {}, to_float)
            if why is None and named and isinstance(total := finite_total(named), str):
                why = total
            if why is not None:
                yield Problem(where, n, why)
                continue
            usage = next(iter((s.model_usage or {}).values()), None)
            target = s.target if isinstance(s.target, str) or s.target is None else list(s.target)
            meta: dict[str, Any] = {"sample_id": s.id, "epoch": s.epoch}
            if s.metadata:
                meta["metadata"] = s.metadata
            if s.error is not None:
                meta["error"] = s.error.message
            yield Conversation(
                messages, where, shape, reward=math.fsum(named.values()) if named else None, rewards=named,
                id=None if s.uuid is None else str(s.uuid), metadata=meta, answer=target,
                info=dict(s.metadata or {}), group=s.id, model=s.output.model if s.output else None,
                prompt_tokens=usage.input_tokens if usage else 0, completion_tokens=usage.output_tokens if usage else 0,
                duration_s=float(s.total_time or 0.0))

    return source, rows()


