"""Harbor's Agent Trajectory Interchange Format (ATIF) steps and OpenAI chat messages, both ways:
:func:`step_messages` reads a step as the messages it stands for (``workbench import --format atif``),
:func:`trajectory_steps` writes a conversation as steps (``workbench export --format atif``).

A system or user step is a message of that role, an agent step an assistant message with its
reasoning and tool calls (``arguments`` an object in ATIF, a JSON string in OpenAI's form; a step that
only calls tools has no content), each observation result that names a tool call a ``tool`` message
and any other result a ``user`` message (the environment's reply, as Harbor reads it). A message the
step's ATIF fields do not read back as exactly (a ``developer`` role, a tool message answering no call
of the step before, arguments that are not an object or are spelled otherwise, a message's own fields)
is kept whole under the ``"workbench"`` key of the step's ``extra``, and read back from there.
"""

from __future__ import annotations

import json
from typing import Any

from workbench.records.rollout import _text

ATIF_VERSIONS = tuple(f"ATIF-v1.{minor}" for minor in range(9))  # what is read
#: What is written: every field the export uses is in it (multimodal content parts came in v1.6).
WRITTEN_VERSION = "ATIF-v1.6"
EXTRA = "workbench"  # the key of what Workbench keeps in an ``extra`` object
TRAJECTORY = "trajectory.json"  # its name in a Harbor trial's ``agent/`` folder
_ROLE_OF = {"system": "system", "user": "user", "agent": "assistant"}
_SOURCE = {"assistant": "agent", "system": "system", "developer": "system"}  # any other role: a user step
_IMAGE_TYPES = {"jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}


def short_repr(v: Any) -> str:
    """A value from the file, named in a reason: its repr, cut short."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


class Bad(ValueError):
    """A trajectory that cannot be imported: the field it names and why."""


def need(obj: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...], what: str) -> Any:
    if key not in obj or obj[key] is None:
        raise Bad(f"{where}{key} is missing ({what})")
    v = obj[key]
    if not isinstance(v, kind) or isinstance(v, bool) and kind is int:
        raise Bad(f"{where}{key} is not {what} (got {short_repr(v)})")
    return v


def maybe(obj: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...], what: str) -> Any:
    return None if obj.get(key) is None else need(obj, key, where, kind, what)


def workbench_extra(obj: dict[str, Any]) -> dict[str, Any]:
    """What Workbench kept in ``obj``'s ``extra`` (empty for other producers)."""
    extra = obj.get("extra")
    kept = extra.get(EXTRA) if isinstance(extra, dict) else None
    return kept if isinstance(kept, dict) else {}


def _content(message: Any, where: str) -> Any:
    """A step's ``message`` (or a result's ``content``) as OpenAI message content."""
    if isinstance(message, str):
        return message
    if not isinstance(message, list):
        raise Bad(f"{where} is neither text nor a list of content parts (got {short_repr(message)})")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(message):
        at = f"{where}[{j}]."
        if not isinstance(part, dict):
            raise Bad(f"{where}[{j}] is not a content part object")
        kind = need(part, "type", at, str, "'text', 'image' or 'audio'")
        if kind == "text":
            parts.append({"type": "text", "text": need(part, "text", at, str, "text")})
        elif kind in ("image", "audio"):
            src = need(part, "source", at, dict, "an object with media_type and path")
            need(src, "path", f"{at}source.", str, "a path or URL")
            need(src, "media_type", f"{at}source.", str, "a MIME type")
            parts.append({"type": "image_url", "image_url": {"url": src["path"]}} if kind == "image"
                         else {"type": "audio", "source": src})
        else:
            raise Bad(f"{at}type is not 'text', 'image' or 'audio' (got {short_repr(kind)})")
    return parts


def _tool_calls(step: dict[str, Any], where: str) -> list[dict[str, Any]]:
    calls = need(step, "tool_calls", where, list, "a list of tool calls")
    out = []
    for j, tc in enumerate(calls):
        at = f"{where}tool_calls[{j}]."
        if not isinstance(tc, dict):
            raise Bad(f"{where}tool_calls[{j}] is not an object")
        args = need(tc, "arguments", at, dict, "an object of arguments")
        out.append({"id": need(tc, "tool_call_id", at, str, "a string id"), "type": "function",
                    "function": {"name": need(tc, "function_name", at, str, "a function name"),
                                 "arguments": json.dumps(args, ensure_ascii=False)}})
    return out


def _results(step: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The messages an observation's results are: a ``tool`` message per answered tool call, else ``user``."""
    obs = need(step, "observation", where, dict, "an object with results")
    results = need(obs, "results", f"{where}observation.", list, "a list of results")
    out = []
    for j, res in enumerate(results):
        at = f"{where}observation.results[{j}]"
        if not isinstance(res, dict):
            raise Bad(f"{at} is not an object")
        call = maybe(res, "source_call_id", f"{at}.", str, "a tool call id")
        content = None if res.get("content") is None else _content(res["content"], f"{at}.content")
        if call is not None:
            out.append({"role": "tool", "tool_call_id": call, "content": "" if content is None else content})
        else:
            out.append({"role": "user", "content": content})
    return out


def step_messages(step: Any, i: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The messages of ``steps[i]`` (its own, then its observation's) and its token counts; a message
    Workbench kept whole in the step's ``extra`` stands for the one the step's fields make."""
    where = f"steps[{i}]"
    if not isinstance(step, dict):
        raise Bad(f"{where} is not an object")
    at = f"{where}."
    step_id = need(step, "step_id", at, int, "a step number")
    if step_id != i + 1:
        raise Bad(f"{at}step_id is {step_id}; steps are numbered 1, 2, 3, ... in order (expected {i + 1})")
    source = need(step, "source", at, str, "'system', 'user' or 'agent'")
    if source not in _ROLE_OF:
        raise Bad(f"{at}source is not 'system', 'user' or 'agent' (got {short_repr(source)})")
    if "message" not in step:
        raise Bad(f"{at}message is missing (every step has one; an empty one is \"\")")
    msg: dict[str, Any] = {"role": _ROLE_OF[source], "content": _content(step["message"], f"{at}message")}
    usage = {"prompt": 0, "completion": 0}
    if source == "agent":
        if (reasoning := maybe(step, "reasoning_content", at, str, "text")) is not None:
            msg["reasoning_content"] = reasoning
        if step.get("tool_calls") is not None and (calls := _tool_calls(step, at)):
            msg["tool_calls"] = calls
            if msg["content"] == "":  # a turn that only calls tools: no content, as OpenAI writes it
                msg["content"] = None
        if (metrics := maybe(step, "metrics", at, dict, "an object")) is not None:
            for key in ("prompt", "completion"):
                usage[key] = maybe(metrics, f"{key}_tokens", f"{at}metrics.", int, "a whole number") or 0
    else:
        for key in ("tool_calls", "reasoning_content", "metrics"):
            if step.get(key) is not None:
                raise Bad(f"{at}{key} is on a {source} step; only an agent step has one")
    out = [msg] + (_results(step, at) if step.get("observation") is not None else [])
    kept = workbench_extra(step)
    if isinstance(kept.get("message"), dict):
        out[0] = kept["message"]
    if isinstance(kept.get("results"), list):
        for j, m in enumerate(kept["results"][:len(out) - 1]):
            if isinstance(m, dict):
                out[j + 1] = m
    return out, usage


# -- chat messages as steps ----------------------------------------------------------------------------
def _image_type(url: str) -> str | None:
    if url.startswith("data:"):
        kind = url[5:].split(";", 1)[0].split(",", 1)[0]
        return kind if kind in _IMAGE_TYPES.values() else None
    ext = url.rsplit("?", 1)[0].rsplit(".", 1)[-1].lower()
    return _IMAGE_TYPES.get(ext)


def _part(p: Any) -> dict[str, Any] | None:
    """One OpenAI content part as an ATIF content part, or None when ATIF has none for it."""
    if not isinstance(p, dict):
        return None
    if p.get("type") == "text" and isinstance(p.get("text"), str):
        return {"type": "text", "text": p["text"]}
    image = p.get("image_url") if p.get("type") == "image_url" else None
    url = image.get("url") if isinstance(image, dict) else image
    if isinstance(url, str) and (media := _image_type(url)) is not None:
        return {"type": "image", "source": {"media_type": media, "path": url}}
    return None  # audio parts came in ATIF-v1.8: the export (v1.6) writes the text and keeps the message


def _message(content: Any) -> str | list[dict[str, Any]]:
    """Message content as an ATIF step message (its text, where ATIF has no part for one of its parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    parts = [_part(p) for p in content] if isinstance(content, list) else [None]
    if all(p is not None for p in parts):
        return [p for p in parts if p is not None]
    return _text(content)


def _arguments(fn: dict[str, Any]) -> dict[str, Any]:
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return {}
    return args if isinstance(args, dict) else {}


def _agent_step(m: dict[str, Any], n: int) -> dict[str, Any]:
    step: dict[str, Any] = {"step_id": n, "source": "agent", "message": _message(m.get("content"))}
    if isinstance(m.get("reasoning_content"), str):
        step["reasoning_content"] = m["reasoning_content"]
    calls = []
    for j, tc in enumerate(m.get("tool_calls") or ()):
        fn = tc.get("function") if isinstance(tc, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        call_id = tc.get("id") if isinstance(tc, dict) else None
        calls.append({"tool_call_id": call_id if isinstance(call_id, str) else f"call_{n}_{j}",
                      "function_name": str(fn.get("name", "")), "arguments": _arguments(fn)})
    if calls:
        step["tool_calls"] = calls
    return step


def _answers(step: dict[str, Any] | None, m: dict[str, Any], answered: set[str]) -> bool:
    """Whether tool message ``m`` answers a tool call of ``step`` not answered yet."""
    if step is None or step["source"] != "agent" or m.get("role") != "tool":
        return False
    call = m.get("tool_call_id")
    return call not in answered and any(tc["tool_call_id"] == call for tc in step.get("tool_calls", ()))


def trajectory_steps(messages: list[Any], usage: list[dict[str, int]] | None = None) -> list[dict[str, Any]]:
    """A conversation's messages as ATIF steps; ``usage`` the token counts of each assistant message."""
    steps: list[dict[str, Any]] = []
    sources: list[list[dict[str, Any]]] = []  # the messages each step stands for
    answered: set[str] = set()
    agent_turn = 0
    for m in messages:
        m = m if isinstance(m, dict) else {"role": "user", "content": _text(m)}
        last = steps[-1] if steps else None
        if _answers(last, m, answered):
            assert last is not None
            answered.add(m["tool_call_id"])
            result = {"source_call_id": m["tool_call_id"], "content": _message(m.get("content"))}
            last.setdefault("observation", {"results": []})["results"].append(result)
            sources[-1].append(m)
            continue
        role = m.get("role")
        n = len(steps) + 1
        if role == "assistant":
            step = _agent_step(m, n)
            if usage is not None and agent_turn < len(usage):
                step["metrics"] = usage[agent_turn]
            agent_turn += 1
            answered = set()
        else:
            step = {"step_id": n, "source": _SOURCE.get(str(role), "user"), "message": _message(m.get("content"))}
        steps.append(step)
        sources.append([m])
    for i, (step, originals) in enumerate(zip(steps, sources, strict=True)):
        _keep_what_atif_cannot_say(step, i, originals)
    return steps


def _keep_what_atif_cannot_say(step: dict[str, Any], i: int, originals: list[dict[str, Any]]) -> None:
    """Keep whole, in the step's ``extra``, each message the step's ATIF fields do not read back as."""
    try:
        read, _ = step_messages(step, i)
    except Bad:  # a field ATIF cannot hold as it is: the messages are kept whole
        read = []
    kept: dict[str, Any] = {}
    if not read or read[0] != originals[0]:
        kept["message"] = originals[0]
    changed = [m if j + 1 >= len(read) or read[j + 1] != m else None for j, m in enumerate(originals[1:])]
    if any(m is not None for m in changed):
        kept["results"] = changed
    if kept:
        step["extra"] = {EXTRA: kept}


