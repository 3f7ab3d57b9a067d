"""The LoRA trainer on a tiny random Llama: learning, bad input, NaN steps, checkpoints."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from workbench_local.training.checkpoint import CheckpointError
from workbench_local.training.trainer import Trainer, TrainerConfig

from tests.training.conftest import make_samples
from workbench.errors import ConfigError


def trainer(model: str, loss: str = "ce", **kw: object) -> Trainer:
    kw = {"lr": 1e-2, "micro_batch_tokens": 64, **kw}
    return Trainer(TrainerConfig(model=model, **kw), loss=loss)  # type: ignore[arg-type]


def weights(t: Trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in t.model.named_parameters() if p.requires_grad}


def test_lora_steps_reduce_the_loss_on_a_fixed_batch(tiny_model: str) -> None:
    t = trainer(tiny_model)
    assert all("lora_" in n for n in weights(t))
    samples = make_samples(6)
    losses = [t.step(samples).metrics["loss"] for _ in range(4)]
    assert losses[-1] < losses[0] - 0.1, losses
    res = t.step(samples)
    assert t.step_count == res.step == 5 and not res.skipped
    m = res.metrics
    assert m["micro_batches"] >= 2 and m["samples"] == 6 and m["tokens"] == sum(s.n_tokens for s in samples)
    assert m["loss_tokens"] == sum(s.n_loss_tokens for s in samples)
    for k in ("entropy", "grad_norm", "tokens_per_s", "step_time_s", "lr", "staleness_mean"):
        assert k in m


def test_policy_gradient_moves_probability_towards_positive_advantages(tiny_model: str) -> None:
    from workbench_local.training.losses import make_loss

    t = trainer(tiny_model, loss="pg", lr=5e-3)
    fresh = trainer(tiny_model)
    good = make_samples(2, seed=3, advantage=1.0)
    bad = make_samples(2, seed=4, advantage=-1.0)
    before = (fresh.evaluate(good)["loss"], fresh.evaluate(bad)["loss"])  # the trainer's loss is CE
    first = t.step(good + bad)
    assert 0.0 <= first.metrics["masked_fraction"] <= 1.0 and first.metrics["mismatch_kl"] > 0
    for _ in range(3):
        t.step(good + bad)
    ce = make_loss("ce")
    after = (t.evaluate(good, ce)["loss"], t.evaluate(bad, ce)["loss"])
    assert after[0] < before[0] and after[1] > before[1], (before, after)
    assert t.step_count == 4 and fresh.step_count == 0


def test_absent_lora_target_is_a_clear_error(tiny_model: str) -> None:
    with pytest.raises(ConfigError) as e:
        trainer(tiny_model, target_modules=["q_proj", "c_attn"])
    msg = str(e.value)
    assert "'c_attn'" in msg and "q_proj" in msg and "down_proj" in msg and "all-linear" in msg
    with pytest.raises(ConfigError, match="did you mean 'lora_rank'"):
        TrainerConfig.from_dict({"lora_rnk": 4})


def test_nan_loss_step_is_skipped_and_weights_unchanged(tiny_model: str) -> None:
    t = trainer(tiny_model, loss="pg")
    t.step(make_samples(4))
    before = weights(t)
    state_before = {k: v["exp_avg"].clone() for k, v in t.optimizer.state_dict()["state"].items()}
    res = t.step(make_samples(4, advantage=float("inf")))
    assert res.skipped and "non-finite loss" in (res.reason or "")
    assert res.step == t.step_count == 1 and t.skipped_steps == 1
    after = weights(t)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(torch.equal(state_before[k], v["exp_avg"]) for k, v in t.optimizer.state_dict()["state"].items())
    assert all(p.grad is None or not p.grad.any() for p in t.params)
    ok = t.step(make_samples(4))  # the next good batch trains normally
    assert not ok.skipped and ok.step == 2
    empty = t.step([s for s in make_samples(2) if False])
    assert empty.skipped and "no sampled tokens" in (empty.reason or "")


@pytest.mark.filterwarnings("ignore::FutureWarning")  # peft's own loader calls a deprecated transformers method
def test_checkpoint_resume_continues_step_and_optimizer_state(tiny_model: str, tmp_path: Path) -> None:
    samples = make_samples(4)
    a = trainer(tiny_model, warmup_steps=4)
    for _ in range(2):
        a.step(samples)
    a.save_checkpoint(tmp_path / "ckpt")
    adapter = tmp_path / "ckpt" / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file() and (adapter / "adapter_config.json").is_file()
    assert json.loads((tmp_path / "ckpt" / "trainer.json").read_text())["step"] == 2
    # the adapter is a plain peft adapter: peft (and vLLM) load it onto the base model by themselves
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), str(adapter)).eval()
    ids = torch.tensor([samples[0].token_ids])
    a.model.eval()
    with torch.no_grad():
        assert torch.allclose(served(input_ids=ids).logits, a.model(input_ids=ids).logits, atol=1e-5)
    assert a.save_adapter(tmp_path / "v2") == (tmp_path / "v2").resolve()
    assert (tmp_path / "v2" / "adapter_model.safetensors").is_file()

    b = trainer(tiny_model, warmup_steps=4)
    assert b.load_checkpoint(tmp_path / "ckpt") == 2 and b.step_count == 2
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"][0]["lr"] == sb["param_groups"][0]["lr"]
    assert sa["state"].keys() == sb["state"].keys()
    for k in sa["state"]:
        for field in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(torch.as_tensor(sa["state"][k][field]), torch.as_tensor(sb["state"][k][field]))
    assert all(torch.equal(w, weights(b)[n]) for n, w in weights(a).items())
    with pytest.raises(ConfigError, match="lora_rank"):
        trainer(tiny_model, lora_rank=4).load_checkpoint(tmp_path / "ckpt")
    ra, rb = a.step(samples), b.step(samples)
    assert ra.step == rb.step == 3
    assert all(torch.allclose(w, weights(b)[n], atol=1e-6) for n, w in weights(a).items())


def test_full_disk_at_checkpoint_keeps_the_previous_one(tiny_model: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    t = trainer(tiny_model)
    t.step(make_samples(2))
    t.save_checkpoint(tmp_path / "ckpt")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()}
    t.step(make_samples(2))

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="no space left"):
        t.save_checkpoint(tmp_path / "ckpt")
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in (tmp_path / "ckpt").rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary directory left behind
    assert trainer(tiny_model).load_checkpoint(tmp_path / "ckpt") == 1


def test_full_fine_tuning_with_a_kl_term(tiny_model: str) -> None:
    from workbench_local.training.losses import build_loss

    t = Trainer(TrainerConfig(model=tiny_model, lora=False, lr=1e-3, micro_batch_tokens=64),
                loss=build_loss("pg", kl_coef=0.1))
    n_all = sum(p.numel() for p in t.model.parameters())
    assert sum(p.numel() for p in t.params) == n_all
    before = weights(t)
    first = t.step(make_samples(4))
    assert first.metrics["kl"] == pytest.approx(0.0, abs=1e-9)  # the reference is the starting model
    second = t.step(make_samples(4))
    assert second.metrics["kl"] > 0
    assert any(not torch.equal(before[n], w) for n, w in weights(t).items())


def test_lora_kl_reference_is_the_base_model(tiny_model: str) -> None:
    from workbench_local.training.losses import build_loss

    t = Trainer(TrainerConfig(model=tiny_model, lr=1e-2, micro_batch_tokens=64), loss=build_loss("pg", kl_coef=0.1))
    assert t.step(make_samples(4)).metrics["kl"] == pytest.approx(0.0, abs=1e-9)  # LoRA B starts at zero
    assert t.step(make_samples(4)).metrics["kl"] > 0


def test_a_crash_between_the_renames_leaves_the_checkpoint_findable(tmp_path: Path) -> None:
    from workbench_local.training.checkpoint import resolve, write_atomic

    write_atomic(tmp_path / "ckpt", lambda d: (d / "a.txt").write_text("1"))
    write_atomic(tmp_path / "ckpt", lambda d: (d / "a.txt").write_text("2"))
    assert (tmp_path / "ckpt" / "a.txt").read_text() == "2" and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    (tmp_path / "ckpt").rename(tmp_path / ".ckpt.old-1234")  # as if killed after moving the old one aside
    assert (resolve(tmp_path / "ckpt") / "a.txt").read_text() == "2"
    with pytest.raises(CheckpointError, match="no checkpoint"):
        resolve(tmp_path / "other")
