"""The embedded model's context is a serving limit, not part of what it learns: RoPE has no weights and the
build never truncates, so builds that differ only in ``context`` write the same weights and the same
tokenizer, and serve the context they were built with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_context_changes_no_weight_and_no_token(tmp_path: Path) -> None:
    from workbench_local.models.tiny_model import BUILD_FILE, build_tiny_model

    small = build_tiny_model(tmp_path / "small", seed=0, fast=True, steps=4, context=1024)
    large = build_tiny_model(tmp_path / "large", seed=0, fast=True, steps=4, context=8192)
    for name in ("model.safetensors", "tokenizer.json"):
        assert (small / name).read_bytes() == (large / name).read_bytes(), name
    for folder, context in ((small, 1024), (large, 8192)):
        assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == context
        assert json.loads((folder / "tokenizer_config.json").read_text())["model_max_length"] == context
    records = [json.loads((f / BUILD_FILE).read_text()) for f in (small, large)]
    for key in ("final_loss", "arithmetic_accuracy_greedy", "next_number_t1", "tool_calls_greedy"):
        assert records[0][key] == records[1][key], key
