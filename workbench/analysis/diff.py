"""Two stored rollouts compared: messages aligned one to one with their changed words, scores per
reward and metric function with deltas, status, errors, tokens, timing and cost.

Used by ``workbench diff A B`` and by the app's side-by-side diff screen (Traces: ``m`` then ``D``);
both draw it with :mod:`workbench.analysis.diff_render`, so they show the same thing. Rollouts come from
:func:`workbench.store.queries.get_rollout`.

Alignment. Messages are first matched by identity (role, name and text equal) with difflib, so one
extra tool turn in the middle does not shift every later pair. Inside each stretch that differs only
messages of the same role face each other, chosen so that the pairs share the most words: B's final
answer faces A's final answer, not A's tool call. Text is then compared line by line, and lines that
changed word by word (whitespace kept), so the highlighted spans are the words that differ.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from workbench.records.rollout import content_text

#: (text, changed): a piece of one side's text; the pieces of a side concatenate to its whole text.
Span = tuple[str, bool]

#: Words and punctuation each with the whitespace after them, or leading whitespace: covers every
#: character, and keeps blanks from being the commonest token (which makes difflib slow).
_TOKEN = re.compile(r"\s+|\w+\s*|[^\w\s]\s*")
#: Word-level comparison costs about (tokens x changed places); longer changed stretches are marked whole.
MAX_WORD_TOKENS = 4_000
MAX_ALIGN_CELLS = 40_000  # message pairs scored for similarity in one differing stretch (200 x 200)
MIN_SHARED = 0.4  # share of words two changed lines must have in common to be compared word by word


def message_text(m: dict[str, Any]) -> str:
    """A message as the transcript shows it: its text, then one ``→ name(arguments)`` line per tool call."""
    text = content_text(m.get("content"))
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function") or {}
        text += ("\n" if text else "") + f"→ {fn.get('name', '?')}({fn.get('arguments', '')})"
    return text


def _merge(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for text, changed in spans:
        if not text:
            continue
        if out and out[-1][1] == changed:
            out[-1] = (out[-1][0] + text, changed)
        else:
            out.append((text, changed))
    return out


def _tidy(spans: list[Span]) -> list[Span]:
    """A changed word's trailing whitespace is not a change, unless it sits between two changed
    words: then the phrase is highlighted as one, not as confetti."""
    split: list[Span] = []
    for text, changed in spans:
        core = text.rstrip()
        if changed and core and core != text:
            split += [(core, True), (text[len(core):], False)]
        else:
            split.append((text, changed))
    out = _merge(split)
    for k in range(1, len(out) - 1):
        text, changed = out[k]
        if not changed and not text.strip() and out[k - 1][1] and out[k + 1][1]:
            out[k] = (text, True)
    return _merge(out)


def _word_spans(a: str, b: str) -> tuple[list[Span], list[Span]]:
    """Changed lines compared word by word; texts that share under :data:`MIN_SHARED` of their words
    (a tool call against a reply) are marked changed whole rather than matched on stray words."""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    if len(ta) + len(tb) > MAX_WORD_TOKENS:
        return [(a, True)], [(b, True)]
    ops = SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    shared = sum(1 for op, i1, i2, _, _ in ops if op == "equal" for t in ta[i1:i2] if t.strip())
    words = sum(1 for t in ta if t.strip()) + sum(1 for t in tb if t.strip())
    if words and 2 * shared / words < MIN_SHARED:
        return [(a, True)], [(b, True)]
    sa: list[Span] = []
    sb: list[Span] = []
    for op, i1, i2, j1, j2 in ops:
        same = op == "equal"
        sa.append(("".join(ta[i1:i2]), not same))
        sb.append(("".join(tb[j1:j2]), not same))
    return _tidy(sa), _tidy(sb)


def text_spans(a: str, b: str) -> tuple[list[Span], list[Span]]:
    """Both texts cut into unchanged and changed spans: lines first (difflib's usual junk heuristic,
    so blank lines do not slow it), then the words of changed lines, pair by pair when as many
    lines changed on both sides."""
    if a == b:
        return _merge([(a, False)]), _merge([(b, False)])
    la, lb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    sa: list[Span] = []
    sb: list[Span] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, la, lb).get_opcodes():
        if op == "replace":
            pairs = zip(la[i1:i2], lb[j1:j2], strict=True) if i2 - i1 == j2 - j1 else \
                [("".join(la[i1:i2]), "".join(lb[j1:j2]))]
            for line_a, line_b in pairs:
                wa, wb = _word_spans(line_a, line_b)
                sa += wa
                sb += wb
        else:  # equal, or lines only one side has
            sa.append(("".join(la[i1:i2]), op != "equal"))
            sb.append(("".join(lb[j1:j2]), op != "equal"))
    return _merge(sa), _merge(sb)


@dataclass(slots=True)
class MessageSide:
    """One rollout's message in an aligned pair."""

    index: int  # its position in the rollout's messages
    role: str
    name: str  # the tool's name or call id, else ""
    text: str
    spans: list[Span]

    def title(self) -> str:
        return self.role + (f" ({self.name})" if self.name else "")

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "role": self.role, "name": self.name, "text": self.text,
                "spans": [[t, c] for t, c in self.spans]}


@dataclass(slots=True)
class MessagePair:
    """Message ``a`` of the first rollout facing message ``b`` of the second (either may be missing)."""

    a: MessageSide | None
    b: MessageSide | None

    @property
    def status(self) -> str:
        """``same``, ``changed``, ``only_a`` or ``only_b``."""
        if self.b is None:
            return "only_a"
        if self.a is None:
            return "only_b"
        same = (self.a.role, self.a.name, self.a.text) == (self.b.role, self.b.name, self.b.text)
        return "same" if same else "changed"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "a": self.a and self.a.to_json(), "b": self.b and self.b.to_json()}


@dataclass(slots=True)
class ValueDiff:
    """One compared value: a field (``kind`` "") or a score (``kind`` reward | metric)."""

    name: str
    a: Any
    b: Any
    kind: str = ""

    @property
    def changed(self) -> bool:
        return self.a != self.b

    @property
    def delta(self) -> float | None:
        """``b - a`` when both are numbers, else None."""
        nums = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (self.a, self.b))
        return round(self.b - self.a, 12) if nums else None  # 0.3 - 0.29 is 0.01, not 0.010000000000000009

    def to_json(self) -> dict[str, Any]:
        out = {"a": self.a, "b": self.b, "delta": self.delta}
        return {"kind": self.kind, **out} if self.kind else out


@dataclass(slots=True)
class RolloutDiff:
    a: dict[str, Any]  # the full rollouts (get_rollout dicts)
    b: dict[str, Any]
    fields: list[ValueDiff] = field(default_factory=list)
    scores: list[ValueDiff] = field(default_factory=list)
    messages: list[MessagePair] = field(default_factory=list)

    @property
    def same_task(self) -> bool:
        return (self.a.get("env_name"), self.a.get("task_id")) == (self.b.get("env_name"), self.b.get("task_id"))

    @property
    def changed_messages(self) -> int:
        return sum(p.status != "same" for p in self.messages)

    def to_json(self) -> dict[str, Any]:
        """What ``workbench diff --json`` prints."""
        return {
            "a": self.a["id"], "b": self.b["id"], "same_task": self.same_task,
            "fields": {f.name: f.to_json() for f in self.fields},
            "scores": {s.name: s.to_json() for s in self.scores},
            "errors": {"a": self.a.get("errors") or [], "b": self.b.get("errors") or []},
            "changed_messages": self.changed_messages,
            "messages": [p.to_json() for p in self.messages],
        }


def _side(i: int, m: dict[str, Any], spans: list[Span] | None = None) -> MessageSide:
    text = message_text(m)
    name = str(m.get("name") or m.get("tool_call_id") or "")
    spans = spans if spans is not None else _merge([(text, True)])  # a message only one side has
    return MessageSide(i, str(m.get("role", "?")), name, text, spans)


def _pair(i: int, ma: dict[str, Any], j: int, mb: dict[str, Any]) -> MessagePair:
    sa, sb = text_spans(message_text(ma), message_text(mb))
    return MessagePair(_side(i, ma, sa), _side(j, mb, sb))


def _words(text: str) -> frozenset[str]:
    return frozenset(w for t in _TOKEN.findall(text) if (w := t.strip()))


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """How much two messages share, 0..1: the overlap of their distinct words (set operations, so
    scoring every pair of a long differing stretch stays fast)."""
    if not a and not b:
        return 1.0
    return 2 * len(a & b) / (len(a) + len(b))


def _by_role_order(a: list[dict[str, Any]], b: list[dict[str, Any]], i0: int, j0: int, ra: list[str],
                   rb: list[str]) -> Iterator[MessagePair]:
    """A stretch too long to score every pair: runs of the same roles face each other in order."""
    for op, i1, i2, j1, j2 in SequenceMatcher(None, ra, rb, autojunk=False).get_opcodes():
        n = i2 - i1 if op == "equal" else 0
        for k in range(n):
            yield _pair(i0 + i1 + k, a[i1 + k], j0 + j1 + k, b[j1 + k])
        for k in range(i1 + n, i2):
            yield MessagePair(_side(i0 + k, a[k]), None)
        for k in range(j1 + n, j2):
            yield MessagePair(None, _side(j0 + k, b[k]))


def _by_role(a: list[dict[str, Any]], b: list[dict[str, Any]], i0: int, j0: int) -> Iterator[MessagePair]:
    """Pairs for a stretch where no message is identical. Only messages of the same role face each
    other, in order; a pair scores 1 plus the share of words its two messages have in common, and
    the pairing with the highest total wins (so B's final answer faces A's final answer, not A's
    tool call). The rest stand alone."""
    n, m = len(a), len(b)
    ra, rb = [str(x.get("role")) for x in a], [str(x.get("role")) for x in b]
    if n * m > MAX_ALIGN_CELLS:
        yield from _by_role_order(a, b, i0, j0, ra, rb)
        return
    wa, wb = [_words(message_text(x)) for x in a], [_words(message_text(x)) for x in b]
    sim = [[_similarity(wa[i], wb[j]) if ra[i] == rb[j] else 0.0 for j in range(m)] for i in range(n)]
    best = [[0.0] * (m + 1) for _ in range(n + 1)]  # best[i][j]: the best score for a[i:] against b[j:]
    for i in reversed(range(n)):
        for j in reversed(range(m)):
            score = max(best[i + 1][j], best[i][j + 1])
            if ra[i] == rb[j]:
                score = max(score, 1.0 + sim[i][j] + best[i + 1][j + 1])
            best[i][j] = score
    i = j = 0
    while i < n and j < m:
        if ra[i] == rb[j] and best[i][j] == 1.0 + sim[i][j] + best[i + 1][j + 1]:
            yield _pair(i0 + i, a[i], j0 + j, b[j])
            i, j = i + 1, j + 1
        elif best[i][j] == best[i + 1][j]:
            yield MessagePair(_side(i0 + i, a[i]), None)
            i += 1
        else:
            yield MessagePair(None, _side(j0 + j, b[j]))
            j += 1
    for k in range(i, n):
        yield MessagePair(_side(i0 + k, a[k]), None)
    for k in range(j, m):
        yield MessagePair(None, _side(j0 + k, b[k]))


def align_messages(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[MessagePair]:
    """The two conversations as aligned pairs, in order (see the module docstring)."""
    def key(m: dict[str, Any]) -> tuple[str, str, str]:
        return str(m.get("role")), str(m.get("name") or m.get("tool_call_id") or ""), message_text(m)

    ka, kb = [key(m) for m in a], [key(m) for m in b]
    out: list[MessagePair] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, ka, kb, autojunk=False).get_opcodes():
        if op == "equal":
            out += [MessagePair(_side(i1 + k, a[i1 + k], [(ka[i1 + k][2], False)] if ka[i1 + k][2] else []),
                                _side(j1 + k, b[j1 + k], [(kb[j1 + k][2], False)] if kb[j1 + k][2] else []))
                    for k in range(i2 - i1)]
        else:
            out += _by_role(a[i1:i2], b[j1:j2], i1, j1)
    return out


def _status(r: dict[str, Any]) -> str:
    return "ok" if r.get("status") == "ok" else str(r.get("error_kind") or r.get("status") or "error")


def _latency_s(r: dict[str, Any]) -> float:
    return sum((c.get("latency_ms") or 0.0) for c in r.get("calls") or []) / 1000.0


#: (field name, how to read it from a rollout)
FIELDS: list[tuple[str, Any]] = [
    ("status", _status),
    ("reward", lambda r: r.get("reward")),
    ("turns", lambda r: r.get("turns")),
    ("prompt_tokens", lambda r: r.get("prompt_tokens")),
    ("completion_tokens", lambda r: r.get("completion_tokens")),
    ("duration_s", lambda r: r.get("duration_s")),
    ("model_calls", lambda r: len(r.get("calls") or [])),
    ("latency_s", _latency_s),
    ("cost_usd", lambda r: r.get("cost_usd")),
    ("model", lambda r: r.get("model")),
    ("run", lambda r: r.get("run_id")),
    ("task", lambda r: f"#{r.get('task_index')} {r.get('task_id')}"),
    ("sample", lambda r: r.get("sample_index")),
]


def _scores(a: dict[str, Any], b: dict[str, Any]) -> list[ValueDiff]:
    out = []
    for kind, key in (("reward", "rewards"), ("metric", "metrics")):
        sa, sb = a.get(key) or {}, b.get(key) or {}
        for name in [*sa, *(n for n in sb if n not in sa)]:
            out.append(ValueDiff(name, sa.get(name), sb.get(name), kind))
    return out


def diff_rollouts(a: dict[str, Any], b: dict[str, Any]) -> RolloutDiff:
    """Compare two rollouts as :func:`~workbench.store.queries.get_rollout` returns them."""
    return RolloutDiff(a, b, fields=[ValueDiff(name, read(a), read(b)) for name, read in FIELDS],
                       scores=_scores(a, b),
                       messages=align_messages(a.get("messages") or [], b.get("messages") or []))


def load_diff(conn: sqlite3.Connection, key_a: str, key_b: str) -> RolloutDiff:
    """Read both rollouts (an id, a unique prefix of one, or a pk) and compare them; an unknown or
    ambiguous key raises :class:`~workbench.errors.NotFoundError` naming it."""
    from workbench.store.queries import get_rollout

    return diff_rollouts(get_rollout(conn, key_a), get_rollout(conn, key_b))

