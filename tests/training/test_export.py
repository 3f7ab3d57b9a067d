"""The trainer's weights as Hugging Face files (``workbench_local.training.export``): the same tensors
as ``save_pretrained`` / peft write, from one process and from two FSDP ranks (gloo) that each hold
half of the model; files of bounded size; a failed write raises on every rank without a hang."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from workbench_local.training.export import FilePlan, plan_files, weight_tensors, write_weights

from tests.training.conftest import VOCAB

SHARD_BYTES = 40_000  # a few files for the tiny model below (its largest tensor is 76,800 bytes)


def build_tied_model(path: Path) -> Path:
    """A tiny Llama whose output head shares the embedding (as the embedded tiny model's does)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tied_model(tmp_path_factory.mktemp("tied") / "model"))


def trained_model(model_dir: str, lora: bool) -> Any:
    """The model as a trainer would hold it after some steps: weights (or adapters) moved by a
    seeded perturbation, the same in every process."""
    from transformers import AutoModelForCausalLM
    from workbench_local.models.lora import apply_lora

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if lora:
        torch.manual_seed(1)
        model = apply_lora(model, rank=4, alpha=8, dropout=0.0, targets="all-linear")
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        part = load_file(str(f))
        assert not set(part) & set(out), f"{f.name} repeats a tensor"
        out.update(part)
    return out


def reference_files(model_dir: str, lora: bool, out: Path) -> Path:
    """What one process writes with the libraries' own savers."""
    from workbench_local.models.lora import save_adapter

    model = trained_model(model_dir, lora)
    if lora:
        save_adapter(model, out)
    else:
        model.save_pretrained(str(out), safe_serialization=True)
    return out


def _fsdp_export(rank: int, world: int, model_dir: str, out: str, lora: bool) -> dict[str, Any]:
    """One rank: shard the trained model with FSDP2, export it, then try a write that cannot succeed."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from workbench_local.training.checkpoint import CheckpointError

    model = trained_model(model_dir, lora)
    base = model.get_base_model() if lora else model
    for layer in base.model.layers:
        fully_shard(layer)
    fully_shard(model)
    local = sum(p.to_local().numel() for p in model.parameters() if isinstance(p, DTensor))
    total = sum(p.numel() for p in model.parameters())
    path = write_weights(model, Path(out) / "export", lora=lora, max_shard_bytes=SHARD_BYTES)
    blocked = Path(out) / "a-file"
    if rank == 0:
        blocked.write_text("not a directory")
    torch.distributed.barrier()
    try:
        write_weights(model, blocked / "export", lora=lora)
        failure = ""
    except CheckpointError as e:
        failure = str(e)
    return {"path": str(path), "local": local, "total": total, "failure": failure}


@pytest.mark.slow  # two spawned processes
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_fsdp_export_equals_one_process_save(tied_model: str, tmp_path: Path, lora: bool,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM
    from workbench_local.training.distributed import launch

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    ranks = launch(_fsdp_export, 2, tied_model, str(tmp_path), lora, backend="gloo", threads_per_rank=1)
    out = Path(ranks[0]["path"])
    assert ranks[1]["path"] == str(out)
    for r in ranks:  # each rank held about half of the model, never the whole of it
        assert r["local"] <= r["total"] // 2 + 64 * 4, r
        assert r["failure"], "a write that cannot succeed raised on every rank"
    assert "rank 0 could not write" in ranks[1]["failure"]
    assert not list(tmp_path.glob(".export.tmp-*"))  # nothing half-written left behind

    ref = reference_files(tied_model, lora, tmp_path / "reference")
    mine, theirs = read_tensors(out), read_tensors(ref)
    assert sorted(mine) == sorted(theirs)
    for name, tensor in theirs.items():
        assert mine[name].dtype == tensor.dtype and torch.equal(mine[name], tensor), name
    if lora:
        assert sorted(p.name for p in out.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
        configs = [json.loads((d / "adapter_config.json").read_text()) for d in (out, ref)]
        for c in configs:  # peft writes its set of target modules in no fixed order
            c["target_modules"] = sorted(c["target_modules"])
        assert configs[0] == configs[1]
        return
    assert "lm_head.weight" not in mine  # tied: written once, as save_pretrained does
    files = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(files) > 1 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(mine) and set(index["weight_map"].values()) == set(files)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in mine.values())
    loaded = AutoModelForCausalLM.from_pretrained(out)
    expected = AutoModelForCausalLM.from_pretrained(ref)
    assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()  # tied again
    for (name, a), (_, b) in zip(loaded.state_dict().items(), expected.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_one_process_export_loads_with_from_pretrained(tied_model: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = trained_model(tied_model, lora=False)
    out = write_weights(model, tmp_path / "one", lora=False)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", "model.safetensors"]
    loaded = AutoModelForCausalLM.from_pretrained(out)
    for (name, a), (_, b) in zip(loaded.state_dict().items(), model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    half = write_weights(model, tmp_path / "bf16", lora=False, dtype=torch.bfloat16)
    assert {t.dtype for t in read_tensors(half).values()} == {torch.bfloat16}
    assert json.loads((half / "config.json").read_text())["dtype"] == "bfloat16"
    assert AutoModelForCausalLM.from_pretrained(half).dtype == torch.bfloat16


def test_files_stay_under_the_size_bound(tied_model: str) -> None:
    """No file holds more than the bound unless one tensor alone is larger: rank 0 never holds more
    of the gathered model than one file's worth."""
    tensors = weight_tensors(trained_model(tied_model, lora=False))
    plan = plan_files(tensors, SHARD_BYTES)
    sizes = {n: t.numel() * t.element_size() for n, t in tensors.items()}
    assert [n for names in plan.files for n in names] == list(tensors)  # every tensor once, in order
    for names in plan.files:
        assert sum(sizes[n] for n in names) <= SHARD_BYTES or len(names) == 1
    assert plan.total_bytes == sum(sizes.values())
    assert FilePlan([["a"]]).file_name(0) == "model.safetensors"
    assert FilePlan([["a"], ["b"]]).file_name(1) == "model-00002-of-00002.safetensors"
    with pytest.raises(ValueError, match="positive"):
        plan_files(tensors, 0)


def _trainer_publish(rank: int, world: int, model_dir: str, out: str, sharding: str) -> dict[str, Any]:
    """One rank of a trainer that takes a step and publishes it with save_adapter, LoRA and full."""
    from workbench_local.training.losses import build_loss
    from workbench_local.training.trainer import Trainer, TrainerConfig

    from tests.training.conftest import make_samples

    paths = {}
    for lora in (False, True):
        t = Trainer(TrainerConfig(model=model_dir, lora=lora, lr=1e-2, micro_batch_tokens=48, adam_eps=1e-4,
                                  sharding=sharding), loss=build_loss("pg"))
        assert t.sharded is (sharding == "fsdp" and world > 1)
        t.step(make_samples(4, seed=5))
        paths[lora] = str(t.save_adapter(Path(out) / ("adapter" if lora else "weights") / "step-1"))
    return paths


@pytest.mark.slow  # two spawned processes, each building two trainers
def test_an_fsdp_trainer_publishes_what_one_process_publishes(tied_model: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer.save_adapter under sharding = "fsdp" (every rank calls it) writes, after the same step,
    the tensors one unsharded process writes — within float tolerance, as the FSDP step itself is."""
    from workbench_local.training.distributed import launch

    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    torch.set_num_threads(1)
    single = _trainer_publish(0, 1, tied_model, str(tmp_path / "one"), "ddp")
    sharded = launch(_trainer_publish, 2, tied_model, str(tmp_path / "two"), "fsdp", backend="gloo",
                     threads_per_rank=1)
    assert sharded[0] == sharded[1]
    for lora in (False, True):
        mine, theirs = read_tensors(Path(sharded[0][lora])), read_tensors(Path(single[lora]))
        assert sorted(mine) == sorted(theirs) and mine
        for name, tensor in theirs.items():
            assert torch.allclose(mine[name], tensor, atol=1e-5, rtol=1e-4), name
    base = read_tensors(Path(tied_model))
    assert [n for n, t in read_tensors(Path(sharded[0][False])).items() if not torch.equal(t, base[n])]  # moved
