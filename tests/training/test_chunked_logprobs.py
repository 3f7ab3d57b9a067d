"""Chunked logprobs: the output head and the logprobs over ``loss_chunk_tokens`` positions at a time
give the values, the loss and every gradient of the unchunked computation, for plain and
shared-prefix micro-batches, LoRA and full fine-tuning; and no tensor of ``[tokens × vocab]`` logits
exists, in the forward or the backward pass, beyond one chunk's."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from workbench_local.models import lora
from workbench_local.training import shared_prefix
from workbench_local.training.chunked_logprobs import chunked_logprobs, logprobs_from_logits
from workbench_local.training.losses import LossBatch, build_loss, token_weights
from workbench_local.training.packing import MicroBatch, collate
from workbench_local.training.policy import PolicyForward

from tests.training.conftest import VOCAB
from workbench.training.algorithms import TrainSample

BUDGET = 512
HIDDEN = 64


def build_model(kind: str = "llama", *, adapters: bool = False, seed: int = 0) -> Any:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    common: dict[str, Any] = {"vocab_size": VOCAB, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=4, intermediate_size=128,
                                             max_position_embeddings=256, **common))
    elif kind == "qwen2-tied":
        model = Qwen2ForCausalLM(Qwen2Config(hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=128,
                                             max_position_embeddings=256, tie_word_embeddings=True, **common))
    else:
        model = GPT2LMHeadModel(GPT2Config(n_embd=HIDDEN, n_layer=2, n_head=4, n_positions=256, resid_pdrop=0.0,
                                           embd_pdrop=0.0, attn_pdrop=0.0, **common))
    if adapters:
        model = lora.apply_lora(model, rank=4, alpha=8.0, dropout=0.0, targets="all-linear")
        with torch.no_grad():  # LoRA's B starts at zero: give the adapters a gradient path of their own
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.02)
    return model.float().train()


def samples(seed: int = 0) -> list[TrainSample]:
    """Two groups of three rollouts sharing a prompt, completions of different lengths."""
    rng = random.Random(seed)
    out = []
    for g in range(2):
        head = [rng.randrange(3, VOCAB) for _ in range(6)]
        for _ in range(3):
            c = rng.randint(2, 9)
            ids = head + [rng.randrange(3, VOCAB) for _ in range(c)]
            mask = [0] * 6 + [1] * c
            # inference logprobs near the random model's (about -log VOCAB): the trust region keeps the tokens
            out.append(TrainSample(ids, mask, [-math.log(VOCAB) + rng.uniform(-1, 1) if m else 0.0 for m in mask],
                                   [rng.uniform(-1, 1) if m else 0.0 for m in mask], group_id=f"g{g}"))
    return out


def micro_batch(path: str) -> MicroBatch:
    batch = samples()
    if path == "plain":
        return collate(batch, BUDGET, 0, "cpu")
    (mb,) = shared_prefix.micro_batches(batch, BUDGET, 0, "cpu")
    return mb


def head_tokens(mb: MicroBatch) -> int:
    """The positions the output head runs over: every position of a plain micro-batch, the sampled
    ones of a shared-prefix one."""
    return mb.target_ids.numel() if mb.shared is None else mb.n_loss_tokens


def chunk_size(name: str, n: int) -> int:
    if name == "divides":  # an exact multiple: n is a whole number of chunks
        return next(d for d in range(2, n) if n % d == 0 and n // d > 1)
    return {"one": 1, "seven": 7, "longer": n + 5}[name]


def pg_loss(logprobs: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
    """The trainer's policy-gradient loss of one micro-batch (``Trainer._forward``)."""
    n_loss = float(mb.n_loss_tokens)
    weights = token_weights(mb.loss_mask, "token", n_loss, float(mb.input_ids.shape[0]))
    value, _ = build_loss("pg")(LossBatch(logprobs, mb.inference_logprobs, mb.advantages, mb.loss_mask, weights,
                                          mb.loss_mask.float() / n_loss))
    return value


def run(model: Any, mb: MicroBatch, chunk: int, temperature: float) -> dict[str, Any]:
    policy = PolicyForward(model, temperature=temperature, loss_chunk_tokens=chunk)
    model.zero_grad(set_to_none=True)
    logprobs, entropy = policy(mb)
    loss = pg_loss(logprobs, mb)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return {"logprobs": logprobs.detach(), "entropy": entropy, "loss": loss.detach(), "grads": grads,
            "chunk": policy.loss_chunk_tokens}


def assert_same(chunked: dict[str, Any], whole: dict[str, Any]) -> None:
    torch.testing.assert_close(chunked["logprobs"], whole["logprobs"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked["entropy"], whole["entropy"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked["loss"], whole["loss"], rtol=1e-6, atol=1e-6)
    assert chunked["grads"].keys() == whole["grads"].keys()
    assert all(g.abs().sum() > 0 for g in whole["grads"].values())
    for name, g in whole["grads"].items():
        torch.testing.assert_close(chunked["grads"][name], g, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.slow  # two models' forward and backward per case
@pytest.mark.parametrize("chunk", ["one", "seven", "divides", "longer"])
@pytest.mark.parametrize("path", ["plain", "shared"])
@pytest.mark.parametrize("adapters", [True, False], ids=["lora", "full"])
def test_chunked_values_loss_and_gradients_equal_the_whole_logits(chunk: str, path: str, adapters: bool) -> None:
    model = build_model(adapters=adapters)
    mb = micro_batch(path)
    size = chunk_size(chunk, head_tokens(mb))
    chunked, whole = run(model, mb, size, 0.7), run(model, mb, 0, 0.7)
    assert chunked["chunk"] == size and whole["chunk"] == 0
    names = set(whole["grads"])
    if adapters:  # the adapters, in the decoder, are what trains
        assert names and all("lora_" in n for n in names)
    else:  # the output head, the decoder and the embedding all train
        assert {"lm_head.weight", "model.embed_tokens.weight"} <= names
        assert any(".layers.0." in n for n in names)
    assert_same(chunked, whole)


@pytest.mark.slow  # forward and backward of a model
@pytest.mark.parametrize("path", ["plain", "shared"])
def test_a_tied_output_head_at_temperature_one_matches_too(path: str) -> None:
    model = build_model("qwen2-tied")
    mb = micro_batch(path)
    chunked, whole = run(model, mb, 7, 1.0), run(model, mb, 0, 1.0)
    assert "model.embed_tokens.weight" in whole["grads"] and "lm_head.weight" not in whole["grads"]
    assert_same(chunked, whole)


@pytest.mark.slow  # forward and backward of a model
def test_a_model_whose_logits_are_not_the_plain_head_takes_the_whole_logits() -> None:
    model = build_model("gpt2")
    assert not shared_prefix.supports(model)
    mb = micro_batch("plain")
    fallback = run(model, mb, 7, 0.7)
    assert fallback["chunk"] == 0
    assert_same(fallback, run(model, mb, 0, 0.7))


@pytest.mark.slow  # forward of a model
def test_without_gradients_the_chunks_match_and_keep_nothing() -> None:
    model = build_model(adapters=True)
    mb = micro_batch("plain")
    with torch.no_grad():
        chunked = PolicyForward(model, temperature=0.7, loss_chunk_tokens=5)(mb)
        whole = PolicyForward(model, temperature=0.7, loss_chunk_tokens=0)(mb)
    assert not chunked[0].requires_grad
    torch.testing.assert_close(chunked[0], whole[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(chunked[1], whole[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk", [1, 3, 6, 50])
def test_an_output_head_alone_gives_the_same_logprobs_and_gradients(chunk: int) -> None:
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 40)
    hidden = torch.randn(12, 8, requires_grad=True)
    targets = torch.randint(0, 40, (12,))
    upstream = torch.randn(12)
    results = []
    for size in (chunk, None):
        head.zero_grad(set_to_none=True)
        hidden.grad = None
        if size is None:
            lp, ent = logprobs_from_logits(head(hidden), targets, temperature=0.6)
        else:
            lp, ent = chunked_logprobs(head, hidden, targets, chunk_tokens=size, temperature=0.6)
        (lp * upstream).sum().backward()
        assert head.weight.grad is not None and head.bias.grad is not None and hidden.grad is not None
        results.append([lp.detach(), ent, head.weight.grad.clone(), head.bias.grad.clone(), hidden.grad.clone()])
    for a, b in zip(*results, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_no_tokens_and_a_bad_chunk_size() -> None:
    head = torch.nn.Linear(4, 10)
    lp, ent = chunked_logprobs(head, torch.zeros((0, 4)), torch.zeros((0,), dtype=torch.long), chunk_tokens=3)
    assert lp.shape == (0,) and ent is not None and ent.shape == (0,)
    with pytest.raises(ValueError, match="chunk_tokens must be at least 1"):
        chunked_logprobs(head, torch.zeros((2, 4)), torch.zeros((2,), dtype=torch.long), chunk_tokens=0)


class LargestLogits(TorchDispatchMode):
    """Records the most elements of any tensor with a last dimension of ``vocab`` that an operator
    returns, in the forward and the backward pass: the size of the largest logits (or logits
    gradient, softmax, ...) that ever exists. The output head's weight, transposed (``[hidden,
    vocab]``), is no logits and does not count."""

    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.weight_shape = (hidden, vocab)
        self.largest = 0
        self.backward_ops = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if torch._C._current_graph_task_id() != -1:
            self.backward_ops += 1
        for t in tree_leaves(out):
            if (isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self.vocab
                    and tuple(t.shape) != self.weight_shape):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.slow  # forward and backward of a model, twice
@pytest.mark.parametrize("path", ["plain", "shared"])
@pytest.mark.parametrize("adapters", [True, False], ids=["lora", "full"])
def test_no_logits_beyond_one_chunk_exist_in_the_forward_or_the_backward(path: str, adapters: bool) -> None:
    model = build_model(adapters=adapters)
    mb = micro_batch(path)
    n, chunk = head_tokens(mb), 4
    seen = {}
    for size in (chunk, 0):
        probe = LargestLogits(VOCAB, HIDDEN)
        with probe:
            logprobs, _ = PolicyForward(model, temperature=0.7, loss_chunk_tokens=size)(mb)
            pg_loss(logprobs, mb).backward()
        assert probe.backward_ops > 0  # the probe saw the backward pass too
        seen[size] = probe.largest
    assert seen[chunk] == chunk * VOCAB
    assert seen[0] >= n * VOCAB  # unchunked, the whole logits exist: the probe sees them


@pytest.mark.slow  # two trainers on the tiny model, an optimizer step each
@pytest.mark.parametrize("adapters", [True, False], ids=["lora", "full"])
def test_the_trainer_steps_the_same_with_and_without_chunks(tiny_model: str, adapters: bool) -> None:
    """The trainer passes ``loss_chunk_tokens`` to its policy and its reference (a KL term): one
    optimizer step gives the metrics and the updated weights of the unchunked trainer."""
    from workbench_local.training.trainer import Trainer, TrainerConfig

    trainers = {}
    for chunk in (5, 0):
        # adam_eps well above float noise: Adam's first step is lr * g / (|g| + eps), which turns a
        # gradient of rounding size into a step of lr * sign(g) when eps is tiny
        cfg = TrainerConfig(model=tiny_model, lora=adapters, lr=1e-2, adam_eps=1e-3, temperature=0.8,
                            loss_chunk_tokens=chunk, micro_batch_tokens=64)
        trainers[chunk] = Trainer(cfg, loss=build_loss("pg", kl_coef=0.1, token_mask_low=1e-30, token_mask_high=1e30))
    assert trainers[5].policy.loss_chunk_tokens == 5 and trainers[0].policy.loss_chunk_tokens == 0
    if not adapters:
        assert trainers[5].reference.loss_chunk_tokens == 5
    results = {chunk: t.step(samples()) for chunk, t in trainers.items()}
    assert not results[5].skipped and not results[0].skipped
    for key in ("loss", "pg_loss", "kl", "entropy", "mismatch_kl", "grad_norm"):
        assert results[5].metrics[key] == pytest.approx(results[0].metrics[key], rel=1e-5, abs=1e-7), key
    after = {chunk: dict(t.model.named_parameters()) for chunk, t in trainers.items()}
    trained = [n for n, p in after[0].items() if p.requires_grad]
    assert trained
    for name in trained:
        torch.testing.assert_close(after[5][name], after[0][name], rtol=1e-4, atol=1e-6)


def _fsdp_step(rank: int, world_size: int, model: str, adapters: bool, packed: bool, chunk: int,
               sharding: str) -> dict[str, Any]:
    """One optimizer step (a KL term, so the reference runs too); its metrics and the weights, gathered."""
    from torch.distributed.tensor import DTensor
    from workbench_local.training.trainer import Trainer, TrainerConfig

    cfg = TrainerConfig(model=model, lora=adapters, shared_prefix=packed, lr=1e-2, adam_eps=1e-3, temperature=0.8,
                        loss_chunk_tokens=chunk, micro_batch_tokens=64, sharding=sharding)
    t = Trainer(cfg, loss=build_loss("pg", kl_coef=0.1, token_mask_low=1e-30, token_mask_high=1e30))
    result = t.step(samples())
    weights = {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
               for n, p in t.model.named_parameters() if p.requires_grad}
    return {"metrics": result.metrics, "weights": weights, "sharded": t.sharded, "chunk": t.policy.loss_chunk_tokens}


@pytest.mark.slow  # two gloo processes per case
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("adapters", "packed"), [(True, False), (False, True)], ids=["lora-unpacked", "full-packed"])
def test_chunks_under_fsdp_step_as_one_process_without_chunks(tiny_model: str, adapters: bool, packed: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two FSDP ranks with chunked logprobs (the output head in the gathered root, recomputed chunk by
    chunk in the backward) take the step one process takes with the whole logits."""
    from workbench_local.training.distributed import launch

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    single = _fsdp_step(0, 1, tiny_model, adapters, packed, 0, "ddp")
    ranks = launch(_fsdp_step, 2, tiny_model, adapters, packed, 5, "fsdp", backend="gloo", threads_per_rank=1)
    assert single["chunk"] == 0
    for run in ranks:
        assert run["sharded"] and run["chunk"] == 5
        for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm"):
            assert run["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-6), key
        assert run["weights"].keys() == single["weights"].keys()
        for name, w in single["weights"].items():
            torch.testing.assert_close(run["weights"][name], w, rtol=1e-4, atol=1e-5)
