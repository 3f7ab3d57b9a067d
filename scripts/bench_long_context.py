"""Benchmark the memory of one training step on a long sequence, with and without chunked logprobs.

    python scripts/bench_long_context.py [--tokens 4096,16384,65536] [--vocab 32768] [--hidden 64]
                                         [--layers 2] [--chunk 1024] [--json]

For each sequence length, one training step (forward and backward of the trainer's policy-gradient
loss, through ``PolicyForward`` as the trainer runs it) of a full fine-tune of a small Qwen2 built from
a config on CPU (SDPA attention, so attention keeps no ``tokens × tokens`` matrix), on one sequence
of that many tokens: once with ``loss_chunk_tokens = --chunk`` and once with ``0`` (the whole
``[tokens × vocab]`` logits), each in a fresh process so neither sees the other's memory.

Memory is the process's resident set (Linux ``VmHWM``, the peak RSS): the child builds the model and
the batch, runs a short warm-up step, resets the peak (``/proc/self/clear_refs``), runs the step and
reads the peak. ``peak_bytes`` is that peak minus the resident set just before the step (the
process baseline: the interpreter, torch, the model and the batch); ``rss_peak_bytes`` is the peak
itself. The model is small (≈ 4.3M parameters at the defaults) so the logits dominate: at 16,384
tokens and 32,768 words one fp32 copy of the logits is 2 GiB. An unchunked step whose logits would
not fit in the memory the machine has free (four fp32 copies of them) is skipped with its reason.

The last line of ``--json`` is ``{"runs": [{"tokens": T, "chunked": true|false, "peak_bytes": P,
...}, ...], "skipped": [...]}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# fp32 [tokens × vocab] tensors alive at once in an unchunked step, at least (logits, exp, softmax, gradient);
# measured: about 5 (10.2 GiB at 16,384 × 32,768)
LOGIT_COPIES = 4


def status_bytes(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``, ``VmHWM``) in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def build(tokens: int, args: argparse.Namespace) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=args.hidden * 2, vocab_size=args.vocab,
                      max_position_embeddings=max(tokens, 64), tie_word_embeddings=False,
                      attn_implementation="sdpa")
    return Qwen2ForCausalLM(cfg).float().train()


def batch(tokens: int, vocab: int) -> Any:
    import math
    import random

    from workbench_local.training.packing import collate

    from workbench.training.algorithms import TrainSample

    rng = random.Random(tokens)
    prompt = min(64, tokens // 4)
    ids = [rng.randrange(3, vocab) for _ in range(tokens)]
    mask = [0] * prompt + [1] * (tokens - prompt)
    # inference logprobs near the random model's (about -log vocab), so the trust region keeps every token
    sample = TrainSample(ids, mask, [-math.log(vocab) + rng.uniform(-0.5, 0.5) if m else 0.0 for m in mask],
                         [rng.choice((-1.0, 1.0)) if m else 0.0 for m in mask])
    return collate([sample], tokens, 0, "cpu")


def step(policy: Any, mb: Any) -> float:
    """One forward and backward of the trainer's policy-gradient loss (``Trainer._forward``)."""
    from workbench_local.training.losses import LossBatch, build_loss, token_weights

    n_loss = float(mb.n_loss_tokens)
    policy.model.zero_grad(set_to_none=True)
    logprobs, _ = policy(mb)
    weights = token_weights(mb.loss_mask, "token", n_loss, 1.0)
    value, _ = build_loss("pg")(LossBatch(logprobs, mb.inference_logprobs, mb.advantages, mb.loss_mask, weights,
                                          mb.loss_mask.float() / n_loss))
    value.backward()
    return float(value.detach())


def child(args: argparse.Namespace) -> None:
    import gc

    from workbench_local.training.policy import PolicyForward

    tokens = int(args.tokens)
    model = build(tokens, args)
    policy = PolicyForward(model, loss_chunk_tokens=args.chunk if args.chunked else 0)
    step(policy, batch(64, args.vocab))  # warm-up: kernels, thread pools, the allocator's first arenas
    mb = batch(tokens, args.vocab)
    model.zero_grad(set_to_none=True)
    gc.collect()
    baseline = status_bytes("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from the current RSS
    t0 = time.perf_counter()
    loss = step(policy, mb)
    seconds = time.perf_counter() - t0
    peak = status_bytes("VmHWM")
    print(json.dumps({"tokens": tokens, "chunked": bool(args.chunked), "peak_bytes": peak - baseline,
                      "rss_peak_bytes": peak, "baseline_bytes": baseline, "loss": loss,
                      "seconds": round(seconds, 2)}))


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", default="4096,16384,65536", help="comma-separated sequence lengths")
    p.add_argument("--vocab", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--chunk", type=int, default=1024, help="loss_chunk_tokens of the chunked step")
    p.add_argument("--json", action="store_true", help="end with one JSON line of every run")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--chunked", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    lengths = [int(t) for t in args.tokens.split(",") if t.strip()]
    if not lengths or min(lengths) < 128 or args.vocab < 1024 or args.chunk < 1:
        print("--tokens must be lengths of at least 128, --vocab at least 1024, --chunk at least 1", file=sys.stderr)
        return 2
    print(f"one training step (forward + backward of the pg loss), Qwen2 {args.layers} layers, hidden "
          f"{args.hidden}, vocab {args.vocab}, full fine-tuning, fp32 on CPU, SDPA attention; chunked = "
          f"loss_chunk_tokens {args.chunk}; peak = peak RSS (VmHWM) of the step's own fresh process minus "
          f"its RSS just before the step (its baseline)")
    runs: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for tokens in lengths:
        for chunked in (True, False):
            need = LOGIT_COPIES * tokens * args.vocab * 4
            if not chunked and need > 0.8 * available_bytes():
                reason = (f"the unchunked step needs at least {gib(need)} ({LOGIT_COPIES} fp32 copies of the "
                          f"{tokens} x {args.vocab} logits) and the machine has {gib(available_bytes())} free")
                print(f"tokens {tokens:>6}  unchunked  skipped: {reason}")
                skipped.append({"tokens": tokens, "chunked": False, "reason": reason})
                continue
            cmd = [sys.executable, __file__, "--child", "--tokens", str(tokens), "--chunked", str(int(chunked)),
                   "--vocab", str(args.vocab), "--hidden", str(args.hidden), "--layers", str(args.layers),
                   "--chunk", str(args.chunk)]
            done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            if done.returncode != 0:
                reason = f"the step's process exited with {done.returncode}: {done.stderr.strip()[-300:]}"
                print(f"tokens {tokens:>6}  {'chunked' if chunked else 'unchunked'}  failed: {reason}")
                skipped.append({"tokens": tokens, "chunked": chunked, "reason": reason})
                continue
            run = json.loads(done.stdout.strip().splitlines()[-1])
            runs.append(run)
            print(f"tokens {tokens:>6}  {'chunked  ' if chunked else 'unchunked'}  step peak {gib(run['peak_bytes'])}"
                  f"  (process peak {gib(run['rss_peak_bytes'])}, baseline {gib(run['baseline_bytes'])})"
                  f"  loss {run['loss']:.6f}  {run['seconds']:.1f} s")
        pair = {r["chunked"]: r for r in runs if r["tokens"] == tokens}
        if True in pair and False in pair:
            print(f"tokens {tokens:>6}  unchunked / chunked step peak: "
                  f"{pair[False]['peak_bytes'] / max(pair[True]['peak_bytes'], 1):.1f}x, loss difference "
                  f"{abs(pair[False]['loss'] - pair[True]['loss']):.2e}")
    chunked_runs = [r for r in runs if r["chunked"]]
    if len(chunked_runs) > 1:
        first, last = chunked_runs[0], chunked_runs[-1]
        print(f"chunked step peak from {first['tokens']} to {last['tokens']} tokens "
              f"({last['tokens'] / first['tokens']:.0f}x the sequence): {last['peak_bytes'] / first['peak_bytes']:.1f}x")
    if args.json:
        print(json.dumps({"runs": runs, "skipped": skipped}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
