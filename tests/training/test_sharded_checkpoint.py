"""Sharded checkpoints (torch.distributed.checkpoint) survive the cluster changing: a run of 4 FSDP ranks
saves, and 2 ranks, 1 process or a data-parallel trainer resume from it with the loss curve the
uninterrupted run had; a data-parallel checkpoint resumes under FSDP; a failed write on one rank fails on
every rank and leaves the previous checkpoint as it was; a checkpoint that does not fit is one clear line."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader
from workbench_local.training.checkpoint import CheckpointError
from workbench_local.training.distributed import launch
from workbench_local.training.trainer import Trainer, TrainerConfig

from tests.training.conftest import make_samples
from workbench.errors import ConfigError

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

SAVE_AT = 2  # the step the interrupted run saves at
STEPS = 4  # the uninterrupted run's length
MODES = {"lora": {"lora": True, "lr": 1e-2}, "full": {"lora": False, "lr": 1e-3}}


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")


def _trainer(model: str, mode: str, sharding: str = "fsdp", **kw: Any) -> Trainer:
    # a warm-up, so the scheduler's position matters; adam_eps above float noise, so a gradient that is ~0 up to
    # summation order (4 ranks against 2) moves no weight visibly
    return Trainer(TrainerConfig(model=model, sharding=sharding, micro_batch_tokens=48, max_grad_norm=0.5,
                                 adam_eps=1e-4, warmup_steps=3, **{**MODES[mode], **kw}), loss="pg")


def _batch(step: int) -> list[Any]:
    return make_samples(5, seed=100 + step)  # five samples: the ranks' shards differ in size


def _train(t: Trainer, first: int, last: int, ckpt: Path | None = None) -> list[float]:
    """Losses of steps ``first+1 .. last`` on the fixed batch sequence; a checkpoint after step SAVE_AT."""
    losses = []
    for i in range(first, last):
        res = t.step(_batch(i))
        assert not res.skipped and res.step == i + 1
        losses.append(res.metrics["loss"])
        if ckpt is not None and res.step == SAVE_AT:
            t.save_checkpoint(ckpt)
    return losses


def _uninterrupted(rank: int, world: int, model: str, mode: str, ckpt: str) -> list[float]:
    return _train(_trainer(model, mode), 0, STEPS, Path(ckpt))


def _resumed(rank: int, world: int, model: str, mode: str, ckpt: str, sharding: str = "fsdp") -> list[float]:
    t = _trainer(model, mode, sharding)
    assert t.load_checkpoint(ckpt) == SAVE_AT and t.step_count == SAVE_AT
    return _train(t, SAVE_AT, STEPS)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_saved_at_4_ranks_resumes_at_2_and_1_with_the_same_loss_curve(tiny_model: str, tmp_path: Path,
                                                                       mode: str) -> None:
    ckpt = tmp_path / "ckpt"
    whole = launch(_uninterrupted, 4, tiny_model, mode, str(ckpt), backend="gloo", threads_per_rank=1)
    assert all(r == whole[0] for r in whole) and len(whole[0]) == STEPS
    meta = json.loads((ckpt / "trainer.json").read_text())
    assert meta["step"] == SAVE_AT and meta["world_size"] == 4 and meta["sharding"] == "fsdp"
    assert meta["format"] == "dcp" and meta["model"]["architecture"] == "LlamaForCausalLM"
    shards = sorted(p.name for p in (ckpt / "dcp").iterdir())
    assert shards == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]  # every rank wrote its own
    saved = [k for k in FileSystemReader(str(ckpt / "dcp")).read_metadata().state_dict_metadata if k.startswith("model.")]
    if mode == "lora":  # only the trainable weights: the base model comes from the model it names
        assert saved and all(".lora_" in k for k in saved), saved
    else:
        assert any("embed_tokens" in k for k in saved) and any("layers.1.mlp.down_proj" in k for k in saved)
    expected = pytest.approx(whole[0][SAVE_AT:], rel=1e-4, abs=1e-5)

    two = launch(_resumed, 2, tiny_model, mode, str(ckpt), backend="gloo", threads_per_rank=1)
    assert two[0] == two[1] == expected
    torch.set_num_threads(1)
    one = _resumed(0, 1, tiny_model, mode, str(ckpt))  # one process, no process group
    assert one == expected
    ddp = _resumed(0, 1, tiny_model, mode, str(ckpt), sharding="ddp")  # a data-parallel trainer reads it too
    assert ddp == expected


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_data_parallel_checkpoint_resumes_under_fsdp(tiny_model: str, tmp_path: Path, mode: str) -> None:
    torch.set_num_threads(1)
    ckpt = tmp_path / "ckpt"
    whole = _train(_trainer(tiny_model, mode, "ddp"), 0, STEPS, ckpt)
    assert (ckpt / ("adapter" if mode == "lora" else "model")).is_dir() and not (ckpt / "dcp").exists()
    two = launch(_resumed, 2, tiny_model, mode, str(ckpt), backend="gloo", threads_per_rank=1)
    assert two[0] == two[1] == pytest.approx(whole[SAVE_AT:], rel=1e-4, abs=1e-5)


def _fail_on_rank_1(rank: int, world: int, model: str, ckpt: str) -> dict[str, Any]:
    import torch.distributed.checkpoint.filesystem as fs

    t = _trainer(model, "lora")
    t.step(_batch(0))
    t.save_checkpoint(ckpt)
    before = {p.relative_to(ckpt).as_posix(): p.read_bytes() for p in Path(ckpt).rglob("*") if p.is_file()}
    t.step(_batch(1))
    real = fs._write_item

    def full_disk(*a: Any, **k: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    if rank == 1:
        fs._write_item = full_disk  # type: ignore[assignment]
    try:
        t.save_checkpoint(ckpt)
        error = None
    except CheckpointError as e:
        error = str(e)
    finally:
        fs._write_item = real  # type: ignore[assignment]
    after = {p.relative_to(ckpt).as_posix(): p.read_bytes() for p in Path(ckpt).rglob("*") if p.is_file()}
    t.save_checkpoint(ckpt)  # the disk has room again: the next save works
    return {"error": error, "intact": after == before, "step": json.loads((Path(ckpt) / "trainer.json").read_text())}


def test_a_failed_write_on_one_rank_fails_on_every_rank_and_keeps_the_previous_checkpoint(
        tiny_model: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ranks = launch(_fail_on_rank_1, 2, tiny_model, str(ckpt), backend="gloo", threads_per_rank=1)
    for r in ranks:
        assert r["error"] is not None and "no space left" in r["error"] and "\n" not in r["error"], r["error"]
        assert r["intact"] and r["step"]["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary folder left behind


# -- a checkpoint that does not fit: one clear line, before anything is loaded ------------------------------
def _other_model(path: Path, hidden: int, vocab: int) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                      intermediate_size=2 * hidden, vocab_size=vocab, max_position_embeddings=256, pad_token_id=0)
    LlamaForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)
    return str(path)


@pytest.fixture(scope="module")
def saved(tiny_model: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Checkpoints of the tiny model in both layouts, LoRA and full, and two other models to load them into."""
    root = tmp_path_factory.mktemp("saved")
    out = {"narrower": _other_model(root / "narrower", 32, 300), "larger-vocab": _other_model(root / "vocab", 64, 320)}
    for mode in MODES:
        for sharding in ("fsdp", "ddp"):
            t = _trainer(tiny_model, mode, sharding)
            t.step(_batch(0))
            out[f"{sharding}-{mode}"] = str(t.save_checkpoint(root / f"{sharding}-{mode}"))
    return out


BAD_LOADS = [  # (checkpoint, trainer settings, the error's class, what its one line says)
    ("fsdp-lora", {"model": "narrower"}, ConfigError,
     r"is of another model \(LlamaForCausalLM, hidden size 64, 2 layers, vocabulary 300, .*\) than this trainer's "
     r"\(LlamaForCausalLM, hidden size 32, 2 layers, vocabulary 300, .*\); resume with trainer.model"),
    ("ddp-lora", {"model": "narrower"}, ConfigError, r"another model \(LlamaForCausalLM, hidden size 64.*hidden size 32"),
    ("fsdp-full", {"model": "larger-vocab"}, ConfigError, r"another model .*vocabulary 300.*vocabulary 320"),
    ("ddp-full", {"model": "larger-vocab", "sharding": "fsdp"}, ConfigError, r"another model .*vocabulary 320"),
    ("fsdp-lora", {"lora": False}, ConfigError, r"was trained with lora=True, this trainer has False"),
    ("ddp-full", {"lora": True, "sharding": "fsdp"}, ConfigError, r"was trained with lora=False, this trainer has True"),
    ("fsdp-lora", {"lora_rank": 4}, ConfigError, r"was trained with lora_rank=8, this trainer has 4"),
    ("missing", {}, CheckpointError, r"no checkpoint at .*missing; pass the directory a previous run saved"),
]


@pytest.mark.parametrize(("name", "settings", "error", "says"), BAD_LOADS,
                         ids=[f"{c}-{'-'.join(f'{k}={v}' for k, v in s.items())}" for c, s, _, _ in BAD_LOADS])
def test_a_checkpoint_that_does_not_fit_is_one_clear_line(tiny_model: str, saved: dict[str, str], tmp_path: Path,
                                                          name: str, settings: dict[str, Any], error: type,
                                                          says: str) -> None:
    settings = dict(settings)
    model = saved.get(settings.pop("model", ""), tiny_model)
    sharding = settings.pop("sharding", "fsdp" if name.startswith("fsdp") else "ddp")
    mode = "lora" if settings.pop("lora", name.endswith("lora")) else "full"
    t = _trainer(model, mode, sharding, **settings)
    with pytest.raises(error, match=says) as e:
        t.load_checkpoint(saved.get(name, tmp_path / name))
    assert "\n" not in str(e.value) and t.step_count == 0


def test_a_checkpoint_missing_a_shard_is_one_clear_line(tiny_model: str, saved: dict[str, str],
                                                         tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(saved["fsdp-lora"], broken)
    (broken / "dcp" / "__0_0.distcp").unlink()
    with pytest.raises(CheckpointError, match=r"cannot read the checkpoint .*broken: ") as e:
        _trainer(tiny_model, "lora").load_checkpoint(broken)
    assert "\n" not in str(e.value)
