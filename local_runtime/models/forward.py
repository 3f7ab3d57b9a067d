"""One forward pass of a causal language model with its KV cache, whatever the transformers version calls
the cache: the server's generation and the tiny model's build both step with it."""

from __future__ import annotations

import inspect
from typing import Any

_CACHE_KWARG: dict[type, str] = {}


def _cache_kwarg(model: Any) -> str:
    """``cache`` in transformers 5, ``past_key_values`` before it (and in most remote-code models)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cls = type(base)
    if cls not in _CACHE_KWARG:
        params = inspect.signature(base.forward).parameters
        _CACHE_KWARG[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KWARG[cls]


def forward_step(model: Any, ids: Any, mask: Any, pos: Any, cache: Any, *, all_logits: bool = False) -> tuple[Any, Any]:
    """One forward pass: (logits, cache). Only the last position's logits unless ``all_logits``."""
    kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": True,
                              _cache_kwarg(model): cache}
    if not all_logits:
        kwargs["logits_to_keep"] = 1
    try:
        out = model(**kwargs)
    except TypeError as e:  # a model without logits_to_keep
        if "logits_to_keep" not in str(e):
            raise
        kwargs.pop("logits_to_keep")
        out = model(**kwargs)
    new_cache = getattr(out, "cache", None)
    if new_cache is None:
        new_cache = getattr(out, "past_key_values", None)
    return out.logits, new_cache
