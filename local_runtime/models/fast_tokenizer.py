"""A model's tokenizer without transformers: ``tokenizer.json`` through the ``tokenizers`` library and its
chat template rendered by jinja2, configured as transformers configures it (a sandboxed environment with
``trim_blocks``/``lstrip_blocks``, loop controls, its ``tojson``, ``raise_exception`` and ``strftime_now``).

Importing transformers and building an ``AutoTokenizer`` takes seconds; this takes milliseconds, which is
what a token view needs. It serves what the trace tools use — ``decode`` and ``apply_chat_template`` — and
refuses (:class:`Unsupported`) a model it cannot serve the same way (no ``tokenizer.json``, no chat
template, a template jinja2 cannot compile), so the caller falls back to transformers for it.
transformers' own ``{% generation %}`` tag (what ``return_assistant_tokens_mask`` reads) renders its body
here, as it does there.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any


class Unsupported(Exception):
    """This model's tokenizer needs transformers itself."""


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


@lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: marks what the assistant writes; renders its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
               sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols", Generation])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise Unsupported(f"the chat template needs transformers ({e})") from None


class FastTokenizer:
    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        tj = path / "tokenizer.json"
        if not tj.is_file():
            raise Unsupported(f"{path} has no tokenizer.json")
        cfg_file = path / "tokenizer_config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
        template: Any = None
        if (path / "chat_template.jinja").is_file():  # the file wins over the config's copy, as in transformers
            template = (path / "chat_template.jinja").read_text()
        if not template:
            template = cfg.get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str) or not template:
            raise Unsupported(f"{path} has no chat template")
        self.chat_template = template
        self._template = _compile(template)
        self._tok = Tokenizer.from_file(str(tj))
        self.special = {k: t for k in ("bos_token", "eos_token", "pad_token", "unk_token")
                        if (t := _token_text(cfg.get(k))) is not None}
        self.name_or_path = str(path)

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The ids of ``text`` (as :meth:`encode`) and each token's character span in it."""
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids, [(start, end) for start, end in enc.offsets]

    def apply_chat_template(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
                            add_generation_prompt: bool = False, tokenize: bool = True, **kwargs: Any) -> Any:
        text = self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                     **self.special, **kwargs)
        return self.encode(text) if tokenize else text


__all__ = ["FastTokenizer", "Unsupported"]
