"""The conversations an agent program held, rebuilt from its model calls.

A program's calls arrive one by one through the interception proxy; each sends a whole conversation.
Usually a call's messages extend an earlier call's messages plus its reply (the program appended the
reply and its next turn): that conversation grows. A call whose messages extend no conversation so far
(a sub-agent, a compacted history, a second attempt from scratch, another sample of the same prompt)
starts one of its own. Messages compare as the trace compares them (:func:`message_key`: role, text,
tool calls), so fields an SDK adds to a reply it sends back (``refusal``, ``annotations``, ...) do not
split a conversation.

Conversations are kept in the order they last spoke: the one the program's last call belongs to comes
last, so its reply is the rollout's completion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.records.trace import Message, message_key


@dataclass(slots=True)
class Conversations:
    _messages: list[list[Message]] = field(default_factory=list)
    _keys: list[list[bytes]] = field(default_factory=list)

    def add(self, messages: list[Message], reply: Message, keys: list[bytes] | None = None) -> None:
        """One model call: the messages it sent (``keys``: theirs, when the caller has them) and its reply."""
        keys = keys if keys is not None else [message_key(m) for m in messages]
        best = None
        for i, known in enumerate(self._keys):  # the longest conversation the call extends (the newest of equals)
            if len(known) <= len(keys) and keys[: len(known)] == known and (
                    best is None or len(known) >= len(self._keys[best])):
                best = i
        if best is not None:
            del self._messages[best], self._keys[best]
        self._messages.append([*messages, reply])
        self._keys.append([*keys, message_key(reply)])

    def __len__(self) -> int:
        return len(self._messages)

    def messages(self) -> list[Message]:
        """Every conversation's messages, one after the other, in the order they last spoke."""
        return [m for conv in self._messages for m in conv]

    def lengths(self) -> list[int]:
        """How many messages each conversation of :meth:`messages` holds, in the same order."""
        return [len(conv) for conv in self._messages]
