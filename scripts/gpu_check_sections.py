"""The sharded-training sections of ``scripts/gpu_check.py``: each runs the repo's own building block on
every GPU of the machine (or, with ``--device cpu``, on 2 gloo processes at tiny sizes) and returns its
figures as a dict whose ``status`` is ``ran``, ``skipped: <why>``, ``not available: <why>`` (the
building block cannot be imported) or ``failed: <why>``.

* ``fsdp``: the Trainer with ``sharding = "fsdp"`` (full fine-tuning, bf16 compute over fp32 shards on
  CUDA) on every GPU via ``distributed.launch`` (nccl), one step of a model of a few billion parameters
  built from a config; each rank's training-state bytes (measured from its shards) against
  ``workbench.training.memory.state_bytes_per_rank`` and its peak CUDA memory.
* ``checkpoint``: in the same ranks, ``save_checkpoint`` (DCP under FSDP), another step, then
  ``load_checkpoint``: the weights' checksum must come back; and ``save_adapter`` (the weights gathered
  shard by shard, HF layout) for the vLLM section.
* ``chunked_loss``: one step on one 32K-token sequence with ``loss_chunk_tokens`` set and with 0 (the
  whole ``[tokens x vocab]`` logits): peak CUDA memory of each and their losses.
* ``context_parallel``: the Trainer's step with ``context_parallel`` = every GPU (each sequence split
  over the GPUs, torch's CUDA ring attention forward and backward, FSDP over every GPU) against the
  same step on one GPU: the loss and the gradient norm. On a CPU: 2 gloo processes, the Trainer's
  ``evaluate`` (forward only: torch's ring algorithm with the CPU kernel) against one process's.
* ``vllm_update``: vLLM on the base model, then vLLM's ``collective_rpc("reload_weights")`` with the
  trained weights' folder as ``weights_path`` (the call the Modal gate makes); greedy tokens before
  and after.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import shutil
import time
from pathlib import Path
from typing import Any

SECTIONS = ("fsdp", "checkpoint", "chunked_loss", "context_parallel", "vllm_update")
#: a rank that has not finished by then prints its stack and exits, so a hung collective fails its
#: section instead of holding the device
RANK_TIMEOUT_S = 900

#: model configs and workloads per --size: "default" is the GPU check, "small" the CPU smoke test
SIZES: dict[str, dict[str, dict[str, int]]] = {
    "default": {  # fsdp: about 3.6B parameters (a Llama-3.2-3B-like shape with a 128K vocabulary)
        "fsdp": {"hidden": 3072, "layers": 28, "heads": 24, "kv_heads": 8, "intermediate": 8192, "vocab": 128256,
                 "samples": 8, "seq": 2048, "micro_batch_tokens": 8192},
        "chunked_loss": {"hidden": 1024, "layers": 4, "heads": 16, "kv_heads": 8, "intermediate": 4096,
                         "vocab": 128256, "tokens": 32768, "chunk": 2048},
        "context_parallel": {"hidden": 1024, "layers": 4, "heads": 16, "kv_heads": 8, "intermediate": 4096,
                             "vocab": 32000, "tokens": 32768},
    },
    "small": {
        "fsdp": {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 128, "vocab": 512,
                 "samples": 4, "seq": 64, "micro_batch_tokens": 256},
        "chunked_loss": {"hidden": 64, "layers": 2, "heads": 4, "kv_heads": 4, "intermediate": 128, "vocab": 512,
                         "tokens": 256, "chunk": 32},
        "context_parallel": {"hidden": 32, "layers": 2, "heads": 4, "kv_heads": 2, "intermediate": 64, "vocab": 50,
                             "tokens": 21},
    },
}


def missing(*modules: str) -> str | None:
    """``not available: <why>`` when one of ``modules`` cannot be imported, else None."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # an absent module, or one that fails on import
            return f"not available: {name} does not import ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    return None


def failed(e: BaseException) -> str:
    first = str(e).splitlines()[0][:240] if str(e) else ""
    return f"failed: {type(e).__name__}: {first}"


def llama_config(c: dict[str, int]) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(hidden_size=c["hidden"], num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                       num_key_value_heads=c["kv_heads"], intermediate_size=c["intermediate"], vocab_size=c["vocab"],
                       max_position_embeddings=max(4096, c.get("tokens", 0) + 64), pad_token_id=0, bos_token_id=1,
                       eos_token_id=2, tie_word_embeddings=False)


def build_llama(c: dict[str, int], device: str, dtype: Any) -> Any:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return LlamaForCausalLM(llama_config(c))
    finally:
        torch.set_default_dtype(default)


def save_llama(path: Path, c: dict[str, int], device: str, dtype: Any) -> int:
    """A random Llama from ``c`` saved with ``save_pretrained``; returns its parameter count."""
    import torch

    model = build_llama(c, device, dtype)
    model.save_pretrained(str(path), safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the ranks launched next need this GPU's memory
    return n


def long_sample(tokens: int, vocab: int, prompt: int) -> Any:
    import random

    from workbench.training.algorithms import TrainSample

    rng = random.Random(0)
    ids = [rng.randrange(3, vocab) for _ in range(tokens)]
    mask = [0] * prompt + [1] * (tokens - prompt)
    return TrainSample(ids, mask, [0.0] * prompt + [-3.0] * (tokens - prompt), [1.0 * m for m in mask])


def _sync(cuda: bool) -> None:
    import torch

    if cuda:
        torch.cuda.synchronize()


def _checksum(model: Any) -> float:
    """The sum of |w| over every rank's shards (one all-reduce): equal before a save and after the load."""
    import torch
    from workbench_local.training.distributed import all_reduce_

    total = torch.zeros(1, dtype=torch.float64)
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        total += local.detach().double().abs().sum().cpu()
    all_reduce_([total])
    return float(total)


# -- fsdp + checkpoint (one launch: the model loads once) ----------------------------------------------
def fsdp_rank(rank: int, world: int, model_dir: str, c: dict[str, int], cuda: bool, out: str) -> dict[str, Any]:
    import torch
    from bench_trainer import samples
    from workbench_local.training.trainer import Trainer, TrainerConfig

    table = {"model": model_dir, "lora": False, "sharding": "fsdp", "dtype": "bfloat16" if cuda else "float32",
             "device": "cuda" if cuda else "cpu", "lr": 1e-3, "micro_batch_tokens": c["micro_batch_tokens"],
             "gradient_checkpointing": cuda}
    faulthandler.dump_traceback_later(RANK_TIMEOUT_S, exit=True)
    res: dict[str, Any] = {"rank": rank}
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer = Trainer(TrainerConfig.from_dict(table), loss="pg")
    res["load_s"] = time.perf_counter() - t0
    batch = samples(c["samples"], c["seq"], c["vocab"])
    _sync(cuda)
    t0 = time.perf_counter()
    step = trainer.step(batch)
    _sync(cuda)
    res.update(step_s=time.perf_counter() - t0, loss=step.metrics.get("loss"), skipped=step.reason,
               tokens=step.metrics.get("tokens"), state_bytes=dict(getattr(trainer, "state_bytes", {}) or {}),
               peak_cuda_bytes=torch.cuda.max_memory_allocated() if cuda else None)
    res["sharded_params"] = all(hasattr(p, "to_local") for p in trainer.model.parameters())
    why = missing("workbench.training.memory")
    if why is None:
        from workbench.training import memory

        shapes = [(tuple(p.shape), p.requires_grad) for p in trainer.model.parameters()]  # DTensor: global shape
        size = next(iter(trainer.model.parameters())).element_size()
        res["predicted_state_bytes"] = memory.state_bytes_per_rank(
            shapes, world, sharding="fsdp", param_bytes=size, grad_bytes=size, rank=rank).to_dict()
    else:
        res["predicted_state_bytes"] = why
    res["export"] = _export(trainer, Path(out) / "export", cuda)
    res["checkpoint"] = _checkpoint_round_trip(trainer, batch, Path(out) / "checkpoint", cuda)
    faulthandler.cancel_dump_traceback_later()
    return res


def _export(trainer: Any, path: Path, cuda: bool) -> dict[str, Any]:
    try:
        _sync(cuda)
        t0 = time.perf_counter()
        trainer.save_adapter(path)
        _sync(cuda)
        return {"status": "ran", "export_s": time.perf_counter() - t0, "path": str(path),
                "bytes": sum(f.stat().st_size for f in path.glob("*.safetensors"))}
    except Exception as e:
        return {"status": failed(e)}


def _checkpoint_round_trip(trainer: Any, batch: list[Any], path: Path, cuda: bool) -> dict[str, Any]:
    why = missing("workbench_local.training.sharded_checkpoint")
    if why:
        return {"status": why}
    from workbench_local.training import sharded_checkpoint

    try:
        before = _checksum(trainer.model)
        t0 = time.perf_counter()
        trainer.save_checkpoint(path)
        save_s = time.perf_counter() - t0
        trainer.step(batch)  # the weights move on
        moved = _checksum(trainer.model)
        t0 = time.perf_counter()
        trainer.load_checkpoint(path)
        load_s = time.perf_counter() - t0
        after = _checksum(trainer.model)
        return {"status": "ran", "save_s": save_s, "load_s": load_s, "sharded": sharded_checkpoint.is_sharded(path),
                "bytes": sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
                "restored": after == before, "moved_between": moved != before}
    except Exception as e:
        return {"status": failed(e)}


def fsdp_and_checkpoint(c: dict[str, int], cuda: bool, world: int, tmp: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run the ``fsdp`` and ``checkpoint`` sections on ``world`` ranks; their two result dicts."""
    why = missing("workbench_local.training.sharding")
    if why:
        return {"status": why}, {"status": why}
    import torch
    from workbench_local.training.distributed import launch

    t0 = time.perf_counter()
    params = save_llama(tmp / "fsdp-base", c, "cuda" if cuda else "cpu", torch.bfloat16 if cuda else torch.float32)
    fsdp: dict[str, Any] = {"params": params, "world": world, "build_s": time.perf_counter() - t0,
                            "backend": "nccl" if cuda else "gloo", **c}
    try:
        ranks = launch(fsdp_rank, world, str(tmp / "fsdp-base"), c, cuda, str(tmp / "fsdp-out"),
                       backend="nccl" if cuda else "gloo", threads_per_rank=None if cuda else 1)
    except Exception as e:
        fsdp["status"] = failed(e)
        return fsdp, {"status": "skipped: the fsdp ranks failed"}
    fsdp["status"] = "ran" if all(r["skipped"] is None for r in ranks) else f"failed: step skipped ({ranks[0]['skipped']})"
    fsdp["ranks"] = [{k: v for k, v in r.items() if k not in ("checkpoint", "export")} for r in ranks]
    for r in fsdp["ranks"]:
        pred = r["predicted_state_bytes"]
        if isinstance(pred, dict) and r["state_bytes"].get("total"):
            r["measured_over_predicted"] = r["state_bytes"]["total"] / pred["total"]
    fsdp["export"] = ranks[0]["export"]
    return fsdp, ranks[0]["checkpoint"] | {"ranks_restored": [r["checkpoint"].get("restored") for r in ranks]}


# -- chunked loss ------------------------------------------------------------------------------------
def chunked_loss(c: dict[str, int], cuda: bool, tmp: Path) -> dict[str, Any]:
    why = missing("workbench_local.training.chunked_logprobs")
    if why:
        return {"status": why}
    import torch
    from workbench_local.training.trainer import Trainer, TrainerConfig

    save_llama(tmp / "chunk-base", c, "cuda" if cuda else "cpu", torch.bfloat16 if cuda else torch.float32)
    sample = long_sample(c["tokens"], c["vocab"], prompt=min(1024, c["tokens"] // 4))
    out: dict[str, Any] = {"status": "ran", "tokens": c["tokens"], "vocab": c["vocab"], "runs": []}
    for chunk in (c["chunk"], 0):
        table = {"model": str(tmp / "chunk-base"), "lora": True, "dtype": "bfloat16" if cuda else "float32",
                 "device": "cuda" if cuda else "cpu", "micro_batch_tokens": c["tokens"] + 8,
                 "loss_chunk_tokens": chunk, "gradient_checkpointing": True, "shared_prefix": False}
        run: dict[str, Any] = {"loss_chunk_tokens": chunk}
        try:
            trainer = Trainer(TrainerConfig.from_dict(table), loss="ce")  # the loss is the mean NLL
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            res = trainer.step([sample])
            _sync(cuda)
            run.update(step_s=time.perf_counter() - t0, loss=res.metrics.get("loss"), skipped=res.reason)
            if cuda:
                run["peak_bytes"] = torch.cuda.max_memory_allocated()
                run["peak_above_start_bytes"] = run["peak_bytes"] - start
            else:
                run["peak_bytes"] = None  # CPU peaks: scripts/bench_long_context.py
            del trainer
        except torch.cuda.OutOfMemoryError as e:
            run["out_of_memory"] = str(e).splitlines()[0][:160]
        if cuda:
            torch.cuda.empty_cache()
        out["runs"].append(run)
    a, b = out["runs"]
    if a.get("peak_above_start_bytes") and b.get("peak_above_start_bytes"):
        out["unchunked_over_chunked_peak"] = b["peak_above_start_bytes"] / a["peak_above_start_bytes"]
    if a.get("loss") is not None and b.get("loss") is not None:
        out["loss_abs_diff"] = abs(a["loss"] - b["loss"])
    return out


# -- context parallel --------------------------------------------------------------------------------
def cp_table(model_dir: str, c: dict[str, int], cuda: bool, cp: int) -> dict[str, Any]:
    """The trainer of the section: full fine-tuning, FSDP over every rank (bf16 compute over fp32 shards
    on CUDA), one sequence of ``c["tokens"]`` in one micro-batch, no clipping (the norm is compared)."""
    return {"model": model_dir, "lora": False, "sharding": "fsdp", "dtype": "auto" if cuda else "float32",
            "device": "cuda" if cuda else "cpu", "lr": 1e-4, "max_grad_norm": 0.0, "shared_prefix": False,
            "micro_batch_tokens": c["tokens"] + 8, "context_parallel": cp, "ranks": cp}


def cp_measure(model_dir: str, c: dict[str, int], cuda: bool, cp: int) -> dict[str, Any]:
    """One Trainer with ``context_parallel = cp`` (every rank of the group): on CUDA its ``step`` (the
    ring's forward and backward), on a CPU its ``evaluate`` (forward only: the ring's backward needs
    CUDA); the loss, the gradient norm, the time and the peak CUDA memory."""
    import torch
    from workbench_local.training.trainer import Trainer, TrainerConfig

    trainer = Trainer(TrainerConfig.from_dict(cp_table(model_dir, c, cuda, cp)), loss="ce")  # the mean NLL
    sample = long_sample(c["tokens"], c["vocab"], prompt=min(1024, c["tokens"] // 4))
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    if cuda:
        res = trainer.step([sample])
        metrics, skipped = res.metrics, res.reason
    else:
        metrics, skipped = trainer.evaluate([sample]), None
    _sync(cuda)
    out = {"step_s" if cuda else "evaluate_s": time.perf_counter() - t0, "loss": metrics.get("loss"),
           "grad_norm": metrics.get("grad_norm"), "skipped": skipped,
           "peak_cuda_bytes": torch.cuda.max_memory_allocated() if cuda else None}
    del trainer
    if cuda:
        torch.cuda.empty_cache()
    return out


def cp_rank(rank: int, world: int, model_dir: str, c: dict[str, int], cuda: bool) -> dict[str, Any]:
    """One rank of a group of ``world`` splitting each sequence ``world`` ways (1: the whole sequence)."""
    faulthandler.dump_traceback_later(RANK_TIMEOUT_S, exit=True)
    res = {"rank": rank, **cp_measure(model_dir, c, cuda, world)}
    faulthandler.cancel_dump_traceback_later()
    return res


def context_parallel(c: dict[str, int], cuda: bool, world: int, tmp: Path) -> dict[str, Any]:
    """The Trainer with ``context_parallel`` = every GPU against the same Trainer on one GPU."""
    why = missing("workbench_local.training.context_parallel", "workbench_local.training.cp_step")
    if why:
        return {"status": why}
    if world < 2:
        return {"status": f"not available: context parallelism needs at least 2 GPUs; this machine has {world}"}
    import torch
    from workbench_local.training.distributed import launch

    model_dir = tmp / "cp-base"
    try:
        save_llama(model_dir, c, "cuda" if cuda else "cpu", torch.bfloat16 if cuda else torch.float32)
        # one process in a group of one: FSDP with the same mixed precision as the split run
        one = launch(cp_rank, 1, str(model_dir), c, cuda, backend="nccl" if cuda else "gloo",
                     threads_per_rank=None if cuda else 1)[0]
        ranks = launch(cp_rank, world, str(model_dir), c, cuda, backend="nccl" if cuda else "gloo",
                       threads_per_rank=None if cuda else 1)
    except Exception as e:
        return {"status": failed(e)}
    for r in ranks:
        r["loss_abs_diff"] = abs(r["loss"] - one["loss"]) if r["loss"] is not None and one["loss"] is not None \
            else None
        if cuda and r["grad_norm"] is not None and one["grad_norm"]:
            r["grad_norm_rel_diff"] = abs(r["grad_norm"] - one["grad_norm"]) / one["grad_norm"]
    note = ("the Trainer's step: CUDA ring attention (torch's SDPA ring), forward and backward, FSDP over every "
            "GPU" if cuda else "CPU: the Trainer's evaluate, torch's ring algorithm with the CPU kernel, forward "
            "only (the ring's backward needs CUDA)")
    status = "ran" if all(r["skipped"] is None for r in ranks) else f"failed: step skipped ({ranks[0]['skipped']})"
    return {"status": status, "cp": world, "tokens": c["tokens"], "what": note, "one_process": one, "ranks": ranks}


# -- the weight update into vLLM -----------------------------------------------------------------------
def vllm_update(base: Path | None, trained: Path | None, cuda: bool) -> dict[str, Any]:
    if importlib.util.find_spec("vllm") is None:
        return {"status": "skipped: vLLM is not installed"}
    if not cuda:
        return {"status": "skipped: the vLLM check runs on CUDA only"}
    if base is None or trained is None:
        return {"status": "skipped: no exported weights from the fsdp section"}
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        served = base.parent / "vllm-served"
        shutil.copytree(base, served, dirs_exist_ok=True)
        llm = LLM(model=str(served), skip_tokenizer_init=True, dtype="bfloat16", enforce_eager=True,
                  gpu_memory_utilization=0.5)
        prompt = TokensPrompt(prompt_token_ids=list(range(3, 35)))
        greedy = SamplingParams(max_tokens=16, temperature=0.0, detokenize=False)

        def tokens() -> list[int]:
            return list(llm.generate([prompt], greedy)[0].outputs[0].token_ids)

        before = tokens()
        t0 = time.perf_counter()
        # The call the Modal gate makes (cloud_runtime/vllm_weights.py): without weights_path
        # vLLM would re-read the files it started from.
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(trained), "is_checkpoint_format": True})
        reload_s = time.perf_counter() - t0
        after = tokens()
        return {"status": "ran", "reload_s": reload_s, "tokens_before": before, "tokens_after": after,
                "changed": before != after}
    except Exception as e:
        return {"status": failed(e)}


__all__ = ["SECTIONS", "SIZES", "chunked_loss", "context_parallel", "fsdp_and_checkpoint", "vllm_update"]
