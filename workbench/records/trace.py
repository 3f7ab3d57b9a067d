"""Token-exact traces: a graph of message segments, each holding the tokens it adds.

Every model call of a rollout is recorded with the exact token ids (and logprobs) the server
produced — never a re-tokenization. A call's prompt should *extend* the tokens already on its
path (previous prompt + previous completion); where it does not, the server re-tokenized the
conversation differently than it sampled it (the silent killer of multi-turn RL): the call is
recorded as a mismatch, with the first differing position, and starts a new branch. Branches are
also how compaction and sub-agents appear: a call whose messages do not extend an existing path.

Nodes are segments: an ``env`` node holds the non-assistant messages that arrived together plus
the template tokens around them (mask 0); an ``assistant`` node holds one sampled message, its
token ids and logprobs (mask 1). Stored packed (int32 ids, float32 logprobs, uint8 mask).

Each call also keeps the tool schemas it sent (``Trace.call_tools``): the chat template renders them
into the prompt, so re-rendering a call needs that call's own tools, not the ones a harness declares
(an agent program sends its own). Traces stored before they were kept have ``call_tools = None``.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

import orjson

Message = dict[str, Any]


def _arguments(args: Any) -> Any:
    """A tool call's arguments as a value: the same JSON written with other spacing or key order (an SDK
    that parses the reply's arguments and serialises them again) is the same call."""
    if isinstance(args, str):
        try:
            return orjson.loads(args)
        except orjson.JSONDecodeError:
            return args
    return args


def message_key(m: Message) -> bytes:
    """A canonical identity for a message, ignoring fields servers add (reasoning, refusal, ids) and how
    a tool call's JSON arguments are spaced."""
    slim = {"role": m.get("role"), "content": m.get("content") or "", "tool_calls": [
        {"name": (tc.get("function") or {}).get("name"), "arguments": _arguments((tc.get("function") or {}).get(
            "arguments"))} for tc in m.get("tool_calls") or ()], "tool_call_id": m.get("tool_call_id")}
    return orjson.dumps(slim, option=orjson.OPT_SORT_KEYS)


@dataclass(slots=True)
class TraceNode:
    id: int
    parent: int | None
    kind: str  # "env" | "assistant"
    messages: list[Message]
    tokens: array = field(default_factory=lambda: array("i"))
    logprobs: array = field(default_factory=lambda: array("f"))  # one per token for assistant nodes, else empty
    call: int | None = None  # the model call that produced (assistant) or first sent (env) this node
    policy_version: Any = None
    keys: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class Mismatch:
    call: int
    position: int  # index into the call's prompt token ids where it first differs from its path
    expected: int | None  # the token on the path at that position
    got: int | None  # the token the server used


#: The key marking a recorded message as a raw ``/v1/completions`` prompt: its tokens are the text's,
#: not a chat template's rendering.
RAW_PROMPT = "raw_prompt"


@dataclass(slots=True)
class Trace:
    nodes: list[TraceNode] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    calls: int = 0
    has_tokens: bool = False
    #: The tool schemas each call sent (None where it sent none), by call; None for a trace stored before
    #: they were recorded.
    call_tools: list[list[dict[str, Any]] | None] | None = field(default_factory=list)
    #: Each node's children by the key of their first message (a path continues through one of them).
    _children: dict[tuple[int | None, bytes], list[TraceNode]] = field(default_factory=dict, repr=False)

    def _add(self, node: TraceNode) -> TraceNode:
        self.nodes.append(node)
        if node.keys:
            self._children.setdefault((node.parent, node.keys[0]), []).append(node)
        return node

    # -- recording ---------------------------------------------------------------------------
    def record(
        self,
        request_messages: list[Message],
        reply: Message,
        prompt_ids: list[int] | None = None,
        completion_ids: list[int] | None = None,
        completion_logprobs: list[float] | None = None,
        policy_version: Any = None,
        tools: list[dict[str, Any]] | None = None,
        keys: list[bytes] | None = None,
    ) -> TraceNode:
        """Add one model call: the messages it was sent (``keys``: their :func:`message_key`, when the
        caller has them already), the tool schemas it sent, and the assistant message it produced."""
        call = self.calls
        self.calls += 1
        if self.call_tools is not None:
            self.call_tools.append(tools)
        keys = keys if keys is not None else [message_key(m) for m in request_messages]
        path, used = self._match(keys)
        path_tokens = array("i")
        for n in path:
            path_tokens.extend(n.tokens)
        new_prompt: array = array("i")
        if prompt_ids is not None:
            self.has_tokens = True
            pids = array("i", prompt_ids)
            if pids[: len(path_tokens)] == path_tokens:
                new_prompt = pids[len(path_tokens):]
            else:
                pos = next((i for i, (a, b) in enumerate(zip(path_tokens, pids, strict=False)) if a != b),
                           min(len(path_tokens), len(pids)))
                self.mismatches.append(Mismatch(call, pos, path_tokens[pos] if pos < len(path_tokens) else None,
                                                pids[pos] if pos < len(pids) else None))
                # The server's view of the conversation is not the sampled one: start a fresh branch.
                path, used, new_prompt = [], 0, pids
        parent = path[-1].id if path else None
        rest = request_messages[used:]
        if rest or new_prompt:
            env = self._add(TraceNode(len(self.nodes), parent, "env", [dict(m) for m in rest], new_prompt,
                                      call=call, keys=keys[used:]))
            parent = env.id
        toks = array("i", completion_ids or ())
        lps = array("f", completion_logprobs or ()) if completion_logprobs and len(completion_logprobs) == len(toks) \
            else array("f")
        return self._add(TraceNode(len(self.nodes), parent, "assistant", [dict(reply)], toks, lps, call=call,
                                   policy_version=policy_version, keys=[message_key(reply)]))

    def path_for(self, messages: list[Message]) -> tuple[list[TraceNode], int]:
        """The recorded path whose messages are the longest prefix of ``messages``, and how many
        of the messages it covers."""
        return self._match([message_key(m) for m in messages])

    def _match(self, keys: list[bytes]) -> tuple[list[TraceNode], int]:
        """The longest path of whole nodes whose messages are a prefix of ``keys``."""
        path: list[TraceNode] = []
        used = 0
        parent: int | None = None
        while used < len(keys):
            best = None
            for n in reversed(self._children.get((parent, keys[used]), ())):
                if keys[used: used + len(n.keys)] == n.keys:
                    best = n  # the newest matching child wins (a retried call)
                    break
            if best is None:
                return path, used
            path.append(best)
            used += len(best.keys)
            parent = best.id
        return path, used

    # -- reading -----------------------------------------------------------------------------
    def tools_of(self, call: int, default: list[dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
        """The tool schemas call ``call`` sent; ``default`` where the trace does not know (stored before
        calls' tools were recorded)."""
        if self.call_tools is None or call >= len(self.call_tools):
            return default
        return self.call_tools[call]

    def branches(self) -> list[list[TraceNode]]:
        """Every root-to-leaf path: the token sequences a trainer sees."""
        children: dict[int | None, list[TraceNode]] = {}
        for n in self.nodes:
            children.setdefault(n.parent, []).append(n)
        out: list[list[TraceNode]] = []

        def walk(n: TraceNode, acc: list[TraceNode]) -> None:
            acc = [*acc, n]
            kids = children.get(n.id)
            if not kids:
                out.append(acc)
            for k in kids or ():
                walk(k, acc)

        for root in children.get(None, []):
            walk(root, [])
        return out

    def sequence(self, branch: list[TraceNode]) -> tuple[list[int], list[float], list[int]]:
        """Token ids, logprobs (0.0 where not sampled) and loss mask of one branch."""
        ids: list[int] = []
        lps: list[float] = []
        mask: list[int] = []
        for n in branch:
            ids.extend(n.tokens)
            if n.kind == "assistant":
                lps.extend(n.logprobs if len(n.logprobs) == len(n.tokens) else [0.0] * len(n.tokens))
                mask.extend([1] * len(n.tokens))
            else:
                lps.extend([0.0] * len(n.tokens))
                mask.extend([0] * len(n.tokens))
        return ids, lps, mask

    # -- packing -----------------------------------------------------------------------------
    def pack(self) -> tuple[bytes, bytes, bytes, bytes]:
        """(nodes JSON, int32 token ids, float32 logprobs, uint8 mask), concatenated in node order."""
        ids = array("i")
        lps = array("f")
        mask = bytearray()
        meta = []
        for n in self.nodes:
            meta.append({"id": n.id, "parent": n.parent, "kind": n.kind, "messages": n.messages, "start": len(ids),
                         "len": len(n.tokens), "call": n.call, "version": n.policy_version,
                         "has_logprobs": len(n.logprobs) == len(n.tokens) and n.kind == "assistant"})
            ids.extend(n.tokens)
            if n.kind == "assistant" and len(n.logprobs) == len(n.tokens):
                lps.extend(n.logprobs)
            else:
                lps.extend([0.0] * len(n.tokens))
            mask.extend((b"\x01" if n.kind == "assistant" else b"\x00") * len(n.tokens))
        doc = {"nodes": meta, "calls": self.calls, "has_tokens": self.has_tokens,
               "mismatches": [{"call": m.call, "position": m.position, "expected": m.expected, "got": m.got}
                              for m in self.mismatches]}
        if self.call_tools is not None:
            doc["tool_sets"], doc["call_tools"] = _pack_tools(self.call_tools)
        return orjson.dumps(doc, default=repr), ids.tobytes(), lps.tobytes(), bytes(mask)

    @classmethod
    def unpack(cls, nodes_json: bytes | str, ids: bytes, lps: bytes, mask: bytes) -> Trace:
        doc = orjson.loads(nodes_json)
        all_ids = array("i")
        all_ids.frombytes(ids)
        all_lps = array("f")
        all_lps.frombytes(lps)
        sets, per_call = doc.get("tool_sets") or [], doc.get("call_tools")
        t = cls(calls=doc.get("calls", 0), has_tokens=doc.get("has_tokens", False),
                call_tools=None if per_call is None else [None if i is None else sets[i] for i in per_call])
        for m in doc["nodes"]:
            s, n = m["start"], m["len"]
            node = TraceNode(m["id"], m["parent"], m["kind"], m["messages"], all_ids[s: s + n],
                             all_lps[s: s + n] if m.get("has_logprobs") else array("f"), m.get("call"),
                             m.get("version"), [message_key(x) for x in m["messages"]])
            t._add(node)
        t.mismatches = [Mismatch(x["call"], x["position"], x["expected"], x["got"]) for x in doc.get("mismatches", [])]
        return t


def _pack_tools(per_call: list[list[dict[str, Any]] | None]) -> tuple[list[Any], list[int | None]]:
    """Each distinct tool list once (calls of one rollout mostly send the same tools), and per call the
    index of its list in them (None: it sent none)."""
    sets: list[Any] = []
    seen: dict[bytes, int] = {}
    same: dict[int, int] = {}  # by identity: a harness sends the very same list on every call
    out: list[int | None] = []
    for tools in per_call:
        if tools is None:
            out.append(None)
            continue
        i = same.get(id(tools))
        if i is None:
            k = orjson.dumps(tools, default=repr, option=orjson.OPT_SORT_KEYS)
            i = seen.setdefault(k, len(sets))
            if i == len(sets):
                sets.append(tools)
            same[id(tools)] = i
        out.append(i)
    return sets, out


def completion_logprobs(logprobs: Any) -> list[float] | None:
    """The per-token logprobs out of an OpenAI-style ``choice.logprobs`` object."""
    if not isinstance(logprobs, dict):
        return None
    content = logprobs.get("content")
    if isinstance(content, list):
        return [float(t.get("logprob", 0.0)) for t in content if isinstance(t, dict)]
    toks = logprobs.get("token_logprobs")  # /v1/completions format
    if isinstance(toks, list):
        return [float(x) if x is not None else 0.0 for x in toks]
    return None
