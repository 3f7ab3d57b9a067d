"""What a token view shows for one trace: every token, its logprob band, and where mismatches are.

Two kinds of mismatch are placed on the token where they start:

- recorded (``Trace.mismatches``): a call's prompt did not extend the tokens already on its path (the
  server re-tokenized the conversation); the call starts a new branch, marked at the first difference;
- re-rendered (:func:`workbench.rollouts.render.check_trace`): rendering a call's messages (and the tool
  schemas that call sent) with the model's chat template gives other tokens than the recorded prompt;
  marked on the recorded token where it differs, with the likely cause.

No Textual here: the app's TokenView and any other front end draw a :class:`TokenReport`.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

from workbench.analysis.run_env import load_run_env
from workbench.records.trace import Trace, TraceNode
from workbench.store.reports import trace_row

#: Logprob bands, best first: (lowest probability in the band, label). A sampled token's colour
#: says how sure the model was; the last band catches everything below 1%.
BANDS: list[tuple[float, str]] = [(0.9, "p ≥ 0.9"), (0.5, "≥ 0.5"), (0.1, "≥ 0.1"), (0.01, "≥ 0.01"), (0.0, "< 0.01")]


def logprob_band(lp: float) -> int:
    """The index into :data:`BANDS` of a logprob."""
    p = math.exp(min(0.0, lp))
    return next(i for i, (low, _) in enumerate(BANDS) if p >= low)


@dataclass(slots=True)
class NodeTokens:
    """One trace node as the view shows it."""

    node: TraceNode
    pieces: list[str]  # decoded text of each token (its id when there is no tokenizer)
    logprobs: list[float] | None  # sampled tokens with stored logprobs only
    marks: dict[int, str] = field(default_factory=dict)  # token index -> short cause

    @property
    def sampled(self) -> bool:
        return self.node.kind == "assistant"


@dataclass(slots=True)
class TokenReport:
    nodes: list[NodeTokens]
    decoded: bool  # pieces are text (a tokenizer was found), not ids
    has_logprobs: bool  # any sampled token has a stored logprob
    mismatches: list[str]  # one explanation per mismatch, in call order
    notes: list[str]  # what the view could not do, and why
    recorded: list[dict[str, Any]] = field(default_factory=list)  # re-tokenized prompts: call, position, expected, got
    rendered: list[dict[str, Any]] = field(default_factory=list)  # chat-template re-render: call, position, cause

    @property
    def tokens(self) -> int:
        return sum(len(n.pieces) for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """What ``show --tokens --json`` prints."""
        return {"mismatches": self.recorded, "render_mismatches": self.rendered, "tokens": self.tokens,
                "decoded": self.decoded, "notes": self.notes}


_TOKENIZERS: dict[str, Any] = {}
_LOCK = threading.Lock()


def cached_tokenizer(name: str) -> Any:
    """:func:`workbench.rollouts.render.load_tokenizer`, once per name (loading one takes seconds)."""
    from workbench.rollouts.render import load_tokenizer

    with _LOCK:
        tok = _TOKENIZERS.get(name)
        if tok is None:
            tok = _TOKENIZERS[name] = load_tokenizer(name)
        return tok


def stored_trace(conn: Any, rollout_pk: int) -> Trace | None:
    """The rollout's token trace as stored, or None when its server returned no token ids."""
    row = trace_row(conn, rollout_pk)
    return Trace.unpack(*row) if row is not None else None


def tools_for_run(store: Any, run_id: str) -> list[dict[str, Any]] | None:
    """The tool schemas a run's harness declares, or None: what a trace stored before each call's own
    tools were recorded is re-rendered with (the chat template renders tools into the prompt, so a
    re-render without them would differ)."""
    return getattr(load_run_env(store, run_id).harness, "schemas", None)


def _offsets(path: list[TraceNode], pos: int) -> tuple[TraceNode, int] | None:
    """The node of ``path`` holding token ``pos`` of the path's concatenation, and the index in it."""
    start = 0
    for n in path:
        if pos < start + len(n.tokens):
            return n, pos - start
        start += len(n.tokens)
    last = next((n for n in reversed(path) if len(n.tokens)), None)
    return (last, len(last.tokens) - 1) if last is not None else None  # past the end: truncated


def build_report(trace: Trace, tokenizer: Any = None, tools: list[dict[str, Any]] | None = None,
                 notes: list[str] | None = None, no_tokenizer: str = "no tokenizer") -> TokenReport:
    """Decode, band and mark every token of ``trace`` (``tokenizer``: a loaded HF tokenizer, or None,
    in which case ``no_tokenizer`` says why). Each call re-renders with the tools it sent; ``tools``
    stands in where the trace does not know them (it was stored before they were recorded)."""
    from workbench.rollouts.render import check_trace

    notes = list(notes or [])
    by_id = {n.id: n for n in trace.nodes}
    views = {n.id: NodeTokens(n, [tokenizer.decode([t]) for t in n.tokens] if tokenizer is not None
                              else [str(t) for t in n.tokens],
                              list(n.logprobs) if n.kind == "assistant" and len(n.logprobs) == len(n.tokens)
                              and len(n.tokens) else None)
             for n in trace.nodes}
    lines: list[tuple[int, str]] = []
    recorded = [{"call": m.call, "position": m.position, "expected": m.expected, "got": m.got}
                for m in trace.mismatches]
    rendered: list[dict[str, Any]] = []
    for m in trace.mismatches:
        root = next((n for n in trace.nodes if n.call == m.call and n.parent is None and n.kind == "env"), None)
        if root is not None and m.position < len(root.tokens):
            views[root.id].marks.setdefault(m.position, "re-tokenized")
        lines.append((m.call, f"call {m.call}: the server's prompt re-tokenized the conversation at token "
                              f"{m.position} (sampled {m.expected}, server used {m.got}); this call starts a new branch"))
    if tokenizer is not None:
        for rm in check_trace(trace, tokenizer, tools):
            node = next((n for n in trace.nodes if n.kind == "assistant" and n.call == rm.call), None)
            path: list[TraceNode] = []
            p = node.parent if node is not None else None
            while p is not None:
                path.append(by_id[p])
                p = by_id[p].parent
            where = _offsets(path[::-1], rm.position)
            if where is not None:
                views[where[0].id].marks.setdefault(where[1], rm.cause)
            lines.append((rm.call, "re-render " + rm.describe()))
            rendered.append({"call": rm.call, "position": rm.position, "cause": rm.cause})
    elif trace.nodes:
        notes.append(f"{no_tokenizer}: token ids are shown and the chat-template re-render check is skipped")
    lines.sort(key=lambda x: x[0])
    nodes = [views[n.id] for n in trace.nodes]
    has_lps = any(v.logprobs for v in nodes)
    if any(v.sampled and v.pieces for v in nodes) and not has_lps:
        notes.append("no logprobs were stored for this rollout (its server did not return them): sampled tokens "
                     "are not coloured")
    return TokenReport(nodes, tokenizer is not None, has_lps, [t for _, t in lines], notes, recorded, rendered)


def report_for(trace: Trace | None, model: str, tools: list[dict[str, Any]] | None = None,
               tokenizer_name: str | None = None, notes: list[str] | None = None) -> TokenReport | None:
    """The report of a trace with the tokenizer of ``model`` (found offline), or None without a trace.

    A tokenizer that cannot be found or loaded is a note in the report, never an error: the ids and
    logprobs are still worth seeing.
    """
    if trace is None or not trace.nodes:
        return None
    notes = list(notes or [])
    from workbench.rollouts.render import default_tokenizer_for

    name = tokenizer_name or default_tokenizer_for(model)
    tok = None
    why = f"no local tokenizer found for model {model!r}"
    if name is not None:
        try:
            tok = cached_tokenizer(name)
        except Exception as e:  # ConfigError, or a broken tokenizer folder
            why = str(e)
    return build_report(trace, tok, tools, notes, why)


def stored_report(store: Any, rollout: dict[str, Any], tokenizer_name: str | None = None) -> TokenReport | None:
    """The report of a stored rollout (a ``get_rollout`` row), or None when it has no token trace: the
    app's token view and ``show --tokens`` both draw this. ``tokenizer_name`` given explicitly must load
    (a ConfigError otherwise); the model's own one, found offline, is a note when it cannot."""
    trace = stored_trace(store.conn, rollout["pk"])
    if trace is None:
        return None
    model = rollout.get("model") or ""
    if tokenizer_name is not None:
        cached_tokenizer(tokenizer_name)  # a tokenizer the user named must load: its error is theirs to see
    from workbench.rollouts.render import default_tokenizer_for

    name = tokenizer_name or default_tokenizer_for(model)
    tools, notes = None, []
    # Tool schemas matter only to the re-render; a trace that knows each call's own needs no stand-in.
    if name is not None and trace.call_tools is None:
        try:
            tools = tools_for_run(store, rollout["run_id"])
        except Exception as e:
            notes.append(f"the run's environment did not load ({e}); re-rendered without its tool schemas")
    return report_for(trace, model, tools, name, notes)
