"""A person as the policy: each assistant turn a rollout asks for is written by someone, not sampled.

:class:`HumanPolicy` is what a face implements (``workbench play`` reads the terminal, the app a form):
given the conversation and the tools the harness offers, return the next assistant message.
:func:`parse_reply` turns one written reply into that message — text, or ``/call NAME {json}`` for a tool
call — and :func:`check_call` checks a tool call against the tool's JSON schema, naming the field that is
wrong, so a form or a prompt can ask again. The harness, its tools, sandbox, user simulator and rubric
run exactly as they do for a model (:meth:`Rollout.generate` asks the policy instead of the endpoint).
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Protocol

import orjson

Message = dict[str, Any]
CALL_PREFIX = "/call"
#: A line that starts as a command does (``/word``) but is not ``/call``: refused, not sent as the reply.
_COMMAND = re.compile(r"/[A-Za-z][\w-]*(?=\s|$)")


class ReplyError(ValueError):
    """A written reply that cannot be the assistant's turn; ``field`` names the argument when it is one."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class PlayStopped(BaseException):  # noqa: N818 - not an error: the person ended the session
    """The person stopped, or their input ended, before the rollout did. A BaseException so that no
    harness or engine records it as the rollout's failure: the unfinished rollout is not stored."""


class HumanPolicy(Protocol):
    """Who writes the assistant's turns. ``name`` is stored with the rollout."""

    name: str

    async def reply(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> Message: ...


def tool_schemas(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """The offered tools by name: their ``parameters`` JSON schemas."""
    out = {}
    for t in tools or ():
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            out[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
    return out


def check_call(name: str, arguments: Any, tools: list[dict[str, Any]] | None) -> None:
    """A ReplyError unless ``name`` is an offered tool and ``arguments`` validate against its schema."""
    import jsonschema

    schemas = tool_schemas(tools)
    if name not in schemas:
        offered = ", ".join(sorted(schemas)) or "none"
        raise ReplyError(f"there is no tool {name!r} here (offered: {offered})")
    if not isinstance(arguments, dict):
        raise ReplyError(f"the arguments of {name} must be a JSON object, like {{\"field\": value}}")
    errors = sorted(jsonschema.Draft202012Validator(schemas[name]).iter_errors(arguments),
                    key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path)
        if not where and e.validator == "required":
            missing = [r for r in e.validator_value if r not in arguments]
            where = missing[0] if missing else ""
            raise ReplyError(f"{name}: the field {where!r} is required", where or None)
        if not where and e.validator == "additionalProperties":
            extra = sorted(set(arguments) - set(schemas[name].get("properties") or {}))
            where = extra[0] if extra else ""
            raise ReplyError(f"{name}: there is no field {where!r} (fields: "
                             f"{', '.join(schemas[name].get('properties') or {}) or 'none'})", where or None)
        raise ReplyError(f"{name}: field {where or '(arguments)'!r}: {e.message}", where or None)


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "call_" + secrets.token_hex(12), "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}


def parse_reply(text: str, tools: list[dict[str, Any]] | None) -> Message:
    """One written reply as an assistant message: ``/call NAME {json}`` lines are tool calls (checked
    against the tools' schemas), anything else is the text of the reply."""
    lines = text.strip("\n").split("\n")
    calls, content = [], []
    for line in lines:
        if line.startswith("//"):  # a reply line that starts with a slash, written with two
            content.append(line[1:])
            continue
        if (m := _COMMAND.match(line)) and m.group() != CALL_PREFIX:
            raise ReplyError(f"unknown command {m.group()}: a tool call is {CALL_PREFIX} NAME {{json arguments}} "
                             "(start a reply line that begins with a slash with // instead)")
        if line.startswith(CALL_PREFIX + " ") or line.strip() == CALL_PREFIX:
            rest = line[len(CALL_PREFIX):].strip()
            name, _, raw = rest.partition(" ")
            if not name:
                raise ReplyError(f"write a tool call as {CALL_PREFIX} NAME {{json arguments}}")
            try:
                args = orjson.loads(raw) if raw.strip() else {}
            except orjson.JSONDecodeError as e:
                raise ReplyError(f"the arguments of {name} are not JSON ({e})") from None
            check_call(name, args, tools)
            calls.append(tool_call(name, args))
        else:
            content.append(line)
    body = "\n".join(content).strip()
    if not body and not calls:
        raise ReplyError("the reply is empty; write the assistant's answer (or a /call)")
    msg: Message = {"role": "assistant", "content": body or None}
    if calls:
        msg["tool_calls"] = calls
    return msg
