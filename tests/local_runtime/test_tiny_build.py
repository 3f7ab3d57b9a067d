"""The embedded model's build is deterministic and offline: the same seed writes the same bytes, a
different seed different weights, and the record says which recipe built it (a cached build of another
recipe is rebuilt at first use)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from workbench_local.models import tiny_model


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())
            if p.name != tiny_model.BUILD_FILE}


@pytest.mark.slow  # builds the tiny model three times
@pytest.mark.timeout(300)
def test_same_seed_same_bytes_other_seed_other_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    a = tiny_model.build_tiny_model(tmp_path / "a", seed=3, fast=True, steps=15)
    b = tiny_model.build_tiny_model(tmp_path / "b", seed=3, fast=True, steps=15)
    c = tiny_model.build_tiny_model(tmp_path / "c", seed=4, fast=True, steps=15)
    assert _digests(a) == _digests(b)
    assert _digests(a)["model.safetensors"] != _digests(c)["model.safetensors"]
    record = json.loads((a / tiny_model.BUILD_FILE).read_text())
    assert record["recipe"] == tiny_model.RECIPE and record["config"]["next_rows"] > 0
    assert set(record["next_number_t1"]) == {"successor", "declined", "right_when_answering"}


def test_a_build_of_another_recipe_is_not_current(tmp_path: Path) -> None:
    assert not tiny_model.is_current_build(tmp_path)  # nothing there
    (tmp_path / tiny_model.BUILD_FILE).write_text(json.dumps({"model_id": tiny_model.MODEL_ID}))  # recipe 1
    assert not tiny_model.is_current_build(tmp_path)
    (tmp_path / tiny_model.BUILD_FILE).write_text(json.dumps({"recipe": tiny_model.RECIPE}))
    assert tiny_model.is_current_build(tmp_path)
    (tmp_path / tiny_model.BUILD_FILE).write_text("{not json")
    assert not tiny_model.is_current_build(tmp_path)
