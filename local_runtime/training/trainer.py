"""The trainer: one optimizer step per batch of :class:`~workbench.training.algorithms.TrainSample`, on
torch + peft, the same code on a laptop CPU and on cloud GPUs.

How the async loop (issue 5, item 3) drives it::

    trainer = Trainer(TrainerConfig.from_dict(cfg["trainer"]), loss=build_loss("pg", kl_coef=0.0))
    if resume: trainer.load_checkpoint(ckpt_dir)           # step count + optimizer continue
    while ...:
        batch = [s for s in samples if trainer.step_count - (s.policy_version or 0) <= max_off_policy_steps]
        res = trainer.step(batch)                           # StepResult(step, skipped, reason, metrics)
        if res.skipped: record the event (res.reason), the weights did not change
        else: trainer.save_adapter(out / f"step-{res.step}")  # hot-load into the server as a new name
        trainer.save_checkpoint(ckpt_dir)                   # now and then; atomic, full disk = CheckpointError

* ``trainer.step_count`` is the policy version of the current weights: it counts optimizer updates
  (a skipped step does not count; ``skipped_steps`` does).
* Data parallel: start N processes with ``workbench_local.training.distributed.launch`` (or ``torchrun``) and
  build a Trainer in each. Every rank passes the *same whole batch* to ``step``; each trains on its
  balanced shard (``packing.shard``), the losses are normalised by step-wide token counts and the
  gradients all-reduced with SUM, so N ranks take exactly the step one process would. Pass
  ``shard=False`` when each rank already holds only its own samples. Only rank 0 writes checkpoints.
* ``sharding = "fsdp"`` (with a process group): FSDP2 shards the weights, gradients and optimizer state
  over the ranks (``sharding.py``); the backward pass reduce-scatters the gradients (summed, as above),
  every rank runs as many passes as the busiest one, and ``state_bytes`` is this rank's share.
* Trainer logprobs are ``log_softmax(logits / temperature)`` of the sampled tokens; set
  ``temperature`` to the sampling temperature so they match the inference logprobs.
* ``context_parallel = cp > 1``: the batch is sharded over ``world / cp`` groups, each splitting every
  sequence between its ranks (``cp_step.py``; no shared-prefix packing); ``step`` needs CUDA.
* Metrics (floats): ``loss``, ``entropy`` (mean over sampled tokens), ``mismatch_kl``,
  ``masked_fraction``, ``kl`` (with a KL term), ``grad_norm`` (before clipping), ``lr``,
  ``tokens`` (real tokens, all ranks), ``loss_tokens``, ``samples``, ``micro_batches``,
  ``truncated``, ``packed_tokens`` (what the model ran: each shared prefix once), ``tokens_per_s``,
  ``step_time_s``, ``staleness_mean``/``staleness_max`` (when samples carry a policy version).
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_local.models import lora
from workbench_local.training import checkpoint as ckpt
from workbench_local.training import sharding, shared_prefix
from workbench_local.training.context_parallel import require_ring_attention
from workbench_local.training.cp_step import ContextParallel
from workbench_local.training.distributed import all_reduce_, rank_world
from workbench_local.training.losses import Loss, LossBatch, build_loss, token_weights
from workbench_local.training.packing import MicroBatch, collate, pack, shard
from workbench_local.training.trainer_config import TrainerConfig

from workbench.errors import ConfigError
from workbench.training.algorithms import TrainSample
from workbench.training.memory import effective_sharding


@dataclass(slots=True)
class StepResult:
    step: int  # policy version after this call (unchanged when skipped)
    skipped: bool = False
    reason: str | None = None  # why the step was skipped (non-finite loss or gradient, no tokens)
    metrics: dict[str, float] = field(default_factory=dict)


class Trainer:
    def __init__(self, config: TrainerConfig | None = None, loss: Loss | str = "pg") -> None:
        import torch

        self.config = cfg = config or TrainerConfig()
        cfg.validate()
        self.loss = build_loss(loss) if isinstance(loss, str) else loss
        self.rank, self.world_size = rank_world()
        self.device = lora.resolve_device(cfg.device)
        dtype = lora.resolve_dtype(cfg.dtype, self.device)
        # auto: FSDP over more than one rank (and a model with decoder layers to shard), else one replica
        self.sharding = effective_sharding(cfg.sharding, self.world_size)
        self.sharded = self.sharding == "fsdp" and sharding.process_group_ready()
        self.mixed = mixed = self.sharded and sharding.mixed_precision(self.device, cfg.dtype)
        if mixed:
            dtype = torch.float32  # FSDP keeps float32 shards and computes in bfloat16
        torch.manual_seed(cfg.seed)  # identical LoRA init on every rank and every run
        model = lora.load_base_model(cfg.model, dtype=dtype, device=self.device, allow_download=cfg.allow_download)
        self.reference: Any = None
        if cfg.lora:
            model = lora.apply_lora(model, rank=cfg.lora_rank, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout,
                                    targets=cfg.target_modules)
        elif self.loss.uses_reference:
            import copy

            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable()
            if cfg.lora:
                model.enable_input_require_grads()
        from workbench_local.training.policy import PolicyForward

        self.model = model
        self.policy = PolicyForward(model, temperature=cfg.temperature, compute_entropy=cfg.compute_entropy,
                                    loss_chunk_tokens=cfg.loss_chunk_tokens)
        if self.reference is not None:
            self.reference = PolicyForward(self.reference, temperature=cfg.temperature, compute_entropy=False,
                                           loss_chunk_tokens=cfg.loss_chunk_tokens)
        if cfg.sharding == "auto" and self.sharded and sharding.decoder_layers(model) is None:
            self.sharding, self.sharded = "ddp", False
        if self.sharding == "fsdp":
            layers = sharding.check_shardable(model, cfg.model)
            if self.sharded:
                sharding.shard_policy(self.policy, layers, device=self.device, mixed=mixed)
                if self.reference is not None:
                    sharding.shard_policy(self.reference, sharding.check_shardable(self.reference.model, cfg.model),
                                          device=self.device, mixed=mixed, keep_root_gathered=False)
        self.cp = ContextParallel(cfg, self.device, self.rank, self.world_size, self.loss,
                                  [model, self.reference.model if self.reference is not None else None]
                                  ) if cfg.context_parallel > 1 else None
        self.shares_prefix = cfg.shared_prefix and self.cp is None and shared_prefix.supports(model)
        self.params = [p for p in model.parameters() if p.requires_grad]  # after sharding: the sharded ones
        self.state_bytes: dict[str, int] = {}  # this rank's training state at the last step (sharding.state_bytes)
        self.optimizer = torch.optim.AdamW(self.params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                           eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
        warm = max(0, cfg.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warm) if warm else 1.0)
        self.step_count = 0
        self.skipped_steps = 0

    # -- one optimizer step -------------------------------------------------------------------
    def step(self, samples: list[TrainSample], *, shard_batch: bool = True) -> StepResult:
        """One optimizer step on ``samples`` (the whole batch; see the module docstring)."""
        import torch

        t0 = time.perf_counter()
        require_ring_attention(self.config.context_parallel, self.device)  # before any work: the ring's backward
        mbs, base = self._prepare(samples, shard_batch)
        if base["loss_tokens"] == 0:
            return self._skip("the batch has no sampled tokens to train on", base, t0)
        self.model.train()
        self.optimizer.zero_grad(set_to_none=False)
        sums, bad = self._run(mbs, base, backward=True)
        flag = torch.tensor([1.0 if bad else 0.0])
        all_reduce_([flag], op="max")
        if flag.item() > 0:
            return self._skip(bad or "non-finite loss on another rank", base, t0)

        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        clip = self.config.max_grad_norm if self.config.max_grad_norm > 0 else math.inf
        if self.sharded:  # FSDP reduce-scattered (summed) the gradients in the backward pass
            grad_norm = sharding.grad_norm_and_clip(self.params, clip)
        else:
            all_reduce_([p.grad for p in self.params])
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, clip))
        if not math.isfinite(grad_norm):
            return self._skip(f"non-finite gradient norm ({grad_norm})", base, t0)
        lr = self.optimizer.param_groups[0]["lr"]
        self.optimizer.step()
        self.state_bytes = sharding.state_bytes(self.model.parameters(), self.optimizer)
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step_count += 1
        dt = time.perf_counter() - t0
        out = {**base, **_reduce(sums), "grad_norm": grad_norm, "lr": lr, "step_time_s": dt,
               "tokens_per_s": base["tokens"] / dt if dt > 0 else 0.0}
        return StepResult(self.step_count, False, None, out)

    def evaluate(self, samples: list[TrainSample], loss: Loss | None = None, *,
                 shard_batch: bool = True) -> dict[str, float]:
        """The loss metrics of ``samples`` under the current weights (``loss`` or the trainer's),
        without any update: e.g. the cross-entropy of held-out gold answers."""
        import torch

        if self.cp is not None and loss is not None:
            self.cp.check_loss(loss)
        mbs, base = self._prepare(samples, shard_batch)
        if base["loss_tokens"] == 0:
            return base
        self.model.eval()
        with torch.no_grad():
            sums, _ = self._run(mbs, base, backward=False, loss=loss)
        return {**base, **_reduce(sums)}

    def _prepare(self, samples: list[TrainSample], shard_batch: bool) -> tuple[list[MicroBatch], dict[str, float]]:
        """This rank's micro-batches and the step-wide counts (all ranks; a cp group counts once)."""
        import torch

        dp_rank, dp_size = (self.cp.dp_rank, self.cp.dp_size) if self.cp else (self.rank, self.world_size)
        local = shard(samples, dp_rank, dp_size) if shard_batch else list(samples)
        mbs = self._micro_batches(local)
        packed = sum(m.shared.n_packed if m.shared is not None else m.n_tokens for m in mbs)
        counts = torch.tensor([sum(m.n_loss_tokens for m in mbs), len(local), sum(m.n_tokens for m in mbs),
                               sum(m.truncated for m in mbs), len(mbs), packed], dtype=torch.float64)
        all_reduce_([counts])
        if self.cp is not None:
            counts /= self.cp.cp  # the ranks of a cp group hold the same samples
        n_loss, n_seq, n_tok, n_trunc, n_mb, n_packed = (float(x) for x in counts)
        return mbs, {"tokens": n_tok, "loss_tokens": n_loss, "samples": n_seq, "micro_batches": n_mb,
                     "truncated": n_trunc, "packed_tokens": n_packed, **self._staleness(samples)}

    def _micro_batches(self, local: list[TrainSample]) -> list[MicroBatch]:
        """Micro-batches of at most ``micro_batch_tokens`` (rows x padded width): one row per sample,
        or, when the model allows it, one row per group with its common prefix run once."""
        cfg = self.config
        budget = cfg.micro_batch_tokens
        if self.shares_prefix:
            return shared_prefix.micro_batches(local, budget, cfg.pad_id, self.device)
        return [collate([local[i] for i in b], budget, cfg.pad_id, self.device)
                for b in pack([s.n_tokens for s in local], budget)]

    def _run(self, mbs: list[MicroBatch], base: dict[str, float], *, backward: bool,
             loss: Loss | None = None) -> tuple[dict[str, Any], str | None]:
        """Forward (and backward) every micro-batch; summed metrics, and why the step must be skipped.
        Under FSDP every rank runs as many passes as the rank with the most micro-batches (the extra
        ones weigh zero) and finishes them all even after a non-finite loss: they are collectives."""
        import torch

        sums: dict[str, torch.Tensor] = {}
        bad: str | None = None
        passes = len(mbs)
        if self.sharded:
            most = torch.tensor([float(passes)])
            all_reduce_([most], op="max")
            passes = int(most.item())
        for i in range(passes):
            mb = mbs[i] if i < len(mbs) else self._padding_batch()
            value, metrics = self._pass(mb, base, loss or self.loss, backward)
            if not torch.isfinite(value):
                bad = bad or f"non-finite loss ({float(value.detach())}) in micro-batch {i} on rank {self.rank}"
                if not self.sharded and self.cp is None:
                    return sums, bad
            if i < len(mbs):
                for k, v in metrics.items():
                    sums[k] = sums.get(k, torch.zeros((), dtype=torch.float64)) + v.detach().double().cpu()
        return sums, bad

    def _padding_batch(self) -> MicroBatch:
        """A two-token micro-batch with nothing to learn from: its loss and gradient are zero."""
        pad = self.config.pad_id
        return collate([TrainSample([pad, pad], [0, 0], [0.0, 0.0], [0.0, 0.0])], self.config.micro_batch_tokens,
                       pad, self.device)

    def _pass(self, mb: MicroBatch, base: dict[str, float], loss: Loss, backward: bool) -> tuple[Any, dict[str, Any]]:
        """One micro-batch's loss and metrics (and gradients): whole, or split over the cp group."""
        n_loss, n_seq = base["loss_tokens"], base["samples"]
        if self.cp is not None:
            return self.cp.forward(mb, lambda local, w, s: self._forward(local, n_loss, n_seq, loss, w, s),
                                   n_loss=n_loss, n_seq=n_seq, backward=backward)
        value, metrics = self._forward(mb, n_loss, n_seq, loss)
        if backward:
            value.backward()
        return value, metrics

    def _forward(self, mb: MicroBatch, n_loss: float, n_seq: float, loss: Loss, weights: Any = None,
                 share: Any = None) -> tuple[Any, dict[str, Any]]:
        """``weights`` and ``share`` default to this micro-batch's own (a cp shard brings the whole rows')."""
        cfg = self.config
        logprobs, entropy = self.policy(mb)
        share = mb.loss_mask.float() / n_loss if share is None else share
        ref = self._reference_logprobs(mb) if loss.uses_reference else None
        if weights is None:
            weights = token_weights(mb.loss_mask, cfg.normalization, n_loss, n_seq, cfg.max_tokens)
        value, metrics = loss(LossBatch(logprobs, mb.inference_logprobs, mb.advantages, mb.loss_mask, weights,
                                        share, ref))
        metrics = {**metrics, "loss": value.detach()}
        if entropy is not None:
            metrics["entropy"] = ((share[mb.loss_mask] if mb.shared is not None else share) * entropy).sum()
        return value, metrics

    def _reference_logprobs(self, mb: MicroBatch) -> Any:
        import torch

        with torch.no_grad():
            if self.reference is not None:
                return self.reference(mb)[0]
            with self.model.disable_adapter():
                return self.policy(mb)[0]

    def _skip(self, reason: str, metrics: dict[str, float], t0: float) -> StepResult:
        self.optimizer.zero_grad(set_to_none=True)
        self.skipped_steps += 1
        return StepResult(self.step_count, True, reason, {**metrics, "step_time_s": time.perf_counter() - t0})

    def _staleness(self, samples: list[TrainSample]) -> dict[str, float]:
        ages = [self.step_count - s.policy_version for s in samples if s.policy_version is not None]
        return {"staleness_mean": sum(ages) / len(ages), "staleness_max": float(max(ages))} if ages else {}

    # -- weights and checkpoints ----------------------------------------------------------------
    def save_adapter(self, path: Path | str) -> Path:
        """The current LoRA adapter (or full weights) alone, in Hugging Face's layout, for hot-loading
        into a server; atomic. A collective: every rank calls it (under FSDP each parameter is gathered
        in turn and rank 0 writes it; see ``export.py``). Under mixed precision the files hold bfloat16,
        what the layers compute in and the inference server serves, at half the bytes of the shards."""
        import torch
        from workbench_local.training import export

        return export.write_weights(self.model, path, lora=self.config.lora,
                                    dtype=torch.bfloat16 if self.mixed else None)

    def save_checkpoint(self, path: Path | str) -> Path:
        """Weights, optimizer, scheduler, step and RNG state; atomic: a full disk raises CheckpointError
        and leaves the previous checkpoint at ``path`` intact. With ``sharding = "fsdp"`` every rank
        writes its shards through torch.distributed.checkpoint (``sharded_checkpoint.py``), which a run
        on any number of ranks resumes from; otherwise rank 0 writes whole weights (``checkpoint.py``)."""
        import torch
        from workbench_local.training import sharded_checkpoint

        state = {"scheduler": self.scheduler.state_dict(), "step": self.step_count, "skipped_steps": self.skipped_steps,
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                         "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}}
        meta = {"step": self.step_count, "skipped_steps": self.skipped_steps, "world_size": self.world_size,
                "sharding": self.sharding, "config": self.config.to_dict(),
                "model": sharded_checkpoint.model_identity(self.model)}
        if self.sharding == "fsdp":
            return sharded_checkpoint.save(path, self.model, self.optimizer, state, meta)

        def write(tmp: Path) -> None:
            self._write_weights(tmp / ("adapter" if self.config.lora else "model"))
            torch.save({**state, "optimizer": self.optimizer.state_dict()}, tmp / "trainer_state.pt")
            (tmp / "trainer.json").write_text(json.dumps(meta, indent=2, default=str))

        return self._on_rank0(path, write)

    def load_checkpoint(self, path: Path | str) -> int:
        """Resume from ``path`` (either layout, saved on any number of ranks): weights, optimizer and
        scheduler state, step count, RNG. Returns the step. Every rank calls it."""
        import torch
        from workbench_local.training import sharded_checkpoint

        src = ckpt.resolve(path)
        meta = json.loads((src / "trainer.json").read_text())
        saved = meta.get("config", {})
        for k in ("lora", "lora_rank", "target_modules"):
            if k in saved and saved[k] != getattr(self.config, k):
                raise ConfigError(f"the checkpoint at {src} was trained with {k}={saved[k]!r}, this trainer has "
                                  f"{getattr(self.config, k)!r}; resume with the same settings")
        sharded_checkpoint.check_model(meta.get("model"), self.model, src)
        if sharded_checkpoint.is_sharded(src):
            state = sharded_checkpoint.load(src, self.model, self.optimizer)
        else:
            state = torch.load(src / "trainer_state.pt", map_location=self.device, weights_only=False)
            if self.sharding == "fsdp":
                sharded_checkpoint.load_whole(src, self.model, self.optimizer, state["optimizer"])
            else:
                if self.config.lora:
                    lora.load_adapter_weights(self.model, src / "adapter")
                else:
                    lora.load_full_weights(self.model, src / "model")
                self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.step_count = int(state["step"])
        self.skipped_steps = int(state.get("skipped_steps", 0))
        rng = state.get("rng") or {}
        if "torch" in rng:
            torch.set_rng_state(rng["torch"].cpu())
        if rng.get("python") is not None:
            random.setstate(_tuples(rng["python"]))
        if rng.get("cuda") and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        return self.step_count

    def _write_weights(self, path: Path) -> None:
        from workbench_local.training import export

        path.mkdir(parents=True, exist_ok=True)
        export.write_into(self.model, path, lora=self.config.lora)

    def _on_rank0(self, path: Path | str, write: Any) -> Path:
        """Rank 0 writes atomically; every rank learns whether it worked (so none hangs or goes on)."""
        import torch

        err: Exception | None = None
        if self.rank == 0:
            try:
                ckpt.write_atomic(path, write)
            except Exception as e:  # re-raised below, after the other ranks heard of it
                err = e
        flag = torch.tensor([1.0 if err else 0.0])
        all_reduce_([flag], op="max")
        if err is not None:
            raise err
        if flag.item() > 0:
            raise ckpt.CheckpointError(f"rank 0 could not write the checkpoint {path}")
        return Path(path).expanduser().resolve()


def _reduce(sums: dict[str, Any]) -> dict[str, float]:
    """Sum additive metrics over the ranks (one collective)."""
    import torch
    import torch.distributed as dist

    keys = set(sums)
    if rank_world()[1] > 1:  # a rank with an empty shard has no metrics: agree on the names first
        gathered: list[Any] = [None] * rank_world()[1]
        dist.all_gather_object(gathered, sorted(keys))
        keys = {k for g in gathered for k in g}
    if not keys:
        return {}
    names = sorted(keys)
    zero = torch.zeros((), dtype=torch.float64)
    vec = torch.stack([sums.get(k, zero) for k in names])
    all_reduce_([vec])
    return {k: float(v) for k, v in zip(names, vec, strict=True)}


def _tuples(x: Any) -> Any:
    return tuple(_tuples(v) for v in x) if isinstance(x, list | tuple) else x


__all__ = ["StepResult", "Trainer", "TrainerConfig"]
