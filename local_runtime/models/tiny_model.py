"""The embedded default model, ``workbench-tiny-v1``: built reproducibly at first use, no download.

A ~0.7M-parameter, two-layer Llama-architecture causal LM with a byte-level BPE tokenizer trained
offline on a synthetic chat corpus (see :mod:`workbench_local.models.tiny_corpus`), saved with
``save_pretrained`` so the server loads it with exactly the code it uses for any Hugging Face id or
local path. The build is deterministic (one torch thread, fixed seeds): same seed, same bytes.

It is trained just long enough to answer the bundled ``arithmetic`` env's questions correctly part of
the time, and to know every successor the ``next_number`` env asks for while declining to say it two
times in three (what it measured is written to ``workbench_build.json``), so a local RL run has room
to show learning, and, on ``next_number``, learning that carries over to tasks it never trained on.
Run ``python -m workbench_local.models.tiny_model [OUT_DIR]`` to build it by hand.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from workbench_local.models.chat_template import TINY_CHAT_TEMPLATE, TOOL_CLOSE, TOOL_OPEN
from workbench_local.models.tiny_corpus import (
    NEXT_DECLINE,
    NEXT_MAX,
    Example,
    apply_op,
    arithmetic_examples,
    arithmetic_messages,
    arithmetic_problems,
    generic_examples,
    next_examples,
    next_messages,
    tokenizer_corpus,
    tool_examples,
)

from workbench.fsutil import atomic_write

MODEL_ID = "workbench-tiny-v1"
SERVED_NAME = "workbench-tiny"
BUILD_FILE = "workbench_build.json"
#: The version of the corpus and recipe (4: an 8,192-token context); a cached build of another recipe is
#: rebuilt at first use.
RECIPE = 4
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass(slots=True)
class BuildConfig:
    seed: int = 0
    steps: int = 720
    batch_size: int = 64  # arithmetic rows, plus generic_rows short generic chats of the same length
    generic_rows: int = 6
    next_rows: int = 24  # next_number rows ("what number comes next?") in every arithmetic batch
    tool_batch: int = 8  # a separate batch (tool prompts are 3-4x longer) every tool_every steps
    tool_every: int = 5
    lr: float = 3e-3
    warmup: int = 40
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    intermediate: int = 512
    vocab_size: int = 1280
    #: max_position_embeddings and the tokenizer's model_max_length: what the server serves. RoPE has no
    #: weights and training never truncates, so the trained weights do not depend on it; it holds each
    #: bundled env's longest first prompt plus its max_tokens (coding: ~1,100 + 2,048).
    context: int = 8192
    threads: int = 1  # one thread is deterministic and, on a busy 2-core laptop, also the fastest


FAST = {"steps": 120}


def default_dir() -> Path:
    from workbench.config.paths import cache_dir

    return cache_dir() / "models" / MODEL_ID


def _build_tokenizer(cfg: BuildConfig, rng: random.Random, sample_texts: list[str]) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, special_tokens=SPECIAL, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_corpus(rng) + sample_texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], model_max_length=cfg.context,
                                   padding_side="left", clean_up_tokenization_spaces=False)
    fast.add_tokens([TOOL_OPEN, TOOL_CLOSE])
    fast.chat_template = TINY_CHAT_TEMPLATE
    return fast


def _render_plain(ex: Example) -> str:
    """A rough rendering for tokenizer training only (merges need not match the template exactly)."""
    parts = [f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in ex.messages]
    reply = ex.reply.get("content") or ""
    for tc in ex.reply.get("tool_calls") or []:
        f = tc["function"]
        reply += f'{TOOL_OPEN}{{"name": {json.dumps(f["name"])}, "arguments": {json.dumps(f["arguments"])}}}{TOOL_CLOSE}'
    tools = "".join(json.dumps(t["function"]) + "\n" for t in ex.tools or [])
    return tools + "".join(parts) + reply


def encode_example(tokenizer: Any, ex: Example) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) exactly as the server would see them: the prompt rendered with the
    generation prompt, the completion being the rest of the full rendering up to ``<|im_end|>``."""
    prompt = tokenizer.apply_chat_template(ex.messages, tools=ex.tools, add_generation_prompt=True, tokenize=False)
    full = tokenizer.apply_chat_template([*ex.messages, ex.reply], tools=ex.tools, tokenize=False)
    if not full.startswith(prompt):
        raise RuntimeError("the tiny chat template is not prefix-stable")
    reply = full[len(prompt):]
    reply = reply[: reply.index("<|im_end|>") + len("<|im_end|>")]
    enc = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return enc, tokenizer(reply, add_special_tokens=False)["input_ids"]


def _batch(items: list[tuple[list[int], list[int]]], pad: int) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(p) + len(c) for p, c in items)
    ids = torch.full((len(items), width), pad, dtype=torch.long)
    labels = torch.full((len(items), width), -100, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for i, (p, c) in enumerate(items):
        seq = p + c
        ids[i, : len(seq)] = torch.tensor(seq)
        mask[i, : len(seq)] = 1
        labels[i, len(p): len(seq)] = torch.tensor(c)
    return ids, mask, labels


def generate_texts(model: Any, tokenizer: Any, prompts: list[str], *, temperature: float, generator: Any,
                   max_new_tokens: int) -> list[str]:
    """A minimal batched sampler (left padding, KV cache) for measuring the build; the server has its own."""
    import torch
    from workbench_local.models.forward import forward_step

    eos = tokenizer.eos_token_id
    enc = tokenizer(prompts, add_special_tokens=False, padding=True, return_tensors="pt")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    out_ids: list[list[int]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = None
    step_ids = ids
    for _ in range(max_new_tokens):
        logits, cache = forward_step(model, step_ids, mask, pos, cache)
        logits = logits[:, -1, :].float()
        if temperature <= 0:
            nxt = logits.argmax(-1)
        else:
            nxt = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator).squeeze(-1)
        for i, t in enumerate(nxt.tolist()):
            if not done[i] and t != eos:
                out_ids[i].append(t)
        done |= nxt == eos
        if bool(done.all()):
            break
        step_ids = nxt[:, None]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        pos = pos[:, -1:] + 1
    return [tokenizer.decode(t, skip_special_tokens=True) for t in out_ids]


def _loss(model: Any, ids: Any, labels: Any) -> Any:
    """Next-token loss on the completion tokens only. Batches are right-padded, so causal attention
    alone keeps padding out of every real position (no mask needed), and the LM head runs only where
    there is a label: most positions are prompt, and the head is a quarter of the FLOPs."""
    import torch

    hidden = model.model(input_ids=ids).last_hidden_state[:, :-1]
    target = labels[:, 1:]
    keep = target != -100
    logits = model.lm_head(hidden[keep])
    return torch.nn.functional.cross_entropy(logits.float(), target[keep])


def measure_arithmetic(model: Any, tokenizer: Any, *, temperature: float, seed: int = 1234) -> dict[str, float]:
    """Accuracy over all 1,323 arithmetic problems (one sample each; greedy when temperature is 0)."""
    import torch

    problems = arithmetic_problems()
    gen = torch.Generator().manual_seed(seed)
    right: dict[str, list[int]] = {}
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(problems), 512):
            chunk = problems[start: start + 512]
            prompts = [tokenizer.apply_chat_template(arithmetic_messages(a, op, b), add_generation_prompt=True,
                                                     tokenize=False) for a, op, b in chunk]
            texts = generate_texts(model, tokenizer, prompts, temperature=temperature, generator=gen, max_new_tokens=6)
            for (a, op, b), text in zip(chunk, texts, strict=True):
                right.setdefault(op, []).append(int(text.strip() == str(apply_op(a, op, b))))
    acc = {f"acc_{op}": round(sum(v) / len(v), 4) for op, v in right.items()}
    acc["acc"] = round(sum(sum(v) for v in right.values()) / len(problems), 4)
    return acc


def measure_next_number(model: Any, tokenizer: Any, *, temperature: float, seed: int = 4321) -> dict[str, float]:
    """Over every number of the ``next_number`` env: how often the reply is its successor (the reward),
    how often it declines (what the corpus mostly teaches), and how often an answer is right."""
    import torch

    numbers = list(range(NEXT_MAX + 1))
    prompts = [tokenizer.apply_chat_template(next_messages(n), add_generation_prompt=True, tokenize=False)
               for n in numbers]
    gen = torch.Generator().manual_seed(seed)
    model.eval()
    with torch.inference_mode():
        texts = generate_texts(model, tokenizer, prompts, temperature=temperature, generator=gen, max_new_tokens=6)
    right = sum(t.strip() == str(n + 1) for t, n in zip(texts, numbers, strict=True))
    declined = sum(t.strip() == NEXT_DECLINE for t in texts)
    answered = len(numbers) - declined
    return {"successor": round(right / len(numbers), 4), "declined": round(declined / len(numbers), 4),
            "right_when_answering": round(right / answered, 4) if answered else 0.0}


def measure_tool_calls(model: Any, tokenizer: Any, seed: int = 99, count: int = 24) -> dict[str, float]:
    """On held-out tool requests (greedy): how often the reply parses as a tool call, and how often
    it is exactly the right call."""
    import torch
    from workbench_local.models.chat_template import parse_tool_calls

    examples = [e for e in tool_examples(random.Random(seed), count * 3) if e.kind == "tool_call"][:count]
    prompts = [tokenizer.apply_chat_template(e.messages, tools=e.tools, add_generation_prompt=True, tokenize=False)
               for e in examples]
    model.eval()
    with torch.inference_mode():
        texts = generate_texts(model, tokenizer, prompts, temperature=0.0, generator=None, max_new_tokens=40)
    parsed = exact = 0
    for ex, text in zip(examples, texts, strict=True):
        _, calls = parse_tool_calls(text)
        if calls:
            parsed += 1
            want = ex.reply["tool_calls"][0]["function"]
            got = calls[0]["function"]
            exact += int(got["name"] == want["name"] and json.loads(got["arguments"]) == want["arguments"])
    return {"parsed": round(parsed / len(examples), 4), "exact": round(exact / len(examples), 4)}


def _corpus_and_tokenizer(cfg: BuildConfig) -> tuple[Any, random.Random, list[list[Example]]]:
    """The build's tokenizer, the random generator as the build goes on with it, and its four pools of
    examples (arithmetic, tool calls, generic chats, counting)."""
    rng = random.Random(cfg.seed)
    arith = arithmetic_examples()
    tools = tool_examples(rng, 600)
    generic = generic_examples(rng, 300)
    counting = next_examples(random.Random(cfg.seed + 101), 3000)
    samples = arith[::5] + tools[:200] + generic[:100] + counting[:60]
    tokenizer = _build_tokenizer(cfg, rng, [_render_plain(e) for e in samples])
    return tokenizer, rng, [arith, tools, generic, counting]


def build_tokenizer(seed: int = 0, **overrides: Any) -> Any:
    """The tokenizer (with its chat template) that :func:`build_tiny_model` builds for the same seed and
    config, without training the model: seconds, for measuring prompts in the model's own tokens."""
    return _corpus_and_tokenizer(BuildConfig(seed=seed, **overrides))[0]


def build_tiny_model(out_dir: str | Path, seed: int = 0, *, fast: bool = False,
                     progress: Callable[[str, int, int], None] | None = None, **overrides: Any) -> Path:
    """Build the tiny model into ``out_dir`` (a fresh directory) and return it. ``progress(phase, done,
    total)`` is told how far the build is (training steps, then the checks of what it learnt)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    cfg = BuildConfig(seed=seed, **{**(FAST if fast else {}), **overrides})
    t0 = time.perf_counter()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(cfg.threads, os.cpu_count() or 1)))
    try:
        torch.manual_seed(cfg.seed)
        tokenizer, rng, examples = _corpus_and_tokenizer(cfg)
        pools = [[encode_example(tokenizer, e) for e in pool] for pool in examples]
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
            max_position_embeddings=cfg.context, tie_word_embeddings=True, rms_norm_eps=1e-5,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        )
        model = LlamaForCausalLM(config)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.01)
        total = cfg.steps
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / total)))))
        model.train()
        losses: list[float] = []
        for step in range(total):
            if progress and step % 10 == 0:
                progress("training", step, total)
            if step % cfg.tool_every == cfg.tool_every - 1:
                items = [rng.choice(pools[1]) for _ in range(cfg.tool_batch)]
            else:
                items = [rng.choice(pools[0]) for _ in range(cfg.batch_size)]
                items += [rng.choice(pools[2]) for _ in range(cfg.generic_rows)]
                items += [rng.choice(pools[3]) for _ in range(cfg.next_rows)]
            ids, _mask, labels = _batch(items, tokenizer.pad_token_id)
            loss = _loss(model, ids, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.item())
        train_s = time.perf_counter() - t0
        if progress:
            progress("checking", total, total)
        greedy = measure_arithmetic(model, tokenizer, temperature=0.0)
        sampled = measure_arithmetic(model, tokenizer, temperature=1.0, seed=cfg.seed + 1)
        tool_calls = measure_tool_calls(model, tokenizer)
        counting_t1 = measure_next_number(model, tokenizer, temperature=1.0, seed=cfg.seed + 2)
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record = {
            "model_id": MODEL_ID, "served_name": SERVED_NAME, "recipe": RECIPE, "seed": cfg.seed, "fast": fast,
            "config": asdict(cfg), "parameters": sum(p.numel() for p in model.parameters()),
            "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])), "train_s": round(train_s, 2),
            "build_s": round(time.perf_counter() - t0, 2),
            "arithmetic_accuracy_greedy": greedy, "arithmetic_accuracy_t1": sampled, "tool_calls_greedy": tool_calls,
            "next_number_t1": counting_t1,
            "torch": torch.__version__, "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (out / BUILD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        return out
    finally:
        torch.set_num_threads(old_threads)


def ensure_tiny_model(path: str | Path | None = None, *, log: Any = None) -> Path:
    """The cached tiny model directory, built first if missing. Concurrent callers wait on a lock."""
    import fcntl

    target = Path(path) if path else default_dir()
    if is_current_build(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_current_build(target):
            return target
        if log:
            log(f"building the embedded model {MODEL_ID} into {target} (first use only, about a minute and a half)")
        _build_into(target, progress=_progress_writer(target))
        progress_file(target).unlink(missing_ok=True)
    return target


def is_current_build(target: Path) -> bool:
    """Whether ``target`` holds a finished build of the current recipe."""
    try:
        return json.loads((target / BUILD_FILE).read_text()).get("recipe") == RECIPE
    except (OSError, ValueError):
        return False


def progress_file(target: Path) -> Path:
    """Where a build in progress says how far it is (read by whoever waits for the model)."""
    return target.parent / f".{target.name}.progress.json"


def read_progress(target: Path | None = None) -> dict[str, Any] | None:
    """``{"phase", "done", "total"}`` of the build of ``target`` in progress, or None."""
    try:
        return json.loads(progress_file(target or default_dir()).read_text())
    except (OSError, ValueError):
        return None


def _progress_writer(target: Path) -> Callable[[str, int, int], None]:
    path = progress_file(target)

    def write(phase: str, done: int, total: int) -> None:
        atomic_write(path, json.dumps({"phase": phase, "done": done, "total": total, "at": time.time()}))

    return write


def _build_into(target: Path, seed: int = 0, **kw: Any) -> Path:
    """Build in a sibling directory, then move it into place, so a reader never sees half a model."""
    import shutil

    tmp = target.parent / f".{target.name}.build-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    build_tiny_model(tmp, seed, **kw)
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return target


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Build the embedded tiny model.")
    ap.add_argument("out", nargs="?", default=None, help=f"output dir (default: {default_dir()})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="fewer steps (for tests)")
    ap.add_argument("--steps", type=int, default=None)
    args = ap.parse_args(argv)
    over = {"steps": args.steps} if args.steps else {}
    target = Path(args.out) if args.out else default_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    out = _build_into(target, args.seed, fast=args.fast, **over)
    print(json.dumps(json.loads((out / BUILD_FILE).read_text()), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
