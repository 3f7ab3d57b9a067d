"""Fixtures for the trainer tests: a tiny random Llama saved with ``save_pretrained`` (so the trainer
loads it through the same ``from_pretrained(path)`` path a real model id takes), and sample batches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from workbench.training.algorithms import TrainSample

VOCAB = 300


def build_tiny_model(path: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny-llama") / "model"))


def make_samples(n: int = 6, seed: int = 0, prompt: int = 6, completion: tuple[int, int] = (4, 10),
                 advantage: float | None = None) -> list[TrainSample]:
    """Deterministic samples: a prompt (mask 0) then a completion (mask 1) with made-up logprobs."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        c = rng.randint(*completion)
        ids = [rng.randrange(3, VOCAB) for _ in range(prompt + c)]
        mask = [0] * prompt + [1] * c
        lps = [0.0] * prompt + [-rng.uniform(3.0, 8.0) for _ in range(c)]
        adv = advantage if advantage is not None else (1.0 if i % 2 == 0 else -1.0)
        out.append(TrainSample(ids, mask, lps, [adv if m else 0.0 for m in mask], policy_version=0,
                               rollout_id=f"r{i}", group_id=f"g{i // 2}", reward=float(i % 2 == 0)))
    return out
