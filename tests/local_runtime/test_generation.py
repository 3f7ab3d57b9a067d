"""Generation pieces without a server: incremental detokenization, sampling (with penalties, logit_bias and
a grammar's mask), the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from workbench_local.server.generation import (
    Detokenizer,
    SamplingParams,
    Sequence,
    make_generator,
    sample_rows,
)


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


def _seq(temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, seed: int | None = 0, **more: Any) -> Sequence:
    s = Sequence(prompt_ids=[1], params=SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, seed=seed,
                                                       **more), model="m")
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


def test_logit_bias_forces_and_bans_tokens_greedy_and_sampled() -> None:
    import torch

    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0]])
    assert sample_rows(logits, [_seq(temperature=0.0, logit_bias={3: 100.0})], "raw")[0] == [3]
    assert sample_rows(logits, [_seq(temperature=0.0, logit_bias={1: -100.0})], "raw")[0] == [2]
    forced = {sample_rows(logits, [_seq(seed=s, logit_bias={0: 100.0})], "raw")[0][0] for s in range(30)}
    assert forced == {0}
    banned = {sample_rows(logits, [_seq(seed=s, logit_bias={1: -100.0, 2: -100.0})], "raw")[0][0] for s in range(60)}
    assert banned <= {0, 3} and banned == {0, 3}
    # "raw" logprobs stay the model's own; "processed" ones show the bias
    _, raw = sample_rows(logits, [_seq(temperature=0.0, logit_bias={3: 100.0})], "raw")
    _, processed = sample_rows(logits, [_seq(temperature=0.0, logit_bias={3: 100.0})], "processed")
    assert torch.allclose(raw[0], torch.log_softmax(logits[0], -1)) and processed[0][3] > -1e-3


def test_presence_and_frequency_penalties_follow_openai() -> None:
    """presence: subtract once per token id already in the output; frequency: count x penalty (vLLM's and
    OpenAI's definition); neither looks at the prompt."""
    import torch
    from workbench_local.server.generation import adjust_logits

    row = torch.tensor([1.0, 1.0, 1.0, 1.0])
    s = _seq(presence_penalty=0.5, frequency_penalty=0.25)
    s.prompt_ids = [3, 3, 3]
    s.out_ids = [0, 0, 1]
    assert adjust_logits(row, s).tolist() == [1.0 - 0.5 - 0.5, 1.0 - 0.5 - 0.25, 1.0, 1.0]
    # greedy decoding repeats token 1 without a penalty, and moves on with one
    logits = torch.tensor([[0.0, 2.0, 1.8, -1.0]])
    plain, penalised = _seq(temperature=0.0), _seq(temperature=0.0, presence_penalty=1.0)
    plain.out_ids = penalised.out_ids = [1]
    assert sample_rows(logits, [plain], "raw")[0] == [1]
    assert sample_rows(logits, [penalised], "raw")[0] == [2]
    for out, expected in (([1], 1), ([1, 1, 1], 2)):  # 2.0 - 0.1 per use against token 2's 1.8
        freq = _seq(temperature=0.0, frequency_penalty=0.1)
        freq.out_ids = out
        assert sample_rows(logits, [freq], "raw")[0] == [expected]
    negative = _seq(temperature=0.0, presence_penalty=-2.0)
    negative.out_ids = [3]  # a negative penalty makes a token already used likelier
    assert sample_rows(row[None], [negative], "raw")[0] == [3]


def test_a_grammar_mask_leaves_only_allowed_tokens() -> None:
    import torch

    logits = torch.tensor([[0.0, 3.0, 2.9, -1.0]] * 2)
    allowed = torch.tensor([[False, False, False, True], [True] * 4])  # a row without a grammar allows all
    tokens, raw = sample_rows(logits, [_seq(seed=1), _seq(seed=1)], "raw", allowed)
    assert tokens[0] == 3 and tokens[1] in (1, 2)
    assert torch.allclose(raw, torch.log_softmax(logits, -1))  # raw logprobs are the model's, unmasked
    tokens, processed = sample_rows(logits[:1], [_seq(temperature=0.0)], "processed", allowed[:1])
    assert tokens == [3] and processed[0][3] == 0.0 and processed[0][1] == float("-inf")


def test_serve_command_reports_bad_model(tmp_path: Path) -> None:
    from workbench_local.models.loading import ModelLoadError

    from workbench.cli.serve_cmd import serve_command

    with pytest.raises(ModelLoadError, match="no model directory"):
        serve_command.main(["--model", str(tmp_path / "nope")], standalone_mode=False)
    with pytest.raises(SystemExit) as e:
        serve_command.main(["--help"], standalone_mode=False)
    assert e.value.code == 0
