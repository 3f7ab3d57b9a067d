"""Benchmark FSDP2 sharding (``[trainer] sharding = "fsdp"``): the training state one rank holds, and its
peak process memory, for 1, 2, 4... ranks on CPU over gloo.

    python scripts/bench_sharding.py [--ranks 1,2,4] [--model-size default|small|tiny] [--layers N]
                                     [--samples 4] [--seq 48] [--json]

A random Qwen2-style decoder is built from a config (no download; ``default`` is about 260M parameters
with a 32K vocabulary and tied embeddings), saved with ``save_pretrained`` and loaded by the trainer
through ``from_pretrained`` as any model is. For each rank count, that many processes (gloo, 127.0.0.1)
each build a Trainer (full fine-tuning, ``sharding = "fsdp"``, AdamW, the cross-entropy loss of the
completions) and take one optimizer step on the same batch. Each rank reports its parameter, gradient and optimizer bytes, measured on the sharded
tensors themselves (``DTensor.to_local()``, after the optimizer step, gradients still held), its peak
resident memory (``ru_maxrss``, which includes loading the whole checkpoint before sharding), and the
step's loss. The bytes the plan's formula (``workbench.training.memory``) expects for the rank are
printed next to the measured ones.

The output ends with one JSON line ``{"runs": [{"ranks": N, "state_bytes_per_rank": B,
"peak_rss_bytes": P, "loss": L}, ...]}`` (B and P of the most loaded rank). For full fine-tuning the
state per rank is about 1/N of one rank's; the losses agree to float rounding.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: name -> (hidden, intermediate, default layers, heads, kv heads, vocab)
SIZES: dict[str, tuple[int, int, int, int, int, int]] = {
    "default": (1024, 2816, 20, 16, 4, 32000),  # ~260M parameters
    "small": (512, 1408, 8, 8, 2, 16000),  # ~30M
    "tiny": (64, 128, 2, 4, 2, 300),
}


def build_model(path: Path, size: str, layers: int | None) -> int:
    """A random Qwen2 decoder of ``size`` saved at ``path``; its parameter count."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    hidden, inter, n_layers, heads, kv, vocab = SIZES[size]
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers or n_layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                      max_position_embeddings=4096, tie_word_embeddings=True, pad_token_id=0)
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(str(path), safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def make_samples(n: int, seq: int, vocab: int) -> list[Any]:
    """``n`` samples of ``seq`` tokens in groups of two sharing the first half (their prompt)."""
    from workbench.training.algorithms import TrainSample

    rng = random.Random(0)
    out = []
    half = seq // 2
    prompt: list[int] = []
    for i in range(n):
        if i % 2 == 0:
            prompt = [rng.randrange(3, vocab) for _ in range(half)]
        ids = prompt + [rng.randrange(3, vocab) for _ in range(seq - half)]
        mask = [0] * half + [1] * (seq - half)
        lps = [-rng.uniform(1.0, 6.0) if m else 0.0 for m in mask]
        adv = 1.0 if i % 2 == 0 else -1.0
        out.append(TrainSample(ids, mask, lps, [adv if m else 0.0 for m in mask], policy_version=0,
                               rollout_id=f"r{i}", group_id=f"g{i // 2}"))
    return out


def expected_bytes(shapes: list[tuple[tuple[int, ...], bool]], world: int, rank: int) -> dict[str, int]:
    """What the plan's formula (``workbench.training.memory``) expects this rank to hold."""
    from workbench.training.memory import state_bytes_per_rank

    return state_bytes_per_rank(shapes, world, sharding="fsdp", param_bytes=4, grad_bytes=4, rank=rank).to_dict()


def _rank(rank: int, world: int, model: str, n_samples: int, seq: int, vocab: int) -> dict[str, Any]:
    import resource

    from workbench_local.training.trainer import Trainer, TrainerConfig

    cfg = TrainerConfig(model=model, lora=False, sharding="fsdp", lr=1e-5, micro_batch_tokens=max(2, seq * 2),
                        max_grad_norm=1.0)
    trainer = Trainer(cfg, loss="ce")  # cross-entropy of the completions: a loss far from zero to compare
    t0 = time.perf_counter()
    result = trainer.step(make_samples(n_samples, seq, vocab))
    step_s = time.perf_counter() - t0
    shapes = [(tuple(p.shape), p.requires_grad) for p in trainer.model.parameters()]
    return {"rank": rank, "state": trainer.state_bytes, "expected": expected_bytes(shapes, world, rank),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "loss": result.metrics.get("loss"), "skipped": result.skipped, "step_s": step_s}


def _gib(n: float) -> str:
    return f"{n / 2**30:.3f} GiB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--ranks", default="1,2,4", help="comma-separated rank counts (default 1,2,4)")
    ap.add_argument("--model-size", choices=sorted(SIZES), default="default")
    ap.add_argument("--layers", type=int, default=None, help="decoder layers (default: the size's own)")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--seq", type=int, default=48, help="tokens per sample")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the runs")
    args = ap.parse_args(argv)
    try:
        rank_counts = [int(r) for r in args.ranks.split(",") if r.strip()]
    except ValueError:
        ap.error(f"--ranks must be comma-separated whole numbers, not {args.ranks!r}")
    if not rank_counts or min(rank_counts) < 1:
        ap.error("--ranks needs at least one rank count, each at least 1")
    if args.layers is not None and args.layers < 1:
        ap.error("--layers must be at least 1")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every packet on the loopback interface
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    from workbench_local.training.distributed import launch

    vocab = SIZES[args.model_size][5]
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wb-bench-sharding-") as tmp:
        path = Path(tmp) / "model"
        n_params = build_model(path, args.model_size, args.layers)
        print(f"model: Qwen2 {args.model_size}, {n_params / 1e6:.1f}M parameters (float32, full fine-tuning, "
              f"AdamW), {args.samples} samples x {args.seq} tokens; cpu count {os.cpu_count()}", flush=True)
        base: dict[str, Any] | None = None
        for n in rank_counts:
            threads = max(1, (os.cpu_count() or 1) // n)
            ranks = launch(_rank, n, str(path), args.samples, args.seq, vocab, backend="gloo", threads_per_rank=threads)
            state = max(r["state"]["total"] for r in ranks)
            peak = max(r["peak_rss_bytes"] for r in ranks)
            run = {"ranks": n, "state_bytes_per_rank": state, "peak_rss_bytes": peak, "loss": ranks[0]["loss"]}
            base = base or run
            print(f"\n{n} rank(s): loss {ranks[0]['loss']:.6f}, step {max(r['step_s'] for r in ranks):.1f} s")
            for r in ranks:
                s, e = r["state"], r["expected"]
                formula = f"  (formula: {_gib(e['total'])})"
                print(f"  rank {r['rank']}: params {_gib(s['params'])}, grads {_gib(s['grads'])}, optimizer "
                      f"{_gib(s['optimizer'])}, total {_gib(s['total'])}{formula}; peak RSS {_gib(r['peak_rss_bytes'])}")
            print(f"  vs {base['ranks']} rank(s): state {state / base['state_bytes_per_rank']:.3f}x, "
                  f"peak RSS {peak / base['peak_rss_bytes']:.3f}x, "
                  f"loss difference {abs(run['loss'] - base['loss']):.2e}", flush=True)
            runs.append(run)
    if args.json:
        print(json.dumps({"runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
