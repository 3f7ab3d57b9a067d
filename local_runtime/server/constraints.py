"""Constrained decoding with llguidance: ``response_format`` and ``tool_choice`` as grammars, enforced
token by token.

A request's constraint becomes one Lark grammar (llguidance's dialect, with ``%json`` for JSON schemas),
compiled once per distinct grammar (an LRU of matchers in their start state) and copied for each
sequence. At every step the runner asks :meth:`Constraints.allowed` for the rows that carry a matcher;
the sampler sets every other token's logit to -inf, samples, and the matcher consumes the sampled
token. The token trace holds exactly what was sampled: a token the grammar forces is still sampled
(with probability 1 under the mask) and recorded with its logprob, never spliced in.

- ``response_format``: ``json_object`` is any JSON object, ``json_schema`` its schema, ``text`` free.
- ``tool_choice``: ``required`` is one or more calls in the model's syntax
  (``<tool_call>{"name": NAME, "arguments": ARGS}</tool_call>``, see chat_template.py), NAME one of the
  tools and ARGS valid against its ``parameters``; a named function is one call of it; ``none`` is
  text that cannot contain the tool-call opener; ``auto`` is free (or, with a ``response_format``,
  the format's reply or tool calls).

JSON is written the way the chat template writes tool arguments (``json.dumps``: ``", "`` and ``": "``
between items, no other whitespace), so a weak model cannot wander off into whitespace.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from workbench_local.models.chat_template import TOOL_CLOSE, TOOL_OPEN

#: The JSON style every schema is compiled with (a schema's own ``x-guidance`` options win).
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
#: From this many constrained rows in one step on, masks are computed by llguidance's thread pool.
PARALLEL_ROWS = 32


class ConstraintError(ValueError):
    """A constraint that cannot be built or compiled: a 400 naming ``param``."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


@dataclass(frozen=True, slots=True)
class Compiled:
    grammar: str
    start: Any  # an llguidance.LLMatcher in its start state; each sequence gets a copy


def _styled(schema: Any, where: str) -> dict[str, Any]:
    if schema is True:
        schema = {}
    if not isinstance(schema, dict):
        raise ConstraintError(f"{where} must be a JSON schema (an object)", where)
    return {**schema, "x-guidance": {**JSON_STYLE, **(schema.get("x-guidance") or {})}}


def _lit(text: str) -> str:
    """``text`` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if c in r"\/.^$*+?()[]{}|-&~" else c for c in text)


def _tool_functions(tools: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tools):
        fn = (t.get("function") or t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConstraintError(f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                                  "'parameters': {...}}}}", f"tools[{i}].function.name")
        out.append(fn)
    return out


class Constraints:
    """The grammars of one served tokenizer: built, validated, compiled and applied."""

    def __init__(self, tokenizer: Any, eos_ids: Any, cache_size: int = 128) -> None:
        self.hf = tokenizer
        self.eos_ids = sorted(eos_ids)
        self.cache_size = cache_size
        self._llt: Any = None
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._executor: Any = None

    # -- the tokenizer as llguidance sees it --------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        if self._llt is None:
            import llguidance.hf

            try:
                self._llt = llguidance.hf.from_tokenizer(self.hf, eos_token=self.eos_ids or None)
            except ValueError as e:
                raise ConstraintError(f"constrained decoding needs a fast (Rust) tokenizer; this model's is "
                                      f"{type(self.hf).__name__} ({e})", "response_format") from None
        return self._llt

    def _marker(self, text: str) -> str:
        """A tool-call marker in a grammar: its token when the tokenizer has it as one, else its text."""
        ids = self.hf(text, add_special_tokens=False)["input_ids"]
        if len(ids) == 1 and self.tokenizer.is_special_token(ids[0]):
            return f"<[{ids[0]}]>"
        return _lit(text)

    # -- building a request's grammar ---------------------------------------------------------------
    def _json_rule(self, schema: Any, where: str) -> str:
        styled = _styled(schema, where)
        self.check(self._from_schema(styled), where)
        return "%json " + json.dumps(styled, ensure_ascii=False)

    def _from_schema(self, styled: dict[str, Any]) -> str:
        from llguidance import LLMatcher

        return LLMatcher.grammar_from_lark("start: %json " + json.dumps(styled, ensure_ascii=False) + "\n")

    def _content_rule(self, response_format: Any) -> str | None:
        if response_format is None:
            return None
        kind = response_format.get("type") if isinstance(response_format, dict) else None
        if kind == "text":
            return None
        if kind == "json_object":
            return self._json_rule({"type": "object"}, "response_format")
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise ConstraintError("response_format of type 'json_schema' needs json_schema: {'name': ..., "
                                      "'schema': {...}}", "response_format.json_schema")
            return self._json_rule(spec["schema"], "response_format.json_schema.schema")
        raise ConstraintError("response_format.type must be 'text', 'json_object' or 'json_schema'",
                              "response_format.type")

    def _calls_rules(self, fns: list[dict[str, Any]], indexes: list[int]) -> list[str]:
        rules = []
        for k, i in enumerate(indexes):
            fn = fns[i]
            head = _lit(json.dumps(fn["name"], ensure_ascii=False) + ', "arguments": ')
            params = fn.get("parameters")
            args = self._json_rule({"type": "object"} if params is None else params,
                                   f"tools[{i}].function.parameters")
            rules.append(f"fn_{k}: {head} {args}")
        return rules

    def chat_grammar(self, response_format: Any = None, tools: list[Any] | None = None, tool_choice: Any = None,
                     parallel_tool_calls: bool | None = None) -> str | None:
        """The Lark grammar a chat request's reply must match, or None when it is unconstrained."""
        content = self._content_rule(response_format)
        if not tools:
            return None if content is None else f"start: {content}\n"
        fns = _tool_functions(tools)
        if tool_choice in (None, "auto"):
            mode, chosen = "auto", list(range(len(fns)))
        elif tool_choice in ("none", "required"):
            mode, chosen = tool_choice, list(range(len(fns)))
        elif isinstance(tool_choice, dict):
            name = (tool_choice.get("function") or {}).get("name")
            if not isinstance(name, str):
                raise ConstraintError("tool_choice must name a function: {'type': 'function', 'function': "
                                      "{'name': ...}}", "tool_choice")
            chosen = [i for i, fn in enumerate(fns) if fn["name"] == name][:1]
            if not chosen:
                raise ConstraintError(f"tool_choice names {name!r}, which is not in 'tools'", "tool_choice")
            mode, parallel_tool_calls = "named", False
        else:
            raise ConstraintError("tool_choice must be 'none', 'auto', 'required' or a named function",
                                  "tool_choice")
        if mode == "none":
            text = f"TEXT: /(.|\\n)*/ & ~/(.|\\n)*{_regex_escape(TOOL_OPEN)}(.|\\n)*/"
            return f"start: {content}\n" if content is not None else f"start: TEXT\n{text}\n"
        if mode == "auto" and content is None:
            return None
        alternatives = " | ".join(f"fn_{k}" for k in range(len(chosen)))
        calls = "call" if parallel_tool_calls is False else "call+"
        opener, closer = _lit('{"name": '), _lit("}")
        call = f"call: {self._marker(TOOL_OPEN)} {opener} ({alternatives}) {closer} {self._marker(TOOL_CLOSE)}"
        lines = [call, *self._calls_rules(fns, chosen)]
        start = f"start: {calls}" if mode != "auto" else f"start: {content} | {calls}"
        return "\n".join([start, *lines]) + "\n"

    def completion_grammar(self, response_format: Any = None) -> str | None:
        content = self._content_rule(response_format)
        return None if content is None else f"start: {content}\n"

    # -- compiling and running ----------------------------------------------------------------------
    def check(self, lark: str, param: str) -> None:
        """A 400 naming ``param`` when ``lark`` does not compile (cached with the compiled grammars)."""
        self.compile(lark, param)

    def compile(self, lark: str, param: str) -> Compiled:
        with self._lock:
            hit = self._cache.get(lark)
            if hit is not None:
                self._cache.move_to_end(lark)
        if hit is None:
            from llguidance import LLMatcher

            try:
                start = LLMatcher(self.tokenizer, LLMatcher.grammar_from_lark(lark), log_level=0)
                error = start.get_error() if start.is_error() else ""
            except Exception as e:  # a grammar llguidance refuses outright
                error = f"{type(e).__name__}: {e}"
            if error:
                raise ConstraintError(f"{param} cannot be compiled into a grammar: {' '.join(error.split())[:300]}",
                                      param)
            hit = Compiled(lark, start)
            with self._lock:
                self._cache[lark] = hit
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return hit

    def matcher(self, compiled: Compiled) -> Any:
        """A fresh matcher for one sequence."""
        return compiled.start.deep_copy()

    def allowed(self, matchers: list[Any], vocab: int, device: Any) -> Any:
        """A bool tensor [rows, vocab]: which tokens each row's matcher allows next (every token for a
        row without one). A matcher in an error state allows only the end of sequence, so the row ends
        (and the runner reports the error) instead of sampling from nothing."""
        import numpy as np
        import torch

        llt = self.tokenizer
        words = (llt.vocab_size + 31) // 32
        bits = np.full((len(matchers), words), -1, dtype=np.int32)
        pairs = [(m, i) for i, m in enumerate(matchers) if m is not None]
        if len(pairs) >= PARALLEL_ROWS:
            if self._executor is None:
                from llguidance import LLExecutor

                self._executor = LLExecutor()
            self._executor.unsafe_compute_mask_ptr(pairs, bits.ctypes.data, words * 4, len(matchers))
        else:
            for m, i in pairs:
                m.unsafe_compute_mask_ptr(bits[i].ctypes.data, words * 4)
        unpacked = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")
        width = min(vocab, llt.vocab_size)
        mask = np.ones((len(matchers), vocab), dtype=bool)
        for _, i in pairs:  # ids past the tokenizer's (padding of the logits) are never allowed
            mask[i, :width] = unpacked[i, :width]
            mask[i, width:] = False
            if not mask[i].any():
                mask[i, [e for e in self.eos_ids if e < vocab]] = True
        return torch.from_numpy(mask).to(device)
