"""Training-state memory per rank from shapes (workbench.training.memory), checked against real
Hugging Face models and against FSDP2's own shards over gloo."""

from __future__ import annotations

import math
from typing import Any

import pytest

from workbench.training.memory import (
    decoder_param_shapes,
    local_shard_numel,
    param_count,
    shard_numel,
    shard_rows,
    state_bytes_per_rank,
)

TINY = {"layers": 2, "hidden": 32, "intermediate": 40, "heads": 4, "kv_heads": 2, "head_dim": 8, "vocab": 97}


@pytest.mark.parametrize(("shape", "world", "want"), [
    ((10, 4), 1, 40), ((10, 4), 2, 20), ((10, 4), 3, 16), ((10, 4), 4, 12), ((3,), 8, 1), ((97, 32), 3, 33 * 32),
    ((8, 2, 5), 3, 3 * 10), ((0, 4), 2, 0), ((), 1, 1),
])
def test_shard_numel_is_the_padded_dim0_chunk(shape: tuple[int, ...], world: int, want: int) -> None:
    assert shard_numel(shape, world) == want


@pytest.mark.parametrize(("rows", "world"), [(10, 3), (10, 4), (3, 8), (97, 2), (7, 7), (1, 3), (0, 2)])
def test_local_shards_cover_the_rows_and_rank0_holds_the_padded_chunk(rows: int, world: int) -> None:
    parts = [shard_rows(rows, world, r) for r in range(world)]
    assert sum(parts) == rows and parts == sorted(parts, reverse=True)  # torch.chunk: full chunks first
    assert local_shard_numel((rows, 5), world, 0) == shard_numel((rows, 5), world)
    assert max(local_shard_numel((rows, 5), world, r) for r in range(world)) == shard_numel((rows, 5), world)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: shard_numel((4,), 0), "world size must be at least 1"),
    (lambda: shard_numel((), 2), "does not shard scalar parameters"),
    (lambda: shard_rows(4, 2, 2), "rank 2 is outside a world of 2"),
    (lambda: state_bytes_per_rank([], 2, sharding="zero2", param_bytes=2, grad_bytes=2), "sharding 'zero2'"),
    (lambda: decoder_param_shapes(**{**TINY, "layers": 0}, tied=True), "layers must be at least 1"),
    (lambda: decoder_param_shapes(**TINY, tied=True, lora_rank=0), "lora_rank must be at least 1"),
    (lambda: decoder_param_shapes(**TINY, tied=True, experts=4), "needs expert_intermediate"),
])
def test_bad_input_is_one_clear_line(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_state_bytes_full_fine_tuning_lora_and_ddp() -> None:
    params = [((10, 4), True), ((6,), True), ((100, 8), False)]
    ddp = state_bytes_per_rank(params, 4, sharding="ddp", param_bytes=4, grad_bytes=4)
    assert ddp.to_dict() == {"params": 846 * 4, "grads": 46 * 4, "optimizer": 46 * 8, "total": 846 * 4 + 46 * 12}
    fsdp = state_bytes_per_rank(params, 4, sharding="fsdp", param_bytes=2, grad_bytes=2, optimizer_bytes=12)
    assert (fsdp.params, fsdp.grads, fsdp.optimizer) == ((12 + 2 + 200) * 2, 14 * 2, 14 * 12)
    last = state_bytes_per_rank(params, 4, sharding="fsdp", param_bytes=1, grad_bytes=1, rank=3)
    assert (last.params, last.grads) == (4 + 0 + 200, 4)  # rows 9..10 of 10, none of 6
    assert state_bytes_per_rank({str(i): p for i, p in enumerate(params)}, 1, sharding="fsdp", param_bytes=1,
                                grad_bytes=1) == state_bytes_per_rank(params, 1, sharding="ddp", param_bytes=1,
                                                                      grad_bytes=1)


def test_fsdp_divides_full_fine_tuning_state_by_about_the_world_size() -> None:
    shapes = decoder_param_shapes(layers=4, hidden=256, intermediate=704, heads=8, kv_heads=2, head_dim=32,
                                  vocab=32000, tied=False, qkv_bias=True)
    one = state_bytes_per_rank(shapes, 8, sharding="ddp", param_bytes=4, grad_bytes=4).total
    assert one == 16 * param_count(shapes)
    sharded = state_bytes_per_rank(shapes, 8, sharding="fsdp", param_bytes=4, grad_bytes=4).total
    assert one / 8 <= sharded < one / 8 * 1.01  # the padding costs under 1%


def test_lora_shapes_train_only_the_adapters() -> None:
    shapes = decoder_param_shapes(**TINY, tied=True, lora_rank=4)
    lora_params = (4 * (32 + 32) + 4 * (32 + 16) * 2 + 4 * (32 + 32) + 4 * (32 + 40) * 3) * 2
    assert param_count(shapes, trainable_only=True) == lora_params
    base = decoder_param_shapes(**TINY, tied=True)
    assert param_count(shapes) - lora_params == param_count(base)


def test_a_glm45_class_moe_has_355b_parameters() -> None:
    glm = decoder_param_shapes(layers=92, hidden=5120, intermediate=12288, heads=96, kv_heads=8, head_dim=128,
                               vocab=151552, tied=False, qkv_bias=True, experts=160, expert_intermediate=1536,
                               shared_experts=1, dense_layers=3)
    assert 350e9 < param_count(glm) < 356e9  # 355B with the next-token-prediction layer left out


# --- against the real things --------------------------------------------------------------------


def _named_shapes(model: Any) -> dict[str, tuple[tuple[int, ...], bool]]:
    return {n: (tuple(p.shape), p.requires_grad) for n, p in model.named_parameters()}


@pytest.mark.slow  # importing transformers and peft takes seconds
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("tied", [True, False])
def test_decoder_param_shapes_equal_hugging_face_models(tied: bool) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import (
        Glm4MoeConfig,
        Glm4MoeForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )

    dims = {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": tied}
    qwen2 = Qwen2ForCausalLM(Qwen2Config(**dims))
    assert _named_shapes(qwen2) == decoder_param_shapes(**TINY, tied=tied, qkv_bias=True)
    lora = get_peft_model(qwen2, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    assert _named_shapes(lora) == decoder_param_shapes(**TINY, tied=tied, lora_rank=4, qkv_bias=True)
    qwen3 = Qwen3ForCausalLM(Qwen3Config(**dims, head_dim=16))
    assert _named_shapes(qwen3) == decoder_param_shapes(**{**TINY, "head_dim": 16}, tied=tied, qk_norm=True)
    moe = Glm4MoeForCausalLM(Glm4MoeConfig(**{**dims, "num_hidden_layers": 3}, moe_intermediate_size=12,
                                           first_k_dense_replace=1, n_routed_experts=8, n_shared_experts=1,
                                           num_experts_per_tok=2, head_dim=8, use_qk_norm=True,
                                           attention_bias=True, n_group=1, topk_group=1))
    assert _named_shapes(moe) == decoder_param_shapes(**{**TINY, "layers": 3}, tied=tied, qkv_bias=True, qk_norm=True,
                                                      experts=8, expert_intermediate=12, shared_experts=1,
                                                      dense_layers=1)


def _fsdp_shards(rank: int, world: int, lora: bool) -> dict[str, Any]:
    """One FSDP2 AdamW step on a tiny Qwen2 (odd sizes: uneven shards); what this rank holds."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    model: Any = Qwen2ForCausalLM(Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                                              num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False))
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    for layer in model.get_decoder().layers:
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    ids = torch.arange(12).view(1, 12)
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    local = {n: p.to_local().numel() for n, p in model.named_parameters()}
    sizes = {p: p.element_size() for p in model.parameters()}
    return {
        "local": local,
        "params": sum(p.to_local().numel() * sizes[p] for p in model.parameters()),
        "grads": sum(p.grad.to_local().numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None),
        "optimizer": sum(t.to_local().numel() * t.element_size() for s in opt.state.values() for k, t in s.items()
                         if k in ("exp_avg", "exp_avg_sq")),
    }


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("lora", [False, True])
def test_shards_equal_fully_shards_own(world: int, lora: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench_local.training.distributed import launch

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    ranks = launch(_fsdp_shards, world, lora, backend="gloo", threads_per_rank=1)
    shapes = decoder_param_shapes(**TINY, tied=False, lora_rank=4 if lora else None, qkv_bias=True)
    for rank, got in enumerate(ranks):
        assert got["local"] == {n: local_shard_numel(s, world, rank) for n, (s, _) in shapes.items()}
        want = state_bytes_per_rank(shapes, world, sharding="fsdp", param_bytes=4, grad_bytes=4, rank=rank)
        assert (got["params"], got["grads"], got["optimizer"]) == (want.params, want.grads, want.optimizer)
    padded = state_bytes_per_rank(shapes, world, sharding="fsdp", param_bytes=4, grad_bytes=4)
    assert padded.total == max(r["params"] + r["grads"] + r["optimizer"] for r in ranks) == (
        ranks[0]["params"] + ranks[0]["grads"] + ranks[0]["optimizer"])
    assert math.isclose(sum(r["params"] for r in ranks), 4 * param_count(shapes))
