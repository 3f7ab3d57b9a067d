"""The cluster plan's arithmetic, against numbers computed by hand here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from workbench_cloud.plan import check_budget, load_launch_config, make_plan

from workbench.cost.gpu_prices import load_prices
from workbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONFIG_28 = REPO / "cloud_runtime" / "configs" / "long-context-28node.toml"

H100_PEAK = 989e12
H100_HBM = 3.35e12
H100_USD_S = 0.001097

#: A 1B dense model on one node of 8 H100s: 4 trainer GPUs, 4 inference replicas of 1 GPU.
SMALL = {
    "cloud.gpu": "H100", "cloud.nodes": 1, "cloud.gpus_per_node": 8, "cloud.inference_tp": 1,
    "cloud.params_b": 1.0, "cloud.layers": 16, "cloud.hidden_size": 2048, "cloud.attention_heads": 16,
    "cloud.kv_heads": 8, "cloud.head_dim": 128, "cloud.context_length": 8192,
    "cloud.mean_tokens_per_rollout": 2048, "cloud.mean_generated_tokens": 1024,
    "cloud.mfu": 0.4, "cloud.inference_mfu": 0.5, "cloud.hbm_efficiency": 0.5, "cloud.network_efficiency": 0.5,
    "cloud.memory_utilization": 0.9, "cloud.startup_s": 60,
    "loop.groups_per_step": 8, "loop.rollouts_per_task": 8, "loop.max_steps": 100, "trainer.lora": False,
}


@pytest.fixture(autouse=True)
def _own_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the user's GPU price overrides."""
    monkeypatch.setenv("WORKBENCH_GPU_PRICES", str(tmp_path / "gpu_prices.json"))


def plan_for(overrides: dict[str, Any], file: Path | None = None, **kw: Any) -> Any:
    return make_plan(load_launch_config(file, overrides, "arithmetic"), **kw)


def test_small_dense_plan_by_hand() -> None:
    p = plan_for(SMALL)
    assert (p.trainer_gpus, p.inference_gpus, p.inference_replicas) == (4, 4, 4)
    R, M, G = 64, 2048, 1024
    assert p.rollouts_per_step == R and p.tokens_per_step == R * M and p.generated_tokens_per_step == R * G

    # trainer: 6 N per token + causal attention 6 · layers · (heads · head_dim) · mean sequence
    fpt = 6 * 1e9 + 6 * 16 * 2048 * 2048
    assert fpt == 6_402_653_184
    trainer = 131_072 * fpt / (4 * H100_PEAK * 0.4)
    assert p.trainer_time_s == pytest.approx(trainer)
    assert trainer == pytest.approx(0.5303, rel=1e-3)

    # inference: prefill compute-bound; decode = max(compute, HBM bandwidth)
    fpi = 2 * 1e9 + 2 * 16 * 2048 * 2048
    prefill = 64 * (2048 - 1024) * fpi / (4 * H100_PEAK * 0.5)
    decode_compute = 64 * 1024 * fpi / (4 * H100_PEAK * 0.5)
    kv_per_token = 2 * 16 * 8 * 128 * 2
    assert kv_per_token == 65_536
    batch = math.ceil(64 / 4)  # 16 sequences per replica
    iteration = (1e9 * 2 / 1 + batch * 1024 * kv_per_token) / (H100_HBM * 0.5)
    decode_bw = 64 * 1024 / 4 / batch * iteration
    assert decode_bw > decode_compute
    assert p.inference_bound == "bandwidth"
    assert p.inference_time_s == pytest.approx(prefill + decode_bw)
    assert p.inference_time_s == pytest.approx(1.95, rel=0.01)

    sync = 1e9 * 2 * 8 / (3200e9 * 0.5)
    assert p.weight_sync_s == pytest.approx(sync) == 0.01
    assert p.mode == "async"
    step = max(trainer, prefill + decode_bw) + sync
    assert p.step_time_s == pytest.approx(step)

    assert p.usd_per_step == pytest.approx(8 * H100_USD_S * step)
    assert p.wall_s == pytest.approx(60 + 100 * step)
    assert p.total_usd == pytest.approx(8 * H100_USD_S * (60 + 100 * step))

    # memory per trainer GPU: FSDP shards of float32 weights, grads and Adam m + v (the trainer keeps
    # float32 shards and computes in bf16: 4 + 4 + 8 = 16 B/param), two gathered bf16 layers,
    # checkpointed activations at the full context
    tr = p.memory["trainer"]
    assert p.sharding == "fsdp"
    assert tr["weights_gb"] == pytest.approx(1.0) and tr["grads_gb"] == pytest.approx(1.0)
    assert tr["optimizer_gb"] == pytest.approx(2.0)
    assert tr["gathered_layers_gb"] == pytest.approx(0.25)
    assert tr["activations_gb"] == pytest.approx(8192 * 2048 * (16 * 2 + 34) / 1e9)
    assert tr["total_gb"] == pytest.approx(1 + 1 + 2 + 0.25 + 8192 * 2048 * 66 / 1e9)
    assert tr["usable_gb"] == pytest.approx(72.0) and tr["fits"]
    inf = p.memory["inference"]
    assert inf["weights_gb"] == pytest.approx(2.0)
    assert inf["kv_full_context_gb"] == pytest.approx(8192 * 65_536 / 1e9)
    assert inf["kv_batch_gb"] == pytest.approx(16 * 2048 * 65_536 / 1e9)
    assert inf["fits"] and p.fits


def test_sync_mode_sums_the_phases() -> None:
    a = plan_for(SMALL)
    s = plan_for({**SMALL, "loop.sync": True})
    assert s.mode == "sync"
    assert s.step_time_s == pytest.approx(a.trainer_time_s + a.inference_time_s + a.weight_sync_s)
    assert s.step_time_s > a.step_time_s


def test_lora_changes_flops_optimizer_and_sync() -> None:
    p = plan_for({**SMALL, "trainer.lora": True, "trainer.lora_rank": 8})
    adapters = 16 * 7 * 8 * 2 * 2048
    assert p.memory["trainer"]["optimizer_gb"] == pytest.approx(adapters * 8 / 4 / 1e9)  # fp32 m + v
    assert p.weight_sync_s == pytest.approx(adapters * 2 * 8 / (3200e9 * 0.5))
    fpt = 4 * 1e9 + 6 * 16 * 2048 * 2048  # frozen weights: no weight gradients
    assert p.trainer_time_s == pytest.approx(131_072 * fpt / (4 * H100_PEAK * 0.4))


def test_moe_decode_reads_only_the_experts_a_batch_touches() -> None:
    moe = {**SMALL, "cloud.params_b": 10.0, "cloud.active_params_b": 2.0, "cloud.experts": 64,
           "cloud.experts_per_token": 4}
    p = plan_for(moe)
    per_expert = (10e9 - 2e9) / (64 - 4)
    touched = 1 - (1 - 4 / 64) ** 16
    read = 2e9 - 4 * per_expert + 64 * touched * per_expert
    row = next(d for d in p.derivation if d.quantity == "params read per iteration")
    assert row.value == pytest.approx(read)
    assert 2e9 < read < 10e9
    # without the expert counts every parameter is assumed read (an upper bound, said so)
    q = plan_for({**moe, "cloud.experts": None})
    row = next(d for d in q.derivation if d.quantity == "params read per iteration")
    assert row.value == 10e9 and "upper bound" in row.formula


def test_memory_fit_verdicts() -> None:
    big = {**SMALL, "cloud.gpu": "A100-80GB", "cloud.params_b": 70.0, "cloud.layers": 80, "cloud.hidden_size": 8192,
           "cloud.attention_heads": 64, "cloud.inference_tp": 4}
    p = plan_for(big)  # 70B full fine-tuning on 4 trainer GPUs: 16 B/param / 4 = 280 GB each
    assert p.memory["trainer"]["weights_gb"] + p.memory["trainer"]["optimizer_gb"] == pytest.approx(70e9 * 12 / 4 / 1e9)
    assert not p.memory["trainer"]["fits"] and p.memory["inference"]["fits"] and not p.fits
    # adapters only: the optimizer state nearly vanishes; the frozen base in bf16 (trainer.dtype) fits
    lora = plan_for({**big, "trainer.lora": True, "trainer.dtype": "bfloat16"})
    assert lora.memory["trainer"]["fits"] and lora.fits
    # with dtype auto FSDP keeps float32 shards of the frozen base too: 70 GB of weights per GPU
    assert not plan_for({**big, "trainer.lora": True}).memory["trainer"]["fits"]
    one_gpu = plan_for({**big, "trainer.lora": True, "cloud.inference_tp": 1})  # 140 GB of weights on one 80 GB GPU
    assert not one_gpu.memory["inference"]["fits"] and not one_gpu.fits
    # a long context without context parallelism does not fit; CP 8 on 8 trainer GPUs does
    long = {**SMALL, "cloud.context_length": 1_048_576}
    assert not plan_for(long).memory["trainer"]["fits"]
    assert plan_for({**long, "cloud.nodes": 2, "cloud.context_parallel": 8}).memory["trainer"]["fits"]


def test_every_headline_number_has_a_derivation() -> None:
    p = plan_for(SMALL)
    names = {d.quantity for d in p.derivation}
    for q in ("tokens per step", "trainer time", "inference time", "weight sync", "step time (async)",
              "$ per step", "wall time", "total $", "trainer optimizer/GPU", "trainer activations/GPU",
              "KV of one full-context sequence/GPU"):
        assert q in names
    for d in p.derivation:
        assert any(ch.isdigit() for ch in d.formula), d
        assert str(d.value) and " = " in d.line()
    assert any("MFU 0.4" in a for a in p.assumptions)


def test_28_node_config_lands_in_the_published_range() -> None:
    p = plan_for({}, CONFIG_28)
    assert (p.nodes, p.gpus_per_node, p.gpu) == (28, 8, "H200")
    assert p.trainer_gpus + p.inference_gpus == 224
    assert p.rollouts_per_step == 256 and p.max_steps == 1000
    assert p.fits
    assert p.step_time_s < 300
    assert 3.0 <= p.wall_days <= 3.5
    d = p.to_dict()
    for key in ("nodes", "gpus_per_node", "step_time_s", "total_usd", "wall_days", "usd_per_step", "memory",
                "derivation", "trainer_nodes", "inference_nodes", "fits"):
        assert key in d
    assert d["nodes"] == 28 and d["gpus_per_node"] == 8
    assert d["total_usd"] == pytest.approx(224 * load_prices()[("modal", "H200")].usd_per_gpu_s * p.wall_s)


def test_budget_refusal_says_the_numbers() -> None:
    p = plan_for(SMALL, budget_usd=0.5)
    with pytest.raises(ConfigError) as e:
        check_budget(p)
    msg = str(e.value)
    assert "exceeds the budget of $0" in msg and f"${p.total_usd:,.0f}" in msg and "100 steps" in msg
    # the domain names fields; each face says them its own way (test_plan_cli: the CLI's flags)
    assert e.value.field == "LaunchPlan.budget" and e.value.names == {"max_steps": "LaunchPlan.max_steps"}
    assert "(max_steps 0)" in msg and "raise budget" in msg
    check_budget(plan_for(SMALL, budget_usd=1e6))  # within: no error
    with pytest.raises(ConfigError, match="exceeds the budget"):
        check_budget(plan_for({**SMALL, "cloud.budget_usd": 0.5}))


def test_unknown_cloud_key_names_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"unknown key cloud\.gpus_per_nod \(did you mean 'gpus_per_node'\?\)"):
        plan_for({**SMALL, "cloud.gpus_per_nod": 8})
    with pytest.raises(ConfigError, match=r"did you mean 'mfu'"):
        plan_for({**SMALL, "cloud.mf": 0.3})


def test_config_file_errors(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text("[clod]\nnodes = 2\n")
    with pytest.raises(ConfigError, match=r"unknown section 'clod' \(did you mean 'cloud'\?\)"):
        load_launch_config(f, {}, "arithmetic")
    f.write_text("[cloud]\nnodes = 2\n")
    with pytest.raises(ConfigError, match="the plan needs cloud.params_b, cloud.layers"):
        load_launch_config(f, {}, "arithmetic")
    with pytest.raises(ConfigError, match="unknown GPU 'H20O'"):
        plan_for({**SMALL, "cloud.gpu": "H20O"})
    with pytest.raises(ConfigError, match="fraction"):
        plan_for({**SMALL, "cloud.mfu": 30})
    with pytest.raises(ConfigError, match="at least one trainer GPU"):
        plan_for({**SMALL, "cloud.trainer_gpus": 8})
    with pytest.raises(ConfigError, match="no GPU price for lambda:H100"):
        plan_for({**SMALL, "cloud.provider": "lambda"})


def test_gpu_price_overrides(tmp_path: Path) -> None:
    from workbench.cost.gpu_prices import delete_price, set_price

    path = tmp_path / "prices.json"
    set_price("modal", "h100", 2.0 / 3600, path=path)
    set_price("lambda", "H100", 2.99 / 3600, source="lambda.ai", path=path)
    table = load_prices(path)
    assert table[("modal", "H100")].usd_per_gpu_hour == pytest.approx(2.0)
    p = plan_for({**SMALL, "cloud.provider": "lambda"}, prices=table)
    assert p.usd_per_gpu_s == pytest.approx(2.99 / 3600)
    assert delete_price("modal", "H100", path=path)
    assert load_prices(path)[("modal", "H100")].usd_per_gpu_s == H100_USD_S


# --- the trainer's sharding and the training state from the model's shapes -----------------------

#: Qwen2.5-7B's shapes: 7.6B parameters.
QWEN_7B = {**SMALL, "cloud.params_b": 7.6, "cloud.layers": 28, "cloud.hidden_size": 3584, "cloud.attention_heads": 28,
           "cloud.kv_heads": 4, "cloud.head_dim": 128, "cloud.intermediate_size": 18944, "cloud.vocab_size": 152064,
           "cloud.qkv_bias": True}


def test_the_plan_assumes_fsdp_unless_the_trainer_table_says_ddp(tmp_path: Path) -> None:
    assert plan_for(SMALL).sharding == "fsdp" and plan_for(SMALL).to_dict()["sharding"] == "fsdp"
    ddp = plan_for({**SMALL, "trainer.sharding": "ddp"})
    assert ddp.sharding == "ddp" and any("sharding ddp" in a for a in ddp.assumptions)
    f = tmp_path / "run.toml"
    f.write_text('[trainer]\nsharding = "ddp"\n')
    cfg = load_launch_config(f, SMALL, "arithmetic")
    assert cfg.sharding == "ddp" and cfg.run.trainer["sharding"] == "ddp"  # the launched trainer runs what is planned
    assert load_launch_config(f, {**SMALL, "trainer.sharding": "fsdp"}, "arithmetic").sharding == "fsdp"
    assert load_launch_config(None, SMALL, "arithmetic").run.trainer["sharding"] == "fsdp"


def test_ddp_holds_world_size_times_the_fsdp_state_for_full_fine_tuning() -> None:
    same_dtype = {**QWEN_7B, "cloud.nodes": 2, "trainer.dtype": "bfloat16"}  # 8 trainer GPUs
    fsdp, ddp = plan_for(same_dtype), plan_for({**same_dtype, "trainer.sharding": "ddp"})
    assert fsdp.trainer_gpus == 8

    def state(p: Any) -> float:
        return sum(p.memory["trainer"][k] for k in ("weights_gb", "grads_gb", "optimizer_gb"))

    assert state(ddp) == pytest.approx(7.6e9 * 8 / 1e9, rel=0.01)  # bf16 weights + grads + Adam m, v
    assert state(ddp) / state(fsdp) == pytest.approx(8, rel=1e-3)  # shards: 1/8, up to dim-0 padding
    assert ddp.memory["trainer"]["gathered_layers_gb"] == 0 < fsdp.memory["trainer"]["gathered_layers_gb"]
    # dtype auto: FSDP keeps float32 shards (16 B/param over 8 GPUs), DDP the bf16 replica (8 B/param)
    auto = plan_for({**QWEN_7B, "cloud.nodes": 2})
    assert state(plan_for({**QWEN_7B, "cloud.nodes": 2, "trainer.sharding": "ddp"})) / state(auto) == pytest.approx(
        4, rel=1e-3)
    # 7.6B full fine-tuning with a whole replica per 80 GB GPU does not fit (61 GB of state + 21 GB activations)
    big = plan_for({**QWEN_7B, "cloud.gpu": "A100-80GB", "cloud.context_length": 65536, "trainer.sharding": "ddp"})
    assert not big.memory["trainer"]["fits"] and not big.fits
    assert plan_for({**QWEN_7B, "cloud.gpu": "A100-80GB", "cloud.context_length": 65536}).memory["trainer"]["fits"]


def test_the_training_state_is_the_memory_module_over_the_model_shapes() -> None:
    from workbench.training.memory import decoder_param_shapes, state_bytes_per_rank

    shapes = decoder_param_shapes(28, 3584, 18944, 28, 4, 128, 152064, False, qkv_bias=True)
    want = state_bytes_per_rank(shapes, 4, sharding="fsdp", param_bytes=4, grad_bytes=4, optimizer_bytes=8)
    tr = plan_for(QWEN_7B).memory["trainer"]
    assert (tr["weights_gb"], tr["grads_gb"], tr["optimizer_gb"]) == (want.params / 1e9, want.grads / 1e9,
                                                                      want.optimizer / 1e9)
    lora = decoder_param_shapes(28, 3584, 18944, 28, 4, 128, 152064, False, 16, qkv_bias=True)
    p = plan_for({**QWEN_7B, "trainer.lora": True, "trainer.lora_rank": 16})
    want = state_bytes_per_rank(lora, 4, sharding="fsdp", param_bytes=4, grad_bytes=4, optimizer_bytes=8)
    assert p.memory["trainer"]["optimizer_gb"] == want.optimizer / 1e9 < 1
    row = next(d for d in p.derivation if d.quantity == "trainer weights/GPU")
    assert "parameter shapes from [cloud]" in row.formula and "ceil(dim 0 / 4 GPUs)" in row.formula


def test_160_experts_over_64_gpus_pad_to_3_a_gpu() -> None:
    """FSDP2 shards each parameter on dim 0: fused experts shard by expert, so 8 trainer nodes hold
    ceil(160 / 64) = 3 experts a GPU and the 28-node job no longer fits; 10 nodes hold 2 each."""
    ten = plan_for({}, CONFIG_28)
    eight = plan_for({"cloud.trainer_nodes": 8, "cloud.inference_nodes": 20}, CONFIG_28)
    assert ten.memory["trainer"]["fits"] and not eight.memory["trainer"]["fits"]
    ratio = eight.memory["trainer"]["optimizer_gb"] / ten.memory["trainer"]["optimizer_gb"]
    assert ratio > 80 / 64 * 1.15  # well above the 1.25 an even split would give


@pytest.mark.parametrize(("overrides", "message"), [
    ({"trainer.sharding": "zero3"}, "trainer.sharding 'zero3'"),
    ({"cloud.qkv_bias": 1}, "cloud.qkv_bias must be true or false, not 1"),
    ({**QWEN_7B, "cloud.params_b": 70.0}, r"cloud.params_b \(70\) is not what the \[cloud\] architecture adds up to"),
    ({**QWEN_7B, "cloud.experts": 8}, "needs cloud.moe_intermediate_size"),
    ({**QWEN_7B, "trainer.dtype": "fp8"}, "trainer"),
])
def test_bad_sharding_and_shape_keys_are_one_clear_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        plan_for({**SMALL, **overrides})
    assert "\n" not in str(e.value)
