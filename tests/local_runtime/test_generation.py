"""Generation pieces without a server: incremental detokenization, sampling, truncation, the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local_runtime.server.generation import Detokenizer, SamplingParams, Sequence, make_generator, sample_rows


@pytest.fixture(scope="module")
def tok(tiny_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


def test_detokenizer_matches_full_decode_with_multibyte_text(tok: Any) -> None:
    text = "héllo wörld 🙂 — 12 * 7 = 84 ünïcode"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    d = Detokenizer(tok)
    pieces = [d.add(i) for i in ids]
    pieces.append(d.flush())
    assert "".join(pieces) == d.text == text
    assert "\ufffd" not in "".join(pieces)  # a character split over byte tokens waits for its last byte
    assert "" in pieces[:-1]  # ... and some did wait


def _seq(temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int | None = 0) -> Sequence:
    s = Sequence(prompt_ids=[1], params=SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed),
                 model="m")
    s.generator = make_generator(seed)
    return s


def test_sampling_greedy_top_k_top_p_and_seed() -> None:
    import torch

    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0]] * 4)
    seqs = [_seq(temperature=0.0), _seq(top_k=1), _seq(top_p=0.01), _seq(temperature=1.0, seed=5)]
    tokens, reported = sample_rows(logits, seqs, "raw")
    assert tokens[:3] == [1, 1, 1]
    assert torch.allclose(reported[0], torch.log_softmax(logits[0], -1))
    again, _ = sample_rows(logits, [_seq(temperature=1.0, seed=5)], "raw")
    assert again[0] == tokens[3]  # the same seed samples the same token
    _, processed = sample_rows(logits[:1], [_seq(top_k=2)], "processed")
    assert processed[0][0] == float("-inf") and processed[0][1] > torch.log_softmax(logits[0], -1)[1]


def test_many_seeds_cover_the_distribution() -> None:
    import torch

    logits = torch.tensor([[1.0, 1.0, 1.0]])
    seen = {sample_rows(logits, [_seq(seed=s)], "raw")[0][0] for s in range(40)}
    assert seen == {0, 1, 2}


def test_serve_command_reports_bad_model(tmp_path: Path) -> None:
    from local_runtime.models.loading import ModelLoadError
    from workbench.cli.serve_cmd import serve_command

    with pytest.raises(ModelLoadError, match="no model directory"):
        serve_command.main(["--model", str(tmp_path / "nope")], standalone_mode=False)
    with pytest.raises(SystemExit) as e:
        serve_command.main(["--help"], standalone_mode=False)
    assert e.value.code == 0
