"""Benchmark ``workbench train`` against TRL's ``GRPOTrainer``: held-out reward against wall time
when both train the same base model on the same environment and reward, on this machine.

    python scripts/bench_vs_trl.py [--env next_number] [--model DIR] [--steps N] [--eval-every K]
                                   [--eval-rollouts R] [--seed 0] [--target X] [--sync]
                                   [--only trl|workbench] [--json] [--verbose]

Without ``--model`` it first builds the embedded tiny model into a temporary directory (about a
minute and a half). It
resolves the run config ``workbench train ENV`` would use (the env's ``train.toml`` plus these
flags) and runs each trainer alone, one after the other:

* **Workbench**: ``workbench train ENV --json`` into a throwaway store (``--loop.checkpoint_every
  0``); held-out evals (the last ``loop.eval_tasks`` tasks, ``--eval-rollouts`` samples each) run
  beside training, on the same server and cores; the eval curve and step times are read back from
  the store. Wall time is from the command's launch (imports, the inference server and the trainer
  starting) to the step record of the evaluated policy.
* **TRL**: ``GRPOTrainer`` in a process of its own, without vLLM, on the training tasks only, in the
  same task order (the workbench's seeded task stream, ``shuffle_dataset=False``). Its reward is the
  env's own rubric scoring each completion as ``workbench train`` does (group rewards over each
  prompt's ``num_generations`` completions). A callback samples the held-out tasks at step 0, every
  ``--eval-every`` steps and at the end (``model.generate`` on the chat template, at the env's
  temperature) and scores them with the rubric. Wall time is from the process's launch (imports,
  the model load, the trainer built) to the end of the evaluated step, less the time spent in these
  evals (TRL trains while nothing else runs).

Both sides use LoRA (rank, alpha, targets), AdamW (lr, betas, eps, weight decay, gradient clip)
with a constant learning rate after ``warmup_steps``, ``groups_per_step x rollouts_per_task``
completions per optimizer step, group-normalised advantages, token-mean loss (TRL ``dapo``), no KL,
the env's ``max_tokens`` and temperature. The report: per trainer a table of (step, wall s,
held-out mean), the median s/step, the first step's time after launch and the training reward (the
mean of the first and the last tenth of the steps); the target (``--target``, else the lower of the two best
held-out means), the first wall time each reaches it, and the ratio TRL / Workbench. TRL is not a
dependency: ``pip install trl==1.16.0 --no-deps`` (``--dry-run`` first shows whether transformers,
peft, datasets or accelerate are missing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_train import run_train_command  # noqa: E402 (one way to run a train command and read its summary)
from learning_curve import curve_rows  # noqa: E402 (step and eval times, as the learning curve reads them)

INSTALL_TRL = "TRL is not installed: .venv/bin/pip install trl==1.16.0 --no-deps"


def run_config(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The resolved run config, and the overrides that make ``workbench train`` resolve the same."""
    from workbench.training.run_config import load_tables, validate_tables

    optional = {"loop.max_steps": args.steps, "loop.eval_every": args.eval_every,
                "loop.eval_rollouts": args.eval_rollouts, "loop.sync": args.sync or None}
    over = {"trainer.model": args.model, "loop.seed": args.seed, "trainer.seed": args.seed,
            "loop.checkpoint_every": 0, **{k: v for k, v in optional.items() if v is not None}}
    cfg = validate_tables(load_tables(None, over, args.env))
    if not cfg.loop.eval_tasks:
        raise SystemExit(f"{args.env} holds out no tasks: the benchmark needs a held-out set (loop.eval_tasks)")
    return cfg, over


def load_env(cfg: Any) -> tuple[Any, list[Any], list[Any]]:
    from workbench.authoring import discovery
    from workbench.training.loop import split_tasks

    env = discovery.load(cfg.env, cfg.env_args)
    if type(env.harness).__name__ != "SingleTurn":
        raise SystemExit(f"{cfg.env} uses {env.harness.describe()}: the TRL side handles single-turn envs only")
    if cfg.loop.temperature is not None:  # as workbench.training.loop.train applies them
        env.sampling.temperature = cfg.loop.temperature
    if cfg.loop.max_tokens is not None:
        env.sampling.max_tokens = cfg.loop.max_tokens
    train, held = split_tasks(env, cfg)
    return env, train, held


async def _score(env: Any, task: Any, texts: list[str]) -> list[float]:
    """The rewards of one group of completions of ``task``, as the rollout engine computes them."""
    from workbench.records.rollout import Rollout

    ctxs, scores = [], []
    for i, text in enumerate(texts):
        r = Rollout(id=f"bench.{i}", task=task, sample_index=i, client=None, base_url="", model="", params={})  # type: ignore[arg-type]
        env.harness.start(r)  # the system prompt and the task's messages
        r.messages.append({"role": "assistant", "content": text})
        ctxs.append(r.score_context())
        scores.append(await env.rubric.score_rollout(ctxs[-1]))
    if env.rubric.group_rewards:
        await env.rubric.score_group(ctxs, scores)
    return [s.total for s in scores]


def score_group(env: Any, task: Any, texts: list[str]) -> list[float]:
    return asyncio.run(_score(env, task, texts))


# -- Workbench --------------------------------------------------------------------------------------

def run_workbench(args: argparse.Namespace, cfg: Any, over: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from workbench.store import Store

    db = tmp / "bench.db"
    flags = [x for k, v in over.items() for x in (f"--{k}", json.dumps(v) if isinstance(v, bool) else str(v))]
    cmd = [sys.executable, "-m", "workbench.cli", "train", cfg.env, "--db", str(db), "--json", *flags]
    print(f"== workbench: {' '.join(cmd[3:])}", file=sys.stderr, flush=True)
    launched = time.time()
    summary, command_s = run_train_command(cmd, "workbench train", verbose=args.verbose)
    with Store(db) as store:
        rows = curve_rows(store, summary["run_id"])  # wall time from the run's creation to each step record
        created = store.get_run(summary["run_id"])["created_at"]
    since_launch = created - launched  # the command's start: imports, the server and the trainer starting
    curve = [{"step": r["step"], "wall_s": round(r["wall_s"] + since_launch if r["step"] else 0.0, 2),
              "heldout": r["eval_reward_mean"]} for r in rows if r["eval_reward_mean"] is not None]
    from workbench_local.server.serve import default_threads

    steps = [r for r in rows if r["step"]]
    return {"trainer": "workbench", "run_id": summary["run_id"], "curve": curve,
            "train_reward": [r["reward_mean"] for r in steps],
            "step_s": step_durations({r["step"]: r["wall_s"] for r in rows}),
            "first_step_s": round(steps[0]["wall_s"] + since_launch, 2) if steps else None,
            "command_s": round(command_s, 1), "threads": f"server {default_threads()}, trainer "
            f"{default_threads()} (workbench's default split)"}


def step_durations(times: dict[int, float]) -> list[float]:
    ts = [times[s] for s in sorted(times)]
    return [round(b - a, 3) for a, b in zip(ts, ts[1:], strict=False)]


# -- TRL --------------------------------------------------------------------------------------------

def run_trl_process(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """TRL in a fresh process, timed from its launch as ``workbench train`` is (imports included)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--only", "trl", "--model", args.model,
           "--seed", str(args.seed), "--env", args.env, "--trl-child", "--launched-at", repr(time.time())]
    for flag, value in (("--steps", args.steps), ("--eval-every", args.eval_every),
                        ("--eval-rollouts", args.eval_rollouts)):
        if value is not None:
            cmd += [flag, str(value)]
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the TRL run failed (exit {proc.returncode})")
    return json.loads(lines[-1])


def run_trl(args: argparse.Namespace, cfg: Any, tmp: Path) -> dict[str, Any]:
    import warnings

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, TrainerCallback
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from workbench.training.loop import task_stream

    warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames, not ours
    env, train_tasks, held = load_env(cfg)
    loop, tr, sp = cfg.loop, cfg.trainer, env.sampling
    G, R = loop.groups_per_step, loop.rollouts_per_task  # noqa: N806
    index = {id(t): i for i, t in enumerate(train_tasks)}
    system = env.harness.system_prompt
    rows = [{"prompt": t.messages(system), "task_index": index[id(t)], "group": g}
            for g, t in islice(task_stream(train_tasks, loop.seed), loop.max_steps * G)]

    def env_reward(prompts: list[Any], completions: list[Any], task_index: list[int], group: list[int],
                   **_: Any) -> list[float]:
        """The env's rubric; group rewards over each prompt's completions."""
        out = [0.0] * len(completions)
        members: dict[int, list[int]] = {}
        for i, g in enumerate(group):
            members.setdefault(g, []).append(i)
        for idx in members.values():
            if len(idx) != R:
                raise RuntimeError(f"a TRL batch split a group: {len(idx)} completions of one prompt, not {R}")
            texts = [text_of(completions[i]) for i in idx]
            for i, v in zip(idx, score_group(env, train_tasks[task_index[idx[0]]], texts), strict=True):
                out[i] = v
        return out

    env_reward.__name__ = f"{env.name}_rubric"
    batch_means: list[float] = []  # one optimizer step's completions per call

    def recorded_reward(*a: Any, **kw: Any) -> list[float]:
        out = env_reward(*a, **kw)
        batch_means.append(statistics.fmean(out))
        return out

    recorded_reward.__name__ = env_reward.__name__
    tok = AutoTokenizer.from_pretrained(tr["model"])
    eos_cfg = GenerationConfig.from_pretrained(tr["model"]).eos_token_id  # the server stops on both too
    eos = sorted({tok.eos_token_id, *(eos_cfg if isinstance(eos_cfg, list) else [eos_cfg])} - {None})
    gpu = torch.cuda.is_available()
    targs = GRPOConfig(
        output_dir=str(tmp / "trl"), max_steps=loop.max_steps, seed=args.seed, data_seed=args.seed,
        per_device_train_batch_size=G * R, gradient_accumulation_steps=1, num_generations=R,
        max_completion_length=sp.max_tokens, temperature=sp.temperature, top_p=sp.top_p, top_k=0,
        learning_rate=tr["lr"], lr_scheduler_type="constant_with_warmup" if tr["warmup_steps"] else "constant",
        warmup_steps=tr["warmup_steps"], weight_decay=tr["weight_decay"], adam_beta1=tr["adam_beta1"],
        adam_beta2=tr["adam_beta2"], adam_epsilon=tr["adam_eps"], max_grad_norm=tr["max_grad_norm"],
        beta=cfg.loss.get("kl_coef", 0.0), loss_type="dapo", scale_rewards="group", num_iterations=1,
        mask_truncated_completions=False, shuffle_dataset=False, use_vllm=False, bf16=gpu, fp16=False,
        gradient_checkpointing=bool(tr["gradient_checkpointing"]), logging_strategy="no", save_strategy="no",
        report_to="none", disable_tqdm=True, dataloader_num_workers=0, dataloader_pin_memory=gpu)
    lora = LoraConfig(r=tr["lora_rank"], lora_alpha=tr["lora_alpha"], lora_dropout=tr["lora_dropout"],
                      target_modules=tr["target_modules"], bias="none", task_type="CAUSAL_LM")
    every, steps = loop.eval_every, loop.max_steps
    # One prompt per held-out task, repeated for its samples (a group: group rewards apply within it).
    prompt_ids = [tok.apply_chat_template(t.messages(system), add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"] for t in held]
    gen = GenerationConfig(do_sample=sp.temperature > 0, temperature=sp.temperature or None, top_p=sp.top_p,
                           top_k=0, max_new_tokens=sp.max_tokens, pad_token_id=tok.pad_token_id, eos_token_id=eos)

    class HeldOut(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = args.launched_at or time.time()  # the process's launch (imports included), else now
            self.eval_s = 0.0
            self.curve: list[dict[str, Any]] = []
            self.step_at: dict[int, float] = {}

        def wall(self) -> float:
            return time.time() - self.t0 - self.eval_s

        def evaluate(self, model: Any, step: int) -> None:
            t, wall = time.perf_counter(), self.wall()
            texts = sample(model, tok, prompt_ids, loop.eval_rollouts, gen, eos)
            rewards = [v for j, task in enumerate(held) for v in
                       score_group(env, task, texts[j * loop.eval_rollouts:(j + 1) * loop.eval_rollouts])]
            wall = wall if step else 0.0  # the base model, as on the workbench side
            self.curve.append({"step": step, "wall_s": round(wall, 2), "heldout": statistics.fmean(rewards)})
            self.eval_s += time.perf_counter() - t
            print(f"   trl step {step}: held-out {self.curve[-1]['heldout']:.3f} at {wall:.1f} s",
                  file=sys.stderr, flush=True)

        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            self.evaluate(model, 0)
            self.step_at[0] = self.wall()

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            s = state.global_step
            self.step_at[s] = self.wall()
            if s == steps or (every and s % every == 0):
                self.evaluate(model, s)

    print(f"== trl: GRPOTrainer, {steps} steps of {G}x{R}, {torch.get_num_threads()} torch threads",
          file=sys.stderr, flush=True)
    t_start = time.perf_counter()
    cb = HeldOut()
    model = AutoModelForCausalLM.from_pretrained(tr["model"], dtype=torch.bfloat16 if gpu else torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=recorded_reward, args=targs, train_dataset=Dataset.from_list(rows),
                          processing_class=tok, peft_config=lora, callbacks=[cb])
    trainer.remove_callback(PrinterCallback)  # its end-of-training metrics would go to stdout
    trainer.train()
    return {"trainer": "trl", "curve": cb.curve, "step_s": step_durations(cb.step_at), "train_reward": batch_means,
            "first_step_s": cb.step_at.get(1) and round(cb.step_at[1], 2),
            "command_s": round(time.perf_counter() - t_start, 1),
            "threads": f"{torch.get_num_threads()} torch threads (one process)"}


def text_of(completion: Any) -> str:
    """A TRL completion (a list of messages, or text) as the completion text the rubric sees."""
    content = completion if isinstance(completion, str) else completion[-1].get("content") if completion else ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def sample(model: Any, tok: Any, prompt_ids: list[list[int]], n: int, gen: Any, eos: list[int],
           batch: int = 128) -> list[str]:
    """``n`` sampled completions of each prompt (in prompt order), decoded up to the first EOS."""
    import torch

    model.eval()  # called between training steps only: back to train mode after
    todo = [ids for ids in prompt_ids for _ in range(n)]
    out: list[str] = []
    for k in range(0, len(todo), batch):
        chunk = todo[k:k + batch]
        width = max(map(len, chunk))
        ids = torch.tensor([[tok.pad_token_id] * (width - len(c)) + c for c in chunk], device=model.device)
        mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunk], device=model.device)
        with torch.no_grad():
            seqs = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
        for row in seqs[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in eos), len(row))
            out.append(tok.decode(row[:cut], skip_special_tokens=True, clean_up_tokenization_spaces=False))
    model.train()
    return out


# -- the report -------------------------------------------------------------------------------------

def first_reach(curve: list[dict[str, Any]], target: float) -> dict[str, Any] | None:
    return next((p for p in curve if p["heldout"] >= target - 1e-9), None)


def report(results: list[dict[str, Any]], target: float | None) -> dict[str, Any]:
    for r in results:
        print(f"\n{r['trainer']} ({r['threads']}; command {r['command_s']} s)")
        print(f"{'step':>6} {'wall s':>9} {'held-out':>9}")
        for p in r["curve"]:
            print(f"{p['step']:>6} {p['wall_s']:>9.1f} {p['heldout']:>9.3f}")
        r["median_step_s"] = round(statistics.median(r["step_s"]), 3) if r["step_s"] else None
        print(f"median s/step: {r['median_step_s']}; first step recorded {r['first_step_s']} s after launch")
        tr = [x for x in r.get("train_reward", []) if x is not None]
        if len(tr) >= 2:
            k = max(1, min(10, len(tr) // 10))  # the mean of the first and the last tenth (at most 10 steps)
            r["train_reward_first"], r["train_reward_last"] = statistics.fmean(tr[:k]), statistics.fmean(tr[-k:])
            print(f"training reward: {r['train_reward_first']:.3f} (first {k} steps) -> {r['train_reward_last']:.3f} "
                  f"(last {k})")
    out: dict[str, Any] = {"results": results}
    if len(results) < 2:
        return out
    by = {r["trainer"]: r for r in results}
    target = target if target is not None else min(max(p["heldout"] for p in r["curve"]) for r in results)
    wb, trl = first_reach(by["workbench"]["curve"], target), first_reach(by["trl"]["curve"], target)
    out.update(target=target, workbench_reach_s=wb and wb["wall_s"], trl_reach_s=trl and trl["wall_s"])
    print(f"\ntarget held-out reward: {target:.3f}")
    if wb is None or trl is None:
        print("; ".join(f"{n} never reaches it" if p is None else f"{n} reaches it in {p['wall_s']:.1f} s "
                        f"(step {p['step']})" for n, p in (("Workbench", wb), ("TRL", trl))))
    elif wb["step"] == 0 or trl["step"] == 0:
        print(f"Workbench reaches it at step {wb['step']} ({wb['wall_s']:.1f} s), TRL at step {trl['step']} "
              f"({trl['wall_s']:.1f} s): a base-model eval already scores it, so no ratio; train longer or "
              "pass a higher --target")
    else:
        out["ratio"] = round(trl["wall_s"] / wb["wall_s"], 3)
        print(f"Workbench reaches {target:.3f} in {wb['wall_s']:.1f} s (step {wb['step']}), TRL in "
              f"{trl['wall_s']:.1f} s (step {trl['step']}): ratio TRL/Workbench {out['ratio']:.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="next_number")
    ap.add_argument("--model", default=None, help="a built model dir (default: build the tiny model, about 100 s)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the env's loop.max_steps)")
    ap.add_argument("--eval-every", type=int, default=None, help="steps between held-out evals (default: the env's)")
    ap.add_argument("--eval-rollouts", type=int, default=None, help="samples per held-out task (default: the env's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", type=float, default=None, help="the held-out reward to time (default: see above)")
    ap.add_argument("--sync", action="store_true", help="workbench --sync (no generation ahead of training)")
    ap.add_argument("--only", choices=("trl", "workbench"), default=None)
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line of stdout")
    ap.add_argument("--verbose", action="store_true", help="show workbench train's own output")
    ap.add_argument("--trl-child", action="store_true", help=argparse.SUPPRESS)  # the TRL side's own process
    ap.add_argument("--launched-at", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only != "workbench":
        try:
            import trl  # noqa: F401
        except ImportError:
            print(INSTALL_TRL, file=sys.stderr)
            raise SystemExit(2) from None
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl_") as d:
        tmp = Path(d)
        if args.model is None:
            from workbench_local.models.tiny_model import build_tiny_model

            print("building the tiny model (about 100 s; --model DIR reuses a build)", file=sys.stderr, flush=True)
            args.model = str(build_tiny_model(tmp / "model", seed=0))
        args.model = str(Path(args.model).resolve())
        cfg, over = run_config(args)
        results = []
        if args.only != "trl":
            results.append(run_workbench(args, cfg, over, tmp))
        if args.trl_child:
            print(json.dumps(run_trl(args, cfg, tmp)))
            return
        if args.only != "workbench":
            results.append(run_trl_process(args, tmp))
        with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
            out = report(results, args.target)
        out["config"] = {"env": cfg.env, "model": args.model, "loop": cfg.raw["loop"], "trainer": cfg.trainer}
        if args.json:
            print(json.dumps(out))


if __name__ == "__main__":
    main()
