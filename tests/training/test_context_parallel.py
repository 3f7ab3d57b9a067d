"""Context parallelism on CPU over gloo, with real collectives between 2 and 4 processes: the sequence
split torch's head-tail load balancer makes, the global position ids each rank's tokens keep, the
loss reassembled over the group against the whole-sequence loss of one process, a tiny Llama's
logprobs through torch's ring-attention algorithm against the same model in one process, and the
Trainer's ``evaluate`` split over 2 ranks (and over two groups of 2 ranks) against one process's.

What a CPU cannot run: torch 2.13's public ``context_parallel`` routes only the CUDA SDPA kernels
(flash, memory-efficient, cuDNN) to ring attention; the CPU kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``) has no context-parallel handler, so
``context_parallel.ring_attention`` calls torch's ring algorithm (``_templated_ring_attention``) with the
CPU kernel directly, forward only. The ring's backward, and so training with ``context_parallel > 1``,
needs CUDA: ``Trainer.step`` refuses it here in one line, and so does a launch before any process
starts (``scripts/gpu_check.py`` checks the step on a GPU).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from workbench_local.training import context_parallel as cp_mod
from workbench_local.training.distributed import launch
from workbench_local.training.losses import LossBatch, build_loss, token_weights

from workbench.errors import ConfigError

NORMALIZATIONS = ("token", "sequence", "constant")
BATCH, SEQ, VOCAB = 2, 21, 50  # 21 tokens: not a multiple of 2 x cp, so the padding is exercised too


def _head_tail(seq_len: int, cp: int, rank: int) -> list[int]:
    """The split, written out: 2 x cp equal chunks; rank r holds chunk r and chunk 2 x cp - 1 - r."""
    size = seq_len // (2 * cp)
    tail = 2 * cp - 1 - rank
    return list(range(rank * size, (rank + 1) * size)) + list(range(tail * size, (tail + 1) * size))


def _ids() -> torch.Tensor:
    return torch.randint(3, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))


def _loss_inputs() -> dict[str, torch.Tensor]:
    """Per-token loss inputs aligned to the predicted tokens: made-up logprobs, advantages and a mask."""
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(BATCH, SEQ, generator=g) > 0.3
    mask[:, :4] = False  # a prompt
    return {"logprobs": -torch.rand(BATCH, SEQ, generator=g), "inference_logprobs": -torch.rand(BATCH, SEQ, generator=g),
            "advantages": torch.randn(BATCH, SEQ, generator=g), "mask": mask}


def _weights(mask: torch.Tensor, n_loss: float, n_seq: float, normalization: str) -> torch.Tensor:
    return token_weights(mask.bool(), normalization, n_loss, n_seq, max_tokens=SEQ)


def _loss(t: dict[str, torch.Tensor], n_loss: float, weights: torch.Tensor) -> torch.Tensor:
    mask = t["mask"].bool()
    batch = LossBatch(t["logprobs"], t["inference_logprobs"], t["advantages"], mask, weights, mask.float() / n_loss)
    return build_loss("pg")(batch)[0]


def _tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=128, attn_implementation="sdpa")
    return LlamaForCausalLM(cfg).eval()


def _rank(rank: int, world: int, cp: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    mesh = cp_mod.group_mesh(cp, "cpu")
    ids = _ids()
    inputs = _loss_inputs()
    n_loss = float(inputs["mask"].sum())  # step-wide counts: known before the sequence is split
    out: dict[str, Any] = {"losses": {}}
    # the weights come from the whole rows, before the split ("sequence" divides by a row's token count),
    # and travel with the tokens
    weights = {f"w_{n}": _weights(inputs["mask"], n_loss, BATCH, n) for n in NORMALIZATIONS}
    with cp_mod.sharded_sequence(mesh, {"input_ids": ids, **inputs, **weights}) as shard:
        out["input_ids"] = shard["input_ids"].clone()
        out["position_ids"] = shard[cp_mod.POSITION_IDS].clone()
        for normalization in NORMALIZATIONS:
            local = _loss(shard, n_loss, shard[f"w_{normalization}"])
            out["losses"][normalization] = (float(local), float(cp_mod.group_sum(mesh, local)))
    model = _tiny_llama()
    cp_mod.use_ring_attention(model)
    with torch.no_grad(), cp_mod.sharded_sequence(mesh, {"input_ids": ids}) as shard:
        logits = model(input_ids=shard["input_ids"], position_ids=shard[cp_mod.POSITION_IDS]).logits
        out["logprobs"] = cp_mod.unshard(mesh, logits.float().log_softmax(-1), SEQ)
    out["sdpa_restored"] = torch.nn.functional.scaled_dot_product_attention is sdpa  # torch's patch is undone
    return out


def test_the_split_is_torchs_head_tail_rule() -> None:
    assert cp_mod.padded_length(21, 2) == 24 and cp_mod.padded_length(24, 4) == 24 and cp_mod.padded_length(1, 4) == 8
    for cp in (1, 2, 4):
        order = cp_mod.balanced_order(24, cp).tolist()
        assert order == [p for r in range(cp) for p in _head_tail(24, cp, r)], cp


@pytest.mark.parametrize(("table", "words"), [
    ({"context_parallel": 2}, "trainer.context_parallel = 2 must divide the trainer's world size "
                              "(trainer.nodes × trainer.ranks = 1)"),
    ({"context_parallel": 2, "ranks": 3}, "(trainer.nodes × trainer.ranks = 3)"),
    ({"context_parallel": 4, "ranks": 2, "nodes": 3}, "(trainer.nodes × trainer.ranks = 6)"),
    ({"context_parallel": 0}, "trainer.context_parallel must be at least 1, not 0"),
])
def test_context_parallel_must_divide_the_world_size(table: dict[str, int], words: str) -> None:
    from workbench_local.training.trainer_config import TrainerConfig

    with pytest.raises(ConfigError) as e:
        TrainerConfig.from_dict(table)
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("loss", "refused"), [
    ({"name": "pg", "sequence_mask_low": 0.5}, "loss 'pg' masks whole sequences"),
    ({"name": "pg", "sequence_mask_high": 2.0, "kl_coef": 0.1}, "loss 'pg' masks whole sequences"),
    ({"name": "pg", "kl_coef": 0.1}, None),
    ({"name": "ce"}, None),
])
def test_a_loss_that_needs_whole_rows_cannot_run_split(loss: dict[str, Any], refused: str | None) -> None:
    from workbench_local.training.cp_step import check_loss

    options = {k: v for k, v in loss.items() if k != "name"}
    built = build_loss(loss["name"], **options)
    if refused is None:
        check_loss(built, 2)
        return
    with pytest.raises(ConfigError) as e:
        check_loss(built, 2)
    assert str(e.value).startswith(refused) and str(e.value).endswith("trainer.context_parallel = 2")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("device", "gpus", "words"), [
    ("auto", 0, "trainer.context_parallel = 2: context parallelism needs CUDA ring attention; this machine has no GPU"),
    ("cpu", 0, "trainer.context_parallel = 2: context parallelism needs CUDA ring attention; trainer.device is 'cpu'"),
    ("cpu", 8, "trainer.context_parallel = 2: context parallelism needs CUDA ring attention; trainer.device is 'cpu'"),
    ("auto", 8, None),
])
def test_a_launch_with_context_parallel_needs_cuda(device: str, gpus: int, words: str | None) -> None:
    """The launcher's machine check (``workbench train``, ``launch --backend local``): before any process."""
    from workbench_local.training.launcher import placement_problem

    assert placement_problem(1, 2, device=device, cpu_count=2, gpu_count=gpus, context_parallel=2) == words


@pytest.mark.slow  # spawns 2 and 4 gloo processes
@pytest.mark.timeout(600)
@pytest.mark.parametrize("cp", [2, 4])
def test_split_positions_loss_and_logprobs_over_gloo(cp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    ranks = launch(_rank, cp, cp, backend="gloo", threads_per_rank=1)

    ids = _ids()
    padded = cp_mod.padded_length(SEQ, cp)
    padded_ids = torch.cat([ids, torch.zeros(BATCH, padded - SEQ, dtype=ids.dtype)], dim=1)
    inputs = _loss_inputs()
    n_loss = float(inputs["mask"].sum())
    model = _tiny_llama()
    with torch.no_grad():
        whole_logprobs = model(input_ids=ids).logits.float().log_softmax(-1)
    covered: list[int] = []
    for rank, r in enumerate(ranks):
        held = _head_tail(padded, cp, rank)
        # the split: this rank holds chunks r and 2cp-1-r of the padded sequence, in that order
        assert r["input_ids"].tolist() == padded_ids[:, held].tolist(), rank
        # the position ids: each token keeps its global position
        assert r["position_ids"].tolist() == [held] * BATCH, rank
        covered += held
        for normalization in NORMALIZATIONS:
            local, summed = r["losses"][normalization]
            whole = float(_loss(inputs, n_loss, _weights(inputs["mask"], n_loss, BATCH, normalization)))
            assert summed == pytest.approx(whole, rel=1e-6, abs=1e-7), (rank, normalization)
            assert summed == pytest.approx(sum(x["losses"][normalization][0] for x in ranks), rel=1e-6, abs=1e-7)
        # ring attention over the group: the same logprobs as the whole sequence in one process
        torch.testing.assert_close(r["logprobs"], whole_logprobs, atol=2e-5, rtol=0)
    assert sorted(covered) == list(range(padded))  # every token on exactly one rank
    assert all(r["sdpa_restored"] for r in ranks)


#: name -> (trainer settings, loss): the "sequence" normalisation needs the whole rows' weights before the
#: split; a KL term runs the reference (the adapter off under LoRA, a frozen copy under full fine-tuning)
#: through the ring too; FSDP's mesh spans every rank; chunked logprobs run on each rank's shard
TRAINER_CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "lora-sequence-kl": ({"lora": True, "normalization": "sequence", "loss_chunk_tokens": 0},
                         {"name": "pg", "kl_coef": 0.1}),
    "full-fsdp-chunked-kl": ({"lora": False, "sharding": "fsdp", "loss_chunk_tokens": 4, "shared_prefix": True},
                             {"name": "pg", "kl_coef": 0.1}),
    "lora-ce": ({"lora": True, "loss_chunk_tokens": 3}, {"name": "ce"}),
}
EVAL_KEYS = ("loss", "entropy", "tokens", "loss_tokens", "samples", "truncated", "mismatch_kl", "kl", "nll", "pg_loss",
             "ce_loss")


def _evaluate_cases(rank: int, world: int, model: str, cp: int) -> dict[str, Any]:
    from workbench_local.training.trainer import Trainer, TrainerConfig

    from tests.training.conftest import make_samples

    out: dict[str, Any] = {}
    for case, (table, loss) in TRAINER_CASES.items():
        cfg = TrainerConfig.from_dict({"model": model, "micro_batch_tokens": 40, "context_parallel": cp,
                                       "ranks": world, **table})
        t = Trainer(cfg, loss=build_loss(loss["name"], kl_coef=loss.get("kl_coef", 0.0)))
        samples = make_samples(5, seed=7)
        res: dict[str, Any] = {"metrics": t.evaluate(samples), "shares_prefix": t.shares_prefix}
        if cp > 1:
            try:
                t.step(samples)
                res["step"] = "trained"
            except ConfigError as e:
                res["step"] = str(e)
        out[case] = res
    return out


@pytest.mark.slow  # spawns 2 and 4 gloo processes
@pytest.mark.timeout(900)
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("world", [2, 4])
def test_trainer_evaluate_under_context_parallel_equals_one_process(tiny_model: str, world: int,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks split every sequence (world 2: one cp group; world 4: two dp groups of two); the loss metrics
    equal one process's, and a training step refuses in one line on a CPU before any work."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the step would train")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)
    single = _evaluate_cases(0, 1, tiny_model, 1)
    ranks = launch(_evaluate_cases, world, tiny_model, 2, backend="gloo", threads_per_rank=1)
    for case in TRAINER_CASES:
        want = single[case]["metrics"]
        assert want["loss_tokens"] > 0 and want["micro_batches"] >= 2, want
        for r in ranks:
            got = r[case]
            assert not got["shares_prefix"]  # the ring takes no shared-prefix mask: off under context parallelism
            for key in EVAL_KEYS:
                if key in want:
                    assert got["metrics"][key] == pytest.approx(want[key], rel=1e-5, abs=1e-6), (case, key)
            assert got["step"] == ("trainer.context_parallel = 2: context parallelism needs CUDA ring attention; "
                                   "this machine has no GPU")
