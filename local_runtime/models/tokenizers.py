"""The ``workbench.tokenizers`` plugin ``transformers``: a model's tokenizer loaded offline, and where a
served model's tokenizer is (the embedded server's own resolution). A local model folder with a
``tokenizer.json`` and a chat template loads through :mod:`workbench_local.models.fast_tokenizer` in
milliseconds; anything else through transformers' ``AutoTokenizer``."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from workbench.errors import ConfigError

if TYPE_CHECKING:
    from workbench.rollouts.render import Tokenizers


class TransformersTokenizers:
    name = "transformers"

    def load(self, name_or_path: str) -> Any:
        """The tokenizer of a local model path or HF id (offline: never downloads)."""
        from pathlib import Path

        from workbench_local.models.fast_tokenizer import FastTokenizer, Unsupported

        # WORKBENCH_TOKENIZER_BACKEND=transformers takes the slow path always (scripts/bench_tokens.py compares)
        if Path(name_or_path).is_dir() and os.environ.get("WORKBENCH_TOKENIZER_BACKEND") != "transformers":
            try:
                return FastTokenizer(Path(name_or_path))
            except Unsupported:
                pass
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ConfigError("re-rendering needs transformers: pip install 'rl-workbench[local]'") from None
        try:
            tok = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
        except Exception as e:
            raise ConfigError(f"cannot load a tokenizer for {name_or_path!r} ({type(e).__name__}: {str(e)[:200]}); "
                              "pass a local model directory or a cached HF id") from None
        if not getattr(tok, "chat_template", None):
            raise ConfigError(f"the tokenizer of {name_or_path!r} has no chat template; set tokenizer.chat_template "
                              "(a Jinja template) in its tokenizer_config.json")
        return tok

    def default_for(self, model: str) -> str | None:
        """The tokenizer to decode a model's tokens with, when it can be found offline (else None)."""
        from workbench_local.models.resolve import resolve_model_path  # the embedded server's own resolution

        try:
            return str(resolve_model_path(model))
        except Exception:
            return None


TOKENIZERS: Tokenizers = TransformersTokenizers()
