"""A task: the data an environment poses to a model in one rollout."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from workbench.errors import EnvLoadError

Message = dict[str, Any]
Prompt = str | list[Message]

_RESERVED = ("id", "prompt", "question", "answer", "info", "sandbox")


def content_hash(*parts: Any, length: int = 16) -> str:
    """A stable hex digest of JSON-able values (key order does not matter)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(orjson.dumps(part, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str))
        h.update(b"\x00")
    return h.hexdigest()[:length]


@dataclass(frozen=True, slots=True)
class Task:
    """One problem: a prompt, an optional gold answer, free-form info and sandbox needs.

    ``id`` is a stable content hash of prompt, answer and info unless given.
    """

    prompt: Prompt
    answer: Any = None
    info: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    sandbox: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str | list):
            raise TypeError(f"Task.prompt must be a string or a list of chat messages, not {type(self.prompt).__name__}")
        if isinstance(self.prompt, list):
            for m in self.prompt:
                if not isinstance(m, Mapping) or "role" not in m:
                    raise TypeError("Task.prompt as a list must hold chat messages like {'role': 'user', 'content': ...}")
        if not self.id:
            object.__setattr__(self, "id", content_hash(self.prompt, self.answer, self.info))

    @classmethod
    def from_record(cls, row: Mapping[str, Any]) -> Task:
        """Build a task from a dict: ``prompt`` (or ``question``), ``answer``, ``info``, ``id``, ``sandbox``.

        Any other keys are kept in ``info``.
        """
        if "prompt" in row:
            prompt = row["prompt"]
        elif "question" in row:
            prompt = row["question"]
        else:
            raise EnvLoadError(f"task record has no 'prompt' or 'question' field (keys: {', '.join(map(str, row))})")
        info = dict(row.get("info") or {})
        for k, v in row.items():
            if k not in _RESERVED:
                info.setdefault(k, v)
        return cls(
            prompt=prompt,
            answer=row.get("answer"),
            info=info,
            id=str(row["id"]) if row.get("id") is not None else "",
            sandbox=row.get("sandbox"),
        )

    def messages(self, system_prompt: str | None = None) -> list[Message]:
        """The opening chat messages for this task."""
        msgs: list[Message] = []
        if system_prompt and not (isinstance(self.prompt, list) and self.prompt and self.prompt[0].get("role") == "system"):
            msgs.append({"role": "system", "content": system_prompt})
        if isinstance(self.prompt, str):
            msgs.append({"role": "user", "content": self.prompt})
        else:
            msgs.extend(dict(m) for m in self.prompt)
        return msgs
