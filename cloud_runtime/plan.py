"""A cluster plan and cost estimate for a cloud RL run, computed before anything is launched.

The input is a ``workbench train`` run config (``[env] [loop] [algorithm] [loss] [trainer]``) plus a
``[cloud]`` table, read here so that ``workbench train`` itself is unchanged. ``make_plan`` turns it
into node roles, a per-GPU memory fit, a step time, and $/step, total $ and wall time from the GPU
price table. Every number is recorded with the formula that produced it (``Plan.derivation``).

The model is a roofline estimate, not a simulation. Its stated assumptions:

- Trainer: the sharding of ``[trainer] sharding`` (``fsdp`` unless the config says ``ddp``). ``fsdp``:
  FSDP2 full sharding over all trainer GPUs (weights, gradients and Adam state), one layer gathered
  plus one prefetched; ``ddp``: the whole replica on every trainer GPU. The training state per GPU is
  :func:`workbench.training.memory.state_bytes_per_rank` over the model's parameter shapes (see
  ``plan_memory``), the arithmetic the trainer's sharding bench checks against measured shards.
  Activation checkpointing at every layer; context parallelism ``cloud.context_parallel`` splits one
  sequence of ``context_length`` tokens.
- Trainer time: model FLOPs at a stated MFU. Linear layers cost 6 × active params per token
  (4 × with LoRA: frozen weights get no weight gradient); causal attention adds
  6 × layers × (heads × head_dim) × mean sequence length per token (PaLM's MFU accounting, halved
  for the causal mask; the mean length understates mixed lengths, whose cost goes as E[S²]/E[S]).
  Recomputation from checkpointing is inside the MFU, not added.
- Inference: prefill (prompt and tool tokens) is compute-bound at ``inference_mfu``; decode is the
  larger of a compute bound and an HBM-bandwidth bound (every decode iteration reads the weights
  its batch touches plus the batch's KV cache), because decode at RL batch sizes is usually
  bandwidth-bound. Each generated token sees on average half the mean sequence as context.
- Async (``loop.async_level`` > 0): step = max(trainer, inference) + weight sync; sync: their sum.
- Weight sync: the updated weights (or LoRA adapters) are broadcast over the scale-out network;
  a pipelined broadcast costs about size / bandwidth whatever the number of receivers.
- Cost: GPU-seconds × list price for every GPU of the cluster for the whole wall time (idle GPUs
  still bill). CPU, memory, storage and sandboxes are not included.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench_cloud.own_cluster import OWN_PROVIDER, own_assumption, plan_price
from workbench_cloud.plan_memory import planned_sharding, trainer_memory

from workbench.cost.gpu_prices import NETWORK_GBPS, GpuPrice, canonical_gpu, gpu_spec
from workbench.errors import ConfigError, OptionError, nearest
from workbench.training.run_config import RunConfig, load_tables, validate_tables


@dataclass(slots=True)
class CloudConfig:
    """The ``[cloud]`` table."""

    provider: str = "modal"
    gpu: str = "H100"
    nodes: int = 1
    gpus_per_node: int = 8
    trainer_nodes: int | None = None  # default: half the nodes (half the GPUs on one node)
    inference_nodes: int | None = None  # default: the rest
    trainer_gpus: int | None = None  # a split inside a node; overrides trainer_nodes
    inference_gpus: int | None = None
    inference_tp: int | None = None  # GPUs per inference replica (default: one node)
    context_parallel: int = 1  # trainer GPUs that share one sequence
    # the model, for the estimate
    params_b: float | None = None  # total parameters, billions
    active_params_b: float | None = None  # per token (MoE); default = params_b
    layers: int | None = None
    hidden_size: int | None = None
    attention_heads: int | None = None  # default hidden_size / head_dim
    kv_heads: int | None = None  # default attention_heads
    head_dim: int | None = None  # default 128
    experts: int | None = None  # routed experts per MoE layer (for decode weight reads)
    experts_per_token: int | None = None
    dtype_bytes: int = 2
    # the model's shapes (optional: without intermediate_size and vocab_size, params_b as equal layers)
    intermediate_size: int | None = None  # the dense MLP's width
    vocab_size: int | None = None
    tied_embeddings: bool = False  # the output head shares the embedding matrix
    qkv_bias: bool = False  # biases on q/k/v (Qwen2, GLM-4.5)
    qk_norm: bool = False  # per-head q/k RMSNorm (Qwen3, GLM-4.5)
    moe_intermediate_size: int | None = None  # one routed expert's MLP width
    shared_experts: int = 0  # always-on experts per MoE layer
    dense_layers: int = 0  # leading layers with a dense MLP before the MoE layers
    # the workload
    context_length: int | None = None
    mean_tokens_per_rollout: int | None = None  # the whole sequence the trainer sees
    mean_generated_tokens: int | None = None  # of which the model decodes (default: all)
    rollouts_per_step: int | None = None  # default loop.groups_per_step × loop.rollouts_per_task
    max_steps: int | None = None  # default loop.max_steps
    # stated efficiencies
    mfu: float = 0.3
    inference_mfu: float = 0.4
    hbm_efficiency: float = 0.6
    network_gbps: float | None = None  # per node (default: the provider's)
    network_efficiency: float = 0.5
    memory_utilization: float = 0.9
    startup_s: float = 900.0  # once per run: containers, weight load, warm-up
    budget_usd: float | None = None
    # GPU data-sheet overrides, for a GPU not in the table
    peak_tflops: float | None = None
    gpu_memory_gb: float | None = None
    hbm_tbps: float | None = None


CLOUD_KEYS = [f.name for f in dataclasses.fields(CloudConfig)]
_REQUIRED = ("params_b", "layers", "hidden_size", "context_length", "mean_tokens_per_rollout")
_ZERO_OK = ("trainer_nodes", "inference_nodes", "trainer_gpus", "inference_gpus", "mean_generated_tokens",
            "startup_s", "budget_usd", "shared_experts", "dense_layers")
_FLAGS = ("tied_embeddings", "qkv_bias", "qk_norm")
_FRACTIONS = ("mfu", "inference_mfu", "hbm_efficiency", "network_efficiency", "memory_utilization")


@dataclass(slots=True)
class LaunchConfig:
    run: RunConfig
    cloud: CloudConfig
    sharding: str = "fsdp"  # the trainer's sharding the plan assumes (and the launched run uses)


class MissingCloudKeys(ConfigError):
    """The plan needs these ``[cloud]`` keys and the config has none of them (``missing_cloud_keys``); each
    face adds how to give them."""

    def __init__(self, missing: list[str]) -> None:
        self.missing_cloud_keys = [f"cloud.{k}" for k in missing]
        super().__init__(f"the plan needs {', '.join(self.missing_cloud_keys)} in the config's cloud table")


def _cloud_config(table: dict[str, Any]) -> CloudConfig:
    for k in table:
        if k not in CLOUD_KEYS:
            raise ConfigError(f"unknown key cloud.{k}{nearest(k, CLOUD_KEYS)}; valid cloud keys: {', '.join(CLOUD_KEYS)}")
    cfg = CloudConfig(**table)
    missing = [k for k in _REQUIRED if getattr(cfg, k) is None]
    if missing:
        raise MissingCloudKeys(missing)
    for f in dataclasses.fields(CloudConfig):
        v = getattr(cfg, f.name)
        if v is None or f.name in ("provider", "gpu"):
            continue
        if f.name in _FLAGS:
            if not isinstance(v, bool):
                raise ConfigError(f"cloud.{f.name} must be true or false, not {v!r}")
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
            raise ConfigError(f"cloud.{f.name} must be a non-negative number, not {v!r}")
        if "int" in str(f.type) and not isinstance(v, int):
            raise ConfigError(f"cloud.{f.name} must be a whole number, not {v!r}")
        if v == 0 and f.name not in _ZERO_OK:
            raise ConfigError(f"cloud.{f.name} must be positive")
    for k in _FRACTIONS:
        if not 0 < getattr(cfg, k) <= 1:
            raise ConfigError(f"cloud.{k} is a fraction in (0, 1], not {getattr(cfg, k)!r}")
    if not isinstance(cfg.provider, str) or not isinstance(cfg.gpu, str):
        raise ConfigError("cloud.provider and cloud.gpu are names (strings)")
    cfg.provider, cfg.gpu = cfg.provider.strip().lower(), canonical_gpu(cfg.gpu)
    if cfg.mean_tokens_per_rollout > cfg.context_length:  # type: ignore[operator]
        raise ConfigError(f"cloud.mean_tokens_per_rollout ({cfg.mean_tokens_per_rollout}) exceeds "
                          f"cloud.context_length ({cfg.context_length})")
    if cfg.mean_generated_tokens is not None and cfg.mean_generated_tokens > cfg.mean_tokens_per_rollout:  # type: ignore[operator]
        raise ConfigError("cloud.mean_generated_tokens cannot exceed cloud.mean_tokens_per_rollout")
    return cfg


def load_launch_config(file: str | Path | None, overrides: dict[str, Any] | None = None,
                       env: str | None = None) -> LaunchConfig:
    """A run config plus ``[cloud]``: defaults, then ``file``, then ``env``, then dotted ``overrides``."""
    tables = load_tables(file, overrides, env)
    if not tables["env"].get("name"):
        raise ConfigError("no environment: give it as `workbench launch ENV` or as env.name in the config")
    cloud = _cloud_config(tables["cloud"])
    sharding = planned_sharding(file, overrides, env or tables["env"]["name"])
    tables["trainer"]["sharding"] = sharding
    run = validate_tables(tables)
    if run.data:  # the trainer reads the chosen rollouts from the run directory, which a cluster lacks
        raise ConfigError("launch does not take data.runs: SFT on stored runs trains on this machine with "
                          "`workbench train ENV --algorithm.name sft --data RUN`")
    return LaunchConfig(run=run, cloud=cloud, sharding=sharding)



@dataclass(frozen=True, slots=True)
class Derivation:
    quantity: str
    formula: str  # with the numbers substituted
    value: float
    unit: str = ""

    def line(self) -> str:
        return f"{self.quantity} = {self.formula} = {fmt(self.value)}{' ' + self.unit if self.unit else ''}"


def fmt(x: float) -> str:
    """Numbers for people: 1,024 · 3.55e+11 · 0.35 · 12.6."""
    if isinstance(x, bool):
        return str(x)
    if float(x).is_integer() and abs(x) < 1e10:
        return f"{int(x):,}"
    if abs(x) >= 1e7 or (x != 0 and abs(x) < 1e-3):
        return f"{x:.4g}"
    return f"{x:,.4g}" if abs(x) < 1000 else f"{x:,.0f}"


@dataclass(slots=True)
class Plan:
    provider: str
    gpu: str
    nodes: int
    gpus_per_node: int
    trainer_gpus: int
    inference_gpus: int
    inference_tp: int  # GPUs per inference replica
    sharding: str  # the trainer's: "fsdp" | "ddp"
    mode: str  # "async" | "sync"
    max_steps: int
    rollouts_per_step: int
    tokens_per_step: float  # rollouts × mean tokens, as the plan's breakdown computes it
    generated_tokens_per_step: float
    trainer_time_s: float
    inference_time_s: float
    inference_bound: str  # "compute" | "bandwidth"
    weight_sync_s: float
    step_time_s: float
    usd_per_gpu_s: float
    usd_per_step: float
    total_usd: float
    wall_s: float
    memory: dict[str, dict[str, Any]]
    fits: bool
    budget_usd: float | None
    assumptions: list[str] = field(default_factory=list)
    derivation: list[Derivation] = field(default_factory=list)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def inference_replicas(self) -> int:
        return self.inference_gpus // self.inference_tp

    @property
    def wall_days(self) -> float:
        return self.wall_s / 86400

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        g = self.gpus_per_node
        d.update(total_gpus=self.total_gpus, inference_replicas=self.inference_replicas, wall_days=self.wall_days, wall_hours=self.wall_s / 3600,
                 trainer_nodes=self.trainer_gpus / g if self.trainer_gpus % g else self.trainer_gpus // g,
                 inference_nodes=self.inference_gpus / g if self.inference_gpus % g else self.inference_gpus // g,
                 within_budget=None if self.budget_usd is None else self.total_usd <= self.budget_usd,
                 derivation=[dataclasses.asdict(x) for x in self.derivation])
        return d


class _Book:
    """Collects every computed number with its formula."""

    def __init__(self) -> None:
        self.rows: list[Derivation] = []

    def __call__(self, quantity: str, formula: str, value: float, unit: str = "") -> float:
        self.rows.append(Derivation(quantity, formula, value, unit))
        return value


def _roles(c: CloudConfig) -> tuple[int, int]:
    total = c.nodes * c.gpus_per_node
    if c.trainer_gpus is not None or c.inference_gpus is not None:
        tr = c.trainer_gpus if c.trainer_gpus is not None else total - (c.inference_gpus or 0)
        inf = c.inference_gpus if c.inference_gpus is not None else total - tr
    elif c.trainer_nodes is not None or c.inference_nodes is not None:
        tn = c.trainer_nodes if c.trainer_nodes is not None else c.nodes - (c.inference_nodes or 0)
        inn = c.inference_nodes if c.inference_nodes is not None else c.nodes - tn
        tr, inf = tn * c.gpus_per_node, inn * c.gpus_per_node
    elif c.nodes > 1:
        tr = (c.nodes // 2) * c.gpus_per_node
        inf = total - tr
    else:
        tr, inf = c.gpus_per_node // 2, c.gpus_per_node - c.gpus_per_node // 2
    if tr < 1 or inf < 1 or tr + inf != total:
        raise ConfigError(f"roles must split the cluster's {total} GPUs into at least one trainer GPU and one "
                          f"inference GPU (got {tr} trainer + {inf} inference): set cloud.trainer_nodes and "
                          "cloud.inference_nodes (or cloud.trainer_gpus and cloud.inference_gpus on one node)")
    return tr, inf


def make_plan(cfg: LaunchConfig, prices: dict[tuple[str, str], GpuPrice] | None = None,
              budget_usd: float | None = None, max_steps: int | None = None) -> Plan:
    """The plan for ``cfg``; ``budget_usd`` and ``max_steps`` override the config's."""
    c, loop, trainer = cfg.cloud, cfg.run.loop, cfg.run.trainer
    b = _Book()
    if c.peak_tflops and c.gpu_memory_gb and c.hbm_tbps:
        peak, mem_gb, hbm = c.peak_tflops * 1e12, c.gpu_memory_gb, c.hbm_tbps * 1e12
    else:
        spec = gpu_spec(c.gpu)
        peak = (c.peak_tflops or spec.peak_tflops) * 1e12
        mem_gb, hbm = c.gpu_memory_gb or spec.memory_gb, (c.hbm_tbps or spec.hbm_tbps) * 1e12
    price = plan_price(c.provider, c.gpu, prices)
    tr_gpus, inf_gpus = _roles(c)
    total_gpus = c.nodes * c.gpus_per_node
    tp = c.inference_tp or min(c.gpus_per_node, inf_gpus)
    if inf_gpus % tp:
        raise ConfigError(f"cloud.inference_tp ({tp}) must divide the {inf_gpus} inference GPUs")
    if tr_gpus % c.context_parallel:
        raise ConfigError(f"cloud.context_parallel ({c.context_parallel}) must divide the {tr_gpus} trainer GPUs")
    replicas = inf_gpus // tp

    # the model
    P = c.params_b * 1e9  # type: ignore[operator]
    Na = (c.active_params_b or c.params_b) * 1e9  # type: ignore[operator]
    L, h, B = c.layers, c.hidden_size, c.dtype_bytes
    assert L is not None and h is not None
    hd = c.head_dim or 128
    heads = c.attention_heads or max(1, h // hd)
    kvh = c.kv_heads or heads
    d_attn = heads * hd
    kvb = b("KV cache per token", f"2 (K,V) × {L} layers × {kvh} kv heads × {hd} head dim × {B} B",
            2 * L * kvh * hd * B, "bytes")
    lora = bool(trainer.get("lora", False))

    # the workload
    ctx, M = c.context_length, c.mean_tokens_per_rollout
    assert ctx is not None and M is not None
    G = c.mean_generated_tokens if c.mean_generated_tokens is not None else M
    R = c.rollouts_per_step or loop.groups_per_step * loop.rollouts_per_task
    if not c.rollouts_per_step:
        b("rollouts per step", f"loop.groups_per_step {loop.groups_per_step} × loop.rollouts_per_task "
          f"{loop.rollouts_per_task}", R)
    steps = max_steps or c.max_steps or loop.max_steps
    T = b("tokens per step", f"{R} rollouts × {M:,} mean tokens", R * M, "tokens")
    gen = b("generated tokens per step", f"{R} rollouts × {G:,} mean generated tokens", R * G, "tokens")
    pre = R * (M - G)

    # memory per trainer GPU (GB)
    gb = 1e9
    m_tr, trainable_params = trainer_memory(c, trainer, cfg.sharding, tr_gpus, b)
    trainable = b("LoRA params", "adapters of every linear layer (plan_memory.model_shapes)", trainable_params,
                  "params") if lora else P
    s_local = ctx / c.context_parallel
    m_tr["activations_gb"] = b(
        "trainer activations/GPU", f"{fmt(s_local)} tokens ({ctx:,} / CP {c.context_parallel}) × hidden {h} × "
        f"({L} layers × {B} B checkpoints + 34 B one-layer recompute, Korthikanti et al. with flash attention)",
        s_local * h * (L * B + 34) / gb, "GB")
    usable = b("usable memory/GPU", f"{mem_gb:g} GB × memory_utilization {c.memory_utilization}",
               mem_gb * c.memory_utilization, "GB")
    m_tr["total_gb"] = sum(m_tr.values())
    m_tr.update(usable_gb=usable, fits=m_tr["total_gb"] <= usable)

    # memory per inference GPU (GB); KV heads split across tensor-parallel ranks up to kv_heads
    kv_split = min(tp, kvh)
    m_inf: dict[str, Any] = {}
    m_inf["weights_gb"] = b("inference weights/GPU", f"{fmt(P)} params × {B} B / TP {tp}", P * B / tp / gb, "GB")
    m_inf["kv_full_context_gb"] = b("KV of one full-context sequence/GPU", f"{ctx:,} tokens × {fmt(kvb)} B / "
                                    f"min(TP {tp}, kv heads {kvh})", ctx * kvb / kv_split / gb, "GB")
    batch = b("concurrent sequences per replica", f"ceil({R} rollouts / {replicas} replicas of {tp} GPUs)",
              math.ceil(R / replicas))
    m_inf["kv_batch_gb"] = b("KV of the batch at mean length/GPU", f"{batch} × {M:,} tokens × {fmt(kvb)} B / {kv_split}",
                             batch * M * kvb / kv_split / gb, "GB")
    free = usable - m_inf["weights_gb"]
    cap = b("sequences that fit per replica", f"floor(({fmt(usable)} − {fmt(m_inf['weights_gb'])}) GB / "
            f"({M:,} × {fmt(kvb)} B / {kv_split}))", max(0, math.floor(free * gb / (M * kvb / kv_split))))
    m_inf["total_gb"] = m_inf["weights_gb"] + min(m_inf["kv_batch_gb"], max(free, 0))
    m_inf.update(usable_gb=usable, fits=m_inf["weights_gb"] + m_inf["kv_full_context_gb"] <= usable,
                 batch_limited_by_memory=cap < batch)
    fits = bool(m_tr["fits"] and m_inf["fits"])

    # trainer time
    mult = 4 if lora else 6
    fpt = b("trainer FLOPs/token", f"{mult} × {fmt(Na)} active params + 6 × {L} layers × {d_attn} attn dim × "
            f"{M:,} mean seq (causal attention, fwd+bwd)", mult * Na + 6 * L * d_attn * M, "FLOP")
    t_train = b("trainer time", f"{fmt(T)} tokens × {fmt(fpt)} FLOP / ({tr_gpus} GPUs × {fmt(peak)} FLOP/s × MFU "
                f"{c.mfu})", T * fpt / (tr_gpus * peak * c.mfu), "s")

    # inference time
    fpi = b("inference FLOPs/token", f"2 × {fmt(Na)} + 2 × {L} × {d_attn} × {M:,} (forward, mean context {M // 2:,})",
            2 * Na + 2 * L * d_attn * M, "FLOP")
    flops_s = inf_gpus * peak * c.inference_mfu
    t_prefill = b("prefill time", f"{fmt(pre)} prompt/tool tokens × {fmt(fpi)} / ({inf_gpus} GPUs × {fmt(peak)} × "
                  f"inference_mfu {c.inference_mfu})", pre * fpi / flops_s, "s")
    t_dec_c = b("decode time, compute bound", f"{fmt(gen)} tokens × {fmt(fpi)} / ({inf_gpus} × {fmt(peak)} × "
                f"{c.inference_mfu})", gen * fpi / flops_s, "s")
    bsz = max(1, min(batch, cap))
    if c.experts and c.experts_per_token and c.experts > c.experts_per_token and Na < P:
        E, k = c.experts, c.experts_per_token
        frac = b("experts touched per decode iteration", f"1 − (1 − {k}/{E})^{bsz}", 1 - (1 - k / E) ** bsz)
        per_expert = (P - Na) / (E - k)
        read = b("params read per iteration", f"(active {fmt(Na)} − {k} × {fmt(per_expert)}) shared + {E} × "
                 f"{frac:.3f} × {fmt(per_expert)} per expert", Na - k * per_expert + E * frac * per_expert, "params")
    else:
        read = b("params read per iteration", f"all {fmt(P)} params" + (" (MoE without cloud.experts: upper bound)"
                                                                       if Na < P else ""), P, "params")
    it = b("decode iteration time", f"({fmt(read)} × {B} B / TP {tp} + {bsz} seqs × {M // 2:,} mean ctx × "
           f"{fmt(kvb)} B / {kv_split}) / ({fmt(hbm)} B/s × hbm_efficiency {c.hbm_efficiency})",
           (read * B / tp + bsz * (M / 2) * kvb / kv_split) / (hbm * c.hbm_efficiency), "s")
    t_dec_bw = b("decode time, bandwidth bound", f"{fmt(gen)} tokens / {replicas} replicas / {bsz} per iteration × "
                 f"{fmt(it)} s", gen / replicas / bsz * it, "s")
    bound = "bandwidth" if t_dec_bw >= t_dec_c else "compute"
    t_inf = b("inference time", f"prefill {fmt(t_prefill)} + max(compute {fmt(t_dec_c)}, bandwidth {fmt(t_dec_bw)})",
              t_prefill + max(t_dec_c, t_dec_bw), "s")

    # weight sync and the step
    gbps = c.network_gbps or NETWORK_GBPS.get(c.provider, 400.0)
    sync_bytes = trainable * B
    t_sync = b("weight sync", f"{fmt(sync_bytes)} B × 8 / ({gbps:g} Gbit/s × network_efficiency "
               f"{c.network_efficiency}) (pipelined broadcast)", sync_bytes * 8 / (gbps * 1e9 * c.network_efficiency), "s")
    asynchronous = not loop.sync and loop.async_level > 0
    if asynchronous:
        step = b("step time (async)", f"max(trainer {fmt(t_train)}, inference {fmt(t_inf)}) + sync {fmt(t_sync)}",
                 max(t_train, t_inf) + t_sync, "s")
    else:
        step = b("step time (sync)", f"trainer {fmt(t_train)} + inference {fmt(t_inf)} + sync {fmt(t_sync)}",
                 t_train + t_inf + t_sync, "s")

    # money and time
    rate = price.usd_per_gpu_s
    per_step = b("$ per step", f"{total_gpus} GPUs × ${rate:g}/GPU-s × {fmt(step)} s", total_gpus * rate * step, "USD")
    wall = b("wall time", f"startup {c.startup_s:g} s + {steps:,} steps × {fmt(step)} s", c.startup_s + steps * step, "s")
    b("wall time in days", f"{fmt(wall)} s / 86,400", wall / 86400, "days")
    total = b("total $", f"{total_gpus} GPUs × ${rate:g}/GPU-s × {fmt(wall)} s", total_gpus * rate * wall, "USD")

    assumptions = [
        f"GPU {c.gpu}: {peak / 1e12:g} TFLOP/s dense bf16, {mem_gb:g} GB, {hbm / 1e12:g} TB/s; "
        f"price ${rate:g}/GPU-s ({price.source or price.provider})",
        f"trainer MFU {c.mfu} (model FLOPs; recompute is inside it); inference MFU {c.inference_mfu}; "
        f"HBM efficiency {c.hbm_efficiency}; network {gbps:g} Gbit/s/node × {c.network_efficiency}",
        f"{'full fine-tuning' if not lora else 'LoRA'}; sharding {cfg.sharding}: "
        + (f"FSDP2 full shard of weights, gradients and Adam state over {tr_gpus} trainer GPUs"
           if cfg.sharding == "fsdp" else f"DDP, a whole replica on each of {tr_gpus} trainer GPUs")
        + f" ([trainer] sharding; memory from workbench.training.memory); context parallel {c.context_parallel}; "
        "activation checkpointing",
        f"{R} rollouts/step × {M:,} mean tokens ({G:,} generated); {replicas} inference replicas of {tp} GPUs",
        f"{'async: max(trainer, inference) + sync' if asynchronous else 'sync: trainer + inference + sync'}; "
        f"startup {c.startup_s:g} s once; CPU, memory, storage and sandboxes not priced",
    ]
    if c.provider == OWN_PROVIDER:
        assumptions.append(own_assumption(c.gpu, c.gpus_per_node, price))
    return Plan(provider=c.provider, gpu=c.gpu, nodes=c.nodes, gpus_per_node=c.gpus_per_node, trainer_gpus=tr_gpus,
                inference_gpus=inf_gpus, inference_tp=tp, sharding=cfg.sharding, mode="async" if asynchronous else "sync", max_steps=steps,
                rollouts_per_step=R, tokens_per_step=T, generated_tokens_per_step=gen, trainer_time_s=t_train,
                inference_time_s=t_inf, inference_bound=bound, weight_sync_s=t_sync, step_time_s=step,
                usd_per_gpu_s=rate, usd_per_step=per_step, total_usd=total, wall_s=wall,
                memory={"trainer": m_tr, "inference": m_inf}, fits=fits,
                budget_usd=budget_usd if budget_usd is not None else c.budget_usd,
                assumptions=assumptions, derivation=b.rows)


def check_budget(plan: Plan) -> None:
    """Refuse a plan whose estimate exceeds its budget, with the numbers."""
    if plan.budget_usd is None or plan.total_usd <= plan.budget_usd:
        return
    fixed = plan.total_usd - plan.usd_per_step * plan.max_steps
    affordable = max(0, math.floor((plan.budget_usd - fixed) / plan.usd_per_step)) if plan.usd_per_step else 0
    raise OptionError(
        "LaunchPlan.budget", plan.budget_usd, template="plan refused: estimated ${total:,.0f} ({steps:,} steps × "
        "${per_step:,.2f}/step + ${fixed:,.0f} startup on {gpus} {gpu}) exceeds the budget of ${value:,.0f}; the "
        "budget covers {affordable:,} steps ({max_steps} {affordable}), or raise {field}",
        names={"max_steps": "LaunchPlan.max_steps"}, total=plan.total_usd, steps=plan.max_steps,
        per_step=plan.usd_per_step, fixed=fixed, gpus=plan.total_gpus, gpu=plan.gpu, affordable=affordable)
