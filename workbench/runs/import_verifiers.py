"""Reading a verifiers ``vf-eval -s`` results directory for ``workbench import`` (see ``import_formats``).

verifiers saves each tool call as a JSON string of ``{"id", "name", "arguments"}`` and each tool as a
flat ``{"name", "description", "parameters"}``: both are read back as OpenAI tool calls and tools.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from workbench.errors import ConfigError
from workbench.runs.import_formats import (
    MAX_META_BYTES,
    Conversation,
    Problem,
    Source,
    as_number,
    check_messages,
    info_object,
    json_lines,
    short_repr,
)

_VF_FIELDS = frozenset({"example_id", "prompt", "completion", "answer", "info", "reward", "error", "timing",
                        "is_completed", "is_truncated", "stop_condition", "metrics", "tool_defs", "token_usage",
                        "error_chain", "long_error_chain", "task", "trajectory"})


def _object(v: object) -> dict[str, Any]:
    """``v`` when it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}

def _vf_messages(v: Any) -> list[dict[str, Any]] | None:
    if v is None:
        return []
    if isinstance(v, str):
        return [{"role": "user", "content": v}]
    return v if isinstance(v, list) else None


def _vf_call(tc: Any) -> Any:
    """One tool call as verifiers saves it (a JSON string of the call, or a flat ``{"name", "arguments"}``)
    as an OpenAI tool call; anything else as it is, for :func:`check_messages` to judge."""
    if type(tc) is str:
        try:
            tc = orjson.loads(tc)
        except orjson.JSONDecodeError:
            return tc
    if type(tc) is dict and "function" not in tc and "name" in tc:
        args = tc.get("arguments")
        tc = {"id": tc.get("id"), "type": "function",
              "function": {"name": tc["name"], "arguments": args if type(args) is str else orjson.dumps(args).decode()}}
    return tc


def _vf_tool_calls(messages: list[Any]) -> list[Any]:
    """``messages`` with each tool call as an OpenAI tool call (the messages that hold one are copied)."""
    out = messages
    for i, m in enumerate(messages):
        if type(m) is dict and type(calls := m.get("tool_calls")) is list and calls \
                and any(type(tc) is not dict or "function" not in tc for tc in calls):
            if out is messages:
                out = list(messages)
            out[i] = {**m, "tool_calls": [_vf_call(tc) for tc in calls]}
    return out


def _vf_tools(defs: Any) -> list[Any] | None:
    """verifiers' ``tool_defs`` (flat ``{"name", "description", "parameters"}``, or OpenAI's shape) as
    OpenAI tool definitions."""
    if type(defs) is not list or not defs:
        return None
    return [{"type": "function", "function": d} if type(d) is dict and "function" not in d and "name" in d else d
            for d in defs]


def _vf_info(v: Any, where: str) -> dict[str, Any] | str:
    if type(v) is str:  # some versions save info as a JSON string
        try:
            v = orjson.loads(v) if v.strip() else None
        except orjson.JSONDecodeError:
            return "'info' is a string that is not a JSON object"
    return info_object(v, where)


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
    if meta_path.stat().st_size > MAX_META_BYTES:
        raise ConfigError(f"{meta_path} is over {MAX_META_BYTES >> 20} MiB, more than a vf-eval metadata.json "
                          f"holds; is {path} a vf-eval results directory?")
    try:
        meta = orjson.loads(meta_path.read_bytes())
    except orjson.JSONDecodeError:
        raise ConfigError(f"{meta_path} is not valid JSON; is {path} a complete vf-eval results directory?") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{meta_path} is not a JSON object; is {path} a vf-eval results directory?")
    env_name, model = meta.get("env_id") or meta.get("env"), meta.get("model")
    source = Source("verifiers", path, [meta_path, results], env_name=env_name if type(env_name) is str else None,
                    model=model if type(model) is str and model else None)

    def rows() -> Iterator[Conversation | Problem]:
        for n, where, obj in json_lines(results, "results.jsonl line"):
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
            messages = _vf_tool_calls(prompt + completion)
            if isinstance(shape := check_messages(messages), str):
                yield Problem(where, n, shape)
                continue
            reward = as_number(obj.get("reward"))
            if reward is None and obj.get("reward") is not None:
                yield Problem(where, n, f"'reward' is not a finite number (got {short_repr(obj.get('reward'))})")
                continue
            if isinstance(info := _vf_info(obj.get("info"), where), str):
                yield Problem(where, n, info)
                continue
            metrics = _object(obj.get("metrics"))
            named = {str(k): x for k, v in metrics.items() if (x := as_number(v)) is not None}
            timing = _object(obj.get("timing"))
            usage = _object(obj.get("token_usage"))
            extra = {k: v for k, v in obj.items() if k not in _VF_FIELDS and k not in metrics}
            if obj.get("error"):
                extra["error"] = obj["error"]
            total_s = as_number(timing.get("total"))
            if total_s is None and (ms := as_number(timing.get("total_ms"))) is not None:
                total_s = ms / 1000.0
            # verifiers records each rubric function's value but not its weight: they are kept as
            # metrics, beside the weighted total it computed (the reward).
            yield Conversation(
                messages, where, shape, tools=_vf_tools(obj.get("tool_defs")), reward=reward,
                metrics=named, metadata=extra, answer=obj.get("answer", ""), info=info,
                group=obj["example_id"], prompt_tokens=int(as_number(usage.get("input_tokens")) or 0),
                completion_tokens=int(as_number(usage.get("output_tokens")) or 0),
                duration_s=total_s or 0.0)

    return source, rows()


