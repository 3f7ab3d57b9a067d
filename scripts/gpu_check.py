"""Check the local trainer's CUDA path end to end and print tokens/s.

    python scripts/gpu_check.py [--device cuda|cuda:N|cpu] [--size default|small] [--steps N] [--json]
        [--phases lora,full,serve|all|none] [--sections fsdp,checkpoint,chunked_loss,context_parallel,vllm_update|all|none]
        [--hidden --layers --heads --intermediate --vocab --samples --seq --micro-batch-tokens --gen-batch --gen-tokens]

A random Llama-architecture causal LM (about 330M parameters at ``--size default``) is built from a
``LlamaConfig`` on the device, saved with ``save_pretrained`` next to a word-level tokenizer of the same
vocabulary size, and then loaded only through the repo's own code:

1. ``lora``: a :class:`Trainer` from a ``[trainer]`` table (LoRA r16, all-linear) takes one warm-up and
   ``--steps`` timed policy-gradient steps on synthetic token batches; train tokens/s, then the adapter
   is saved as the training worker saves it (``save_adapter``).
2. ``full``: the same for full fine-tuning; the saved full weights are what the worker publishes.
3. ``serve``: the embedded server (``workbench_local.server.serve.build`` and ``serve``) runs in this
   process on the device with the saved base model; the full weights go in through ``/update_weights``
   and the adapter through ``/v1/load_lora_adapter`` (the worker's own ``_post``), and after each one
   batched ``/v1/completions`` request (``ignore_eos``, a fixed length) measures generated tokens/s.

Then the sharded-training sections (``gpu_check_sections.py``; ``--sections`` picks them, ``--phases``
the three above):

4. ``fsdp``: ``sharding = "fsdp"`` full fine-tuning on every GPU of the machine (nccl, bf16 compute over
   fp32 shards), one step of a ~3.6B-parameter Llama built from a config; per rank the training-state
   bytes measured from the shards against ``workbench.training.memory.state_bytes_per_rank``, and peak
   CUDA memory.
5. ``checkpoint``: a sharded (DCP) ``save_checkpoint`` / ``load_checkpoint`` round trip in those ranks.
6. ``chunked_loss``: one 32K-token sequence (128K vocabulary) with ``loss_chunk_tokens`` and without:
   peak CUDA memory of each.
7. ``context_parallel``: the Trainer's step with ``context_parallel`` = every GPU (torch's CUDA ring
   attention, forward and backward) against the same step on one GPU: loss and gradient norm (needs at
   least 2 GPUs).
8. ``vllm_update``: the FSDP run's exported weights into vLLM through ``reload_weights`` (skipped, with the
   reason, when vLLM is not installed).

Each section ends as ``ran``, ``skipped: <why>``, ``not available: <why>`` (its building block does not
import) or ``failed: <why>``, under ``"sections"`` in the summary; none of them stops the others.

Every phase is timed between ``torch.cuda.synchronize`` calls. Without CUDA the script refuses (exit 2, one
line) unless ``--device cpu`` is given; ``--device cpu --size small`` is a quick smoke test on a tiny config
(the sections on 2 gloo processes; context parallelism forward only). The last line is a JSON summary
naming the device that ran (``torch.cuda.get_device_name``), torch and CUDA; ``gpu_ran`` is true only when
CUDA ran something.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gpu_check_sections as sections  # noqa: E402 (the sharded-training sections)
from bench_trainer import samples  # noqa: E402 (synthetic TrainSample batches)

SIZES: dict[str, dict[str, int]] = {
    "default": {"hidden": 1024, "layers": 16, "heads": 16, "intermediate": 4096, "vocab": 32000, "samples": 32,
                "seq": 1024, "micro_batch_tokens": 8192, "gen_batch": 8, "gen_tokens": 128},
    "small": {"hidden": 64, "layers": 2, "heads": 4, "intermediate": 128, "vocab": 512, "samples": 4,
              "seq": 64, "micro_batch_tokens": 256, "gen_batch": 2, "gen_tokens": 8},
}
SERVED = "gpu-check"
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def timed(device: str, fn: Any, *args: Any, **kw: Any) -> tuple[Any, float]:
    """``fn(*args, **kw)`` and its wall time, with the device synchronized before and after."""
    import torch

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    if cuda:
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - t0


def peak_gib(device: str, reset: bool = False) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats(device)
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def build_model(path: Path, a: argparse.Namespace, device: str, dtype: Any) -> int:
    """A random Llama built on ``device`` in ``dtype`` and a word-level tokenizer of exactly ``a.vocab``
    entries, both saved into ``path``; returns the parameter count."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # save_pretrained's shard bars

    vocab = {t: i for i, t in enumerate(SPECIALS + [f"w{i}" for i in range(a.vocab - len(SPECIALS))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                     unk_token="<unk>")
    hf_tok.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    assert len(hf_tok) == a.vocab, (len(hf_tok), a.vocab)
    hf_tok.save_pretrained(str(path))
    cfg = LlamaConfig(hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      num_key_value_heads=a.heads, intermediate_size=a.intermediate, vocab_size=a.vocab,
                      max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype)
    model.save_pretrained(str(path), safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    del model
    return n


def train_phase(mode: str, model: str, a: argparse.Namespace, device: str, dtype: str, out: Path) -> dict[str, Any]:
    """``--steps`` timed optimizer steps of the repo's Trainer, then its weights saved for publishing."""
    import torch
    from workbench_local.training.losses import build_loss
    from workbench_local.training.trainer import Trainer, TrainerConfig

    table = {"model": model, "lora": mode == "lora", "lora_rank": 16, "lora_alpha": 32.0,
             "target_modules": "all-linear", "lr": 1e-5, "dtype": dtype, "device": device,
             "micro_batch_tokens": a.micro_batch_tokens}
    peak_gib(device, reset=True)
    trainer, load_s = timed(device, Trainer, TrainerConfig.from_dict(table), loss=build_loss("pg"))
    batch = samples(a.samples, a.seq, a.vocab)
    trainer.step(batch)  # warm-up (kernels, allocator, optimizer state)
    rates, times, last = [], [], {}
    for _ in range(a.steps):
        res, dt = timed(device, trainer.step, batch)
        if res.skipped:
            raise RuntimeError(f"{mode} step skipped: {res.reason}")
        times.append(dt)
        rates.append(res.metrics["tokens"] / dt)
        last = res.metrics
    from workbench_local.training.worker import adapter_name

    kind = "adapters" if mode == "lora" else "weights"  # the run directory's layout (TrainLoop._publish)
    saved, save_s = timed(device, trainer.save_adapter, out / kind / adapter_name(trainer.step_count))
    info = {"tokens_per_s": statistics.median(rates), "best_tokens_per_s": max(rates),
            "step_time_s": statistics.median(times), "tokens_per_step": last["tokens"],
            "micro_batches": last["micro_batches"], "loss": last.get("loss"),
            "trainable_params": sum(p.numel() for p in trainer.params), "load_s": load_s, "save_s": save_s,
            "peak_gib": peak_gib(device), "step": trainer.step_count, "saved": str(saved)}
    del trainer
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return info


class Server:
    """The embedded server (``serve.build`` + ``serve.serve``) on an event loop in a background thread."""

    def __init__(self, model: str, device: str, dtype: str, threads: int, max_batch: int, ready: Path) -> None:
        from workbench_local.server import serve

        self.args = serve.build_parser().parse_args(
            ["--model", model, "--served-model-name", SERVED, "--device", device, "--dtype", dtype, "--port", "0",
             "--threads", str(threads), "--max-batch", str(max_batch), "--ready-file", str(ready)])
        app = serve.build(self.args)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="gpu-check-server")
        self.thread.start()
        self.stop = asyncio.Event()
        self.done = asyncio.run_coroutine_threadsafe(self._host(serve.serve, app), self.loop)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.done.done():
                self.done.result()  # raises why it stopped
            if time.monotonic() > deadline:
                raise RuntimeError("the embedded server did not start listening within 60 s")
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{json.loads(ready.read_text())['port']}"

    async def _host(self, serve_fn: Any, app: Any) -> None:
        task = asyncio.create_task(serve_fn(app, self.args))
        stop = asyncio.create_task(self.stop.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return json.loads(r.read())

    def complete(self, model: str, prompts: list[list[int]], max_tokens: int) -> int:
        body = {"model": model, "prompt": prompts, "max_tokens": max_tokens, "temperature": 1.0, "seed": 0,
                "ignore_eos": True}
        req = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            return int(json.loads(r.read())["usage"]["completion_tokens"])

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        with contextlib.suppress(Exception):
            self.done.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)


def generate(server: Server, model: str, a: argparse.Namespace, device: str) -> dict[str, Any]:
    import random

    rng = random.Random(1)
    prompts = [[rng.randrange(len(SPECIALS), a.vocab) for _ in range(32)] for _ in range(a.gen_batch)]
    server.complete(model, prompts[:1], 2)  # warm-up
    n, dt = timed(device, server.complete, model, prompts, a.gen_tokens)
    return {"generated_tokens": n, "gen_s": dt, "gen_tokens_per_s": n / dt if dt > 0 else 0.0}


def serve_phase(base: str, lora: dict[str, Any] | None, full: dict[str, Any] | None, a: argparse.Namespace,
                device: str, dtype: str, tmp: Path) -> dict[str, Any]:
    """Start the server on the base model, publish the trained weights as the worker does, generate."""
    from workbench_local.training.worker import _post, adapter_name

    peak_gib(device, reset=True)
    server, load_s = timed(device, Server, base, device, dtype, a.threads, max(a.gen_batch, 1), tmp / "ready.json")
    out: dict[str, Any] = {"server_load_s": load_s}
    try:
        out["server_device"] = server.get("/health")["device"]
        if full is not None:
            _, out["update_weights_s"] = timed(device, _post, server.url, "/update_weights",
                                               {"weight_dir": full["saved"], "policy_version": full["step"]})
            out["full"] = generate(server, SERVED, a, device)
        if lora is not None:
            name = adapter_name(lora["step"])
            _, out["load_lora_adapter_s"] = timed(device, _post, server.url, "/v1/load_lora_adapter", {
                "lora_name": name, "lora_path": lora["saved"], "policy_version": lora["step"]})
            out["lora"] = generate(server, name, a, device)
            _post(server.url, "/v1/unload_lora_adapter", {"lora_name": name})
        out["server_policy_version"] = server.get("/health")["policy_version"]
        out["peak_gib"] = peak_gib(device)
    finally:
        server.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test; no GPU runs)")
    ap.add_argument("--size", choices=sorted(SIZES), default="default")
    for key in SIZES["default"]:
        ap.add_argument("--" + key.replace("_", "-"), type=int, default=None, help=f"overrides --size ({key})")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps per mode (after one warm-up)")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--json", action="store_true", help="print only the JSON summary line")
    ap.add_argument("--phases", default="all", help="lora,full,serve (comma-separated), all, or none")
    ap.add_argument("--sections", default="all",
                    help=f"{','.join(sections.SECTIONS)} (comma-separated), all, or none")
    a = ap.parse_args(argv)
    a.phases = _choose(ap, "--phases", a.phases, ("lora", "full", "serve"))
    a.sections = _choose(ap, "--sections", a.sections, sections.SECTIONS)
    for key, value in SIZES[a.size].items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.steps < 1 or a.vocab <= len(SPECIALS) or a.hidden % a.heads:
        ap.error("--steps must be at least 1, --vocab above 4, and --hidden a multiple of --heads")
    import torch

    device = a.device
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print(f"gpu_check: CUDA is not available (torch {torch.__version__}, built for CUDA {torch.version.cuda}); "
              "run on a machine with an NVIDIA GPU, or pass --device cpu for a smoke test", file=sys.stderr)
        return 2
    if a.threads:
        torch.set_num_threads(a.threads)
    a.threads = torch.get_num_threads()
    dtype = a.dtype or ("bfloat16" if cuda else "float32")
    say = (lambda msg: None) if a.json else (lambda msg: print(msg, flush=True))
    gpu = torch.cuda.get_device_name(device) if cuda else None
    summary: dict[str, Any] = {"device": device, "gpu": gpu, "gpu_ran": False, "torch": torch.__version__,
                               "cuda": torch.version.cuda, "dtype": dtype, "size": a.size, "steps": a.steps,
                               "phases": {}, "skipped": {}, "sections": {}}
    say(f"device: {gpu or 'cpu (no GPU used)'}; torch {torch.__version__}, CUDA {torch.version.cuda}, {dtype}")
    with tempfile.TemporaryDirectory(prefix="wb-gpu-check-") as tmp_s:
        tmp = Path(tmp_s)
        n, build_s = timed(device, build_model, tmp / "base", a, device, getattr(torch, dtype))
        summary["model"] = {"params": n, "build_s": build_s, **{k: getattr(a, k) for k in SIZES[a.size]}}
        say(f"model: random llama, {n / 1e6:.1f}M params (h{a.hidden} l{a.layers} a{a.heads} i{a.intermediate} "
            f"v{a.vocab}), built and saved in {build_s:.1f}s; batch {a.samples} samples of "
            f"<= {a.seq} tokens, micro-batches of {a.micro_batch_tokens} tokens")
        results: dict[str, dict[str, Any] | None] = {"lora": None, "full": None}
        for mode in ("lora", "full"):
            if mode not in a.phases:
                continue
            try:
                r = results[mode] = train_phase(mode, str(tmp / "base"), a, device, dtype, tmp)
            except torch.cuda.OutOfMemoryError as e:
                results[mode] = None
                torch.cuda.empty_cache()
                summary["skipped"][mode] = f"out of GPU memory ({str(e).splitlines()[0][:160]})"
                say(f"{mode:>8}: SKIPPED, {summary['skipped'][mode]}")
                continue
            summary["phases"][mode] = {k: v for k, v in r.items() if k != "saved"}  # a temporary path
            say(f"{mode:>8}: {r['tokens_per_s']:10.0f} train tokens/s (best {r['best_tokens_per_s']:.0f}), "
                f"{r['step_time_s'] * 1000:8.1f} ms/step, {r['tokens_per_step']:.0f} tokens in "
                f"{r['micro_batches']:.0f} micro-batches, {r['trainable_params']:,} trained, load {r['load_s']:.1f}s, "
                f"save {r['save_s']:.2f}s" + (f", peak {r['peak_gib']} GiB" if r["peak_gib"] is not None else ""))
        if "serve" not in a.phases:
            pass
        elif results["lora"] is None and results["full"] is None:
            summary["skipped"]["serve"] = "no trained weights to publish (both training phases were skipped)"
        else:
            s = summary["phases"]["serve"] = serve_phase(str(tmp / "base"), results["lora"], results["full"], a,
                                                         device, dtype, tmp)
            say(f"   serve: server up on {s['server_device']} in {s['server_load_s']:.1f}s; "
                + "; ".join(f"{k} {s[k]:.2f}s" for k in ("update_weights_s", "load_lora_adapter_s") if k in s))
            for mode in ("full", "lora"):
                if mode in s:
                    g = s[mode]
                    say(f"{'gen/' + mode:>8}: {g['gen_tokens_per_s']:10.1f} generated tokens/s ({g['generated_tokens']} "
                        f"tokens, {a.gen_batch} x {a.gen_tokens}, {g['gen_s']:.2f}s)")
        summary["sections"] = run_sections(a, cuda, tmp, say)
    ran = [k for k, v in summary["sections"].items() if v.get("status") == "ran"]
    summary["gpu_ran"] = cuda and bool(summary["phases"] or ran)
    print(json.dumps(summary, default=str), flush=True)
    return 0


def _choose(ap: argparse.ArgumentParser, flag: str, value: str, known: tuple[str, ...]) -> tuple[str, ...]:
    if value == "all":
        return known
    chosen = tuple(x for x in value.split(",") if x and x != "none")
    bad = [x for x in chosen if x not in known]
    if bad:
        ap.error(f"{flag}: unknown {', '.join(bad)}; choose from {', '.join(known)}, all or none")
    return chosen


def run_sections(a: argparse.Namespace, cuda: bool, tmp: Path, say: Any) -> dict[str, dict[str, Any]]:
    """The sharded-training sections (``gpu_check_sections.py``), each printed and summarised."""
    import torch

    sizes = sections.SIZES["small" if a.size == "small" else "default"]
    world = torch.cuda.device_count() if cuda else 2  # every GPU; 2 gloo processes on a CPU
    out: dict[str, dict[str, Any]] = {}
    if "fsdp" in a.sections or "checkpoint" in a.sections:
        fsdp, checkpoint = sections.fsdp_and_checkpoint(sizes["fsdp"], cuda, world, tmp)
        for name, result in (("fsdp", fsdp), ("checkpoint", checkpoint)):
            if name in a.sections:
                out[name] = result
    if "chunked_loss" in a.sections:
        out["chunked_loss"] = sections.chunked_loss(sizes["chunked_loss"], cuda, tmp)
    if "context_parallel" in a.sections:
        out["context_parallel"] = sections.context_parallel(sizes["context_parallel"], cuda, world, tmp)
    if "vllm_update" in a.sections:
        export = out.get("fsdp", {}).get("export", {})
        trained = Path(export["path"]) if export.get("status") == "ran" else None
        out["vllm_update"] = sections.vllm_update(tmp / "fsdp-base" if trained else None, trained, cuda)
    for name, result in out.items():
        figures = {k: v for k, v in result.items() if k not in ("status", "ranks", "runs")}
        say(f"{name:>16}: {result.get('status')}; {json.dumps(figures, default=str)}")
        for row in result.get("ranks", []) + result.get("runs", []):
            say(f"{'':>16}  {json.dumps(row, default=str)}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
