"""Benchmark the trainer: tokens/s of optimizer steps on CPU: LoRA with shared-prefix packing, LoRA with
one row per sample (``trainer.shared_prefix = false``, the baseline), and full fine-tuning.

    python scripts/bench_trainer.py [--model PATH|tiny] [--hidden 64 --layers 2 --vocab 300]
                                    [--samples 16] [--group-size 8] [--seq 128] [--prompt-share 0.5]
                                    [--steps 5] [--micro-batch-tokens 1024] [--threads N] [--json]

Without ``--model`` a random Llama of the given size is built with ``save_pretrained`` into a
temporary directory (the test suite's tiny model by default) and loaded through ``from_pretrained``
as any model is. Samples come in groups of ``--group-size`` that share their prompt (``--prompt-share``
of the longest sample) as a group's rollouts do; 1 makes every sample its own group. Each mode runs one
warm-up step and then ``--steps`` timed steps (interleaved) of the importance-ratio policy-gradient
loss; tokens/s counts every real (unpadded) token of the samples, so shared-prefix packing, which runs
each prompt once per row, shows as more tokens/s. It prints the speed-up of shared-prefix packing over
one row per sample, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build_random_model(path: Path, hidden: int, layers: int, vocab: int) -> str:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    heads = max(1, hidden // 16)
    cfg = LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=heads, intermediate_size=hidden * 2, vocab_size=vocab,
                      max_position_embeddings=4096)
    LlamaForCausalLM(cfg).save_pretrained(str(path), safe_serialization=True)
    return str(path)


def samples(n: int, seq: int, vocab: int, group_size: int = 1, prompt_share: float = 0.5,
            seed: int = 0) -> list[Any]:
    """``n`` samples in groups of ``group_size`` with a common prompt of ``prompt_share * seq`` tokens
    and completions that fill each sample to between ``seq // 2`` and ``seq`` tokens."""
    from workbench.training.algorithms import TrainSample

    rng = random.Random(seed)
    out = []
    p = max(1, int(seq * prompt_share))
    prompt: list[int] = []
    for i in range(n):
        if i % max(1, group_size) == 0:
            prompt = [rng.randrange(3, vocab) for _ in range(p)]
        length = max(p + 1, rng.randint(seq // 2, seq))
        ids = prompt + [rng.randrange(3, vocab) for _ in range(length - p)]
        mask = [0] * p + [1] * (length - p)
        lps = [0.0] * p + [-rng.uniform(2.0, 6.0) for _ in range(length - p)]
        adv = 1.0 if i % 2 else -1.0
        out.append(TrainSample(ids, mask, lps, [adv * m for m in mask], rollout_id=f"r{i}",
                               group_id=f"g{i // max(1, group_size)}"))
    return out


MODES = {"lora": {"lora": True}, "lora-per-sample": {"lora": True, "shared_prefix": False}, "full": {"lora": False}}


def bench(model: str, batch: list[Any], steps: int, mbt: int) -> list[dict[str, Any]]:
    """LoRA and full fine-tuning, their timed steps interleaved so that load from other processes
    on the machine falls on both alike."""
    from workbench_local.training.trainer import Trainer, TrainerConfig

    runs: dict[str, dict[str, Any]] = {}
    for mode, opts in MODES.items():
        t0 = time.perf_counter()
        trainer = Trainer(TrainerConfig(model=model, micro_batch_tokens=mbt, lr=1e-4, **opts), loss="pg")
        runs[mode] = {"trainer": trainer, "load_s": time.perf_counter() - t0, "rates": [], "times": []}
        trainer.step(batch)  # warm-up
    last: dict[str, Any] = {}
    for _ in range(steps):
        for mode, run in runs.items():
            res = run["trainer"].step(batch)
            run["rates"].append(res.metrics["tokens_per_s"])
            run["times"].append(res.metrics["step_time_s"])
            last[mode] = res.metrics
    out = []
    for mode, run in runs.items():
        t = run["trainer"]
        out.append({"mode": mode, "tokens_per_s": statistics.median(run["rates"]), "best_tokens_per_s": max(run["rates"]),
                    "step_time_s": statistics.median(run["times"]), "tokens_per_step": last[mode]["tokens"],
                    "packed_tokens_per_step": last[mode]["packed_tokens"],
                    "micro_batches": last[mode]["micro_batches"], "trainable_params": sum(p.numel() for p in t.params),
                    "total_params": sum(p.numel() for p in t.model.parameters()), "load_s": run["load_s"]})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a save_pretrained directory, 'tiny', or a cached Hugging Face id")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8, help="samples per group sharing a prompt (1: none)")
    ap.add_argument("--prompt-share", type=float, default=0.5, help="the shared prompt, as a share of --seq")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--micro-batch-tokens", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    with tempfile.TemporaryDirectory(prefix="wb-bench-trainer-") as tmp:
        model = a.model or build_random_model(Path(tmp) / "model", a.hidden, a.layers, a.vocab)
        vocab = a.vocab
        if a.model:
            from transformers import AutoConfig
            from workbench_local.models.loading import resolve

            vocab = AutoConfig.from_pretrained(resolve(a.model)[0]).vocab_size
        batch = samples(a.samples, a.seq, vocab, a.group_size, a.prompt_share)
        results = bench(model, batch, a.steps, a.micro_batch_tokens)
    by = {r["mode"]: r for r in results}
    speedup = by["lora-per-sample"]["step_time_s"] / by["lora"]["step_time_s"]
    info = {"model": a.model or f"random llama h{a.hidden} l{a.layers} v{a.vocab}", "threads": torch.get_num_threads(),
            "samples": a.samples, "group_size": a.group_size, "seq": a.seq, "results": results,
            "shared_prefix_speedup": round(speedup, 2)}
    if a.json:
        print(json.dumps(info))
    else:
        print(f"model: {info['model']}, {a.samples} samples of <= {a.seq} tokens in groups of {a.group_size}, "
              f"{torch.get_num_threads()} threads")
        for r in results:
            print(f"  {r['mode']:>15}: {r['tokens_per_s']:9.0f} tokens/s (best {r['best_tokens_per_s']:.0f}), "
                  f"{r['step_time_s'] * 1000:7.1f} ms/step, {r['tokens_per_step']:.0f} tokens ({r['packed_tokens_per_step']:.0f}"
                  f" run) in {r['micro_batches']:.0f} micro-batches, {r['trainable_params']:,}/{r['total_params']:,} "
                  "params trained")
        print(f"shared-prefix packing: {speedup:.2f}x the speed of one row per sample (median step times)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
