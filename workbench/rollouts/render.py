"""Re-render a trace's messages with the model's chat template and compare with the recorded tokens.

The recorded token ids are the truth (what the server sampled). If re-rendering the same messages
with the model's chat template gives different ids, a trainer that re-tokenizes would train on
tokens the model never produced. This module finds the first differing position per model call
and names the likely cause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

from workbench.errors import ConfigError
from workbench.records.trace import RAW_PROMPT, Trace, TraceNode


@dataclass(slots=True)
class RenderMismatch:
    call: int
    position: int
    recorded: list[int]  # a few tokens around the position, as recorded
    rendered: list[int]  # the same window, as the template renders it
    recorded_text: str
    rendered_text: str
    cause: str  # whitespace | stripped reasoning | template drift | truncated | retokenized reply | reply re-rendered

    def describe(self) -> str:
        return (f"call {self.call}: first difference at token {self.position} ({self.cause}): recorded "
                f"{self.recorded_text!r} vs re-rendered {self.rendered_text!r}")


@runtime_checkable
class Tokenizers(Protocol):
    """What a ``workbench.tokenizers`` plugin names."""

    def load(self, name_or_path: str) -> Any:
        """The tokenizer (transformers' interface: ``apply_chat_template``, ``decode``, ...) of a local model
        path or HF id, offline, with a chat template."""
        ...

    def default_for(self, model: str) -> str | None:
        """The tokenizer to decode a served model's tokens with, when it can be found offline."""
        ...


def is_tokenizers(found: object) -> TypeGuard[Tokenizers]:
    return isinstance(found, Tokenizers)


def _tokenizers() -> Tokenizers:
    from workbench import plugins

    names = plugins.names("tokenizers")
    if not names:
        raise ConfigError("re-rendering needs a tokenizer plugin (the bundled one uses transformers): "
                          "pip install 'rl-workbench[local]'")
    return plugins.load("tokenizers", "transformers" if "transformers" in names else names[0], is_tokenizers)


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of a local model path or HF id (offline: never downloads), with a chat template."""
    return _tokenizers().load(name_or_path)


def default_tokenizer_for(model: str) -> str | None:
    """The tokenizer to decode a model's tokens with, when it can be found offline (else None)."""
    try:
        return _tokenizers().default_for(model)
    except ConfigError:
        return None


def _classify(rec: str, ren: str) -> str:
    if "".join(rec.split()) == "".join(ren.split()):
        return "whitespace"
    if any(t in rec and t not in ren for t in ("<think>", "</think>", "<reasoning>")):
        return "stripped reasoning"
    return "template drift"


def _in_reply(path: list[TraceNode], pos: int) -> bool:
    """Whether token ``pos`` of a path's concatenation lies inside a sampled (assistant) segment."""
    start = 0
    for n in path:
        if start <= pos < start + len(n.tokens):
            return n.kind == "assistant"
        start += len(n.tokens)
    return False


def _prompt_paths(trace: Trace) -> list[tuple[TraceNode, list[TraceNode]]]:
    """For every assistant node: the nodes before it on its path (its prompt)."""
    by_id = {n.id: n for n in trace.nodes}
    out = []
    for n in trace.nodes:
        if n.kind != "assistant":
            continue
        path: list[TraceNode] = []
        p = n.parent
        while p is not None:
            path.append(by_id[p])
            p = by_id[p].parent
        out.append((n, path[::-1]))
    return out


def check_trace(trace: Trace, tokenizer: Any, tools: list[dict[str, Any]] | None = None,
                window: int = 6) -> list[RenderMismatch]:
    """Compare each call's recorded prompt tokens with the chat template's rendering of its messages and
    of the tool schemas that call sent (``tools``: what to render with where the trace does not know
    them, a trace stored before they were recorded)."""
    found: list[RenderMismatch] = []
    for node, path in _prompt_paths(trace):
        recorded = [t for p in path for t in p.tokens]
        if not recorded:
            continue
        messages = [m for p in path for m in p.messages]
        if any(m.get(RAW_PROMPT) for m in messages):
            continue  # a /v1/completions prompt: no template rendered it
        rendered = list(tokenizer.apply_chat_template(messages, tools=trace.tools_of(node.call or 0, tools),
                                                      add_generation_prompt=True, tokenize=True, return_dict=False))
        if rendered == recorded:
            continue
        pos = next((i for i, (a, b) in enumerate(zip(recorded, rendered, strict=False)) if a != b),
                   min(len(recorded), len(rendered)))
        lo, hi = max(0, pos - 2), pos + window
        rec, ren = recorded[lo:hi], rendered[lo:hi]
        rec_text, ren_text = tokenizer.decode(rec), tokenizer.decode(ren)
        if _in_reply(path, pos):
            # The model's own sampled tokens: the template renders the reply's text (or its parsed
            # tool calls) differently. Token continuation keeps the sampled ids; a re-tokenizing
            # trainer would not.
            same_text = tokenizer.decode(recorded[pos:]) == tokenizer.decode(rendered[pos:])
            cause = "retokenized reply" if same_text else "reply re-rendered"
        elif pos == min(len(recorded), len(rendered)):
            cause = "truncated"
        else:
            cause = _classify(tokenizer.decode(recorded[pos:]), tokenizer.decode(rendered[pos:]))
        found.append(RenderMismatch(node.call or 0, pos, rec, ren, rec_text, ren_text, cause))
    return found
