"""Algorithms: turn groups of finished rollouts into per-token training samples (DESIGN.md,
"Algorithm vs loss"). Pure Python; torch is never imported here.

An algorithm decides *what* to learn from each rollout (an advantage per sampled token); a loss
(``workbench_local.training.losses``) decides *how* that becomes a gradient; the trainer
(``workbench_local.training.trainer``) only runs the model. New methods are new small classes here.

Data flow, as the async loop (issue 5, item 3) uses it::

    rollouts = [TrainRollout.from_trace(rec.id, f"{rec.run_id}:{rec.task_index}", rec.reward, rec.trace,
                                        status=rec.status) for rec in finished]        # or training_data.load_groups
    algo = make_algorithm("grpo", scale_by_std=True)                                   # from config
    out = algo.process(group_rollouts(rollouts))     # -> AlgorithmOutput(samples, stats)
    loss = make_loss(algo.default_loss)              # "pg" for RL, "ce" for SFT
    trainer.step(out.samples)                        # workbench_local.training.trainer.Trainer

* A **group** is every rollout of one task in one run (``group_id = f"{run_id}:{task_index}"``).
  Group rewards (``rubric.group_reward``) are already folded into each rollout's ``reward``.
* Every **branch** of a rollout's trace (``Trace.branches()``) becomes one :class:`TrainSample`;
  a rollout's advantage is broadcast over the branch's sampled tokens (``loss_mask == 1``) and is
  0.0 elsewhere.
* Rollouts that errored (``status != "ok"`` or ``reward is None``) or have no tokens (an endpoint
  that gives no token ids) are left out of the baseline and of the samples, and counted in
  ``stats`` (``skipped_errors``, ``skipped_no_tokens``).
* ``TrainSample.policy_version`` is the *oldest* policy version that sampled any token of the
  branch (``None`` when the server did not say); the async loop drops samples older than
  ``max_off_policy_steps`` with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from workbench.errors import ConfigError, nearest
from workbench.records.trace import Trace


@dataclass(slots=True)
class Branch:
    """One token sequence of a rollout: ids, the inference server's logprobs (0.0 where not
    sampled), the loss mask (1 = sampled by the policy) and, for distillation, teacher logprobs."""

    token_ids: list[int]
    logprobs: list[float]
    mask: list[int]
    policy_version: int | None = None
    teacher_logprobs: list[float] | None = None


@dataclass(slots=True)
class TrainRollout:
    """What an algorithm needs to know about one finished rollout."""

    id: str
    group_id: str
    reward: float | None
    branches: list[Branch]
    status: str = "ok"
    gold: bool = False  # a demonstration (e.g. built from the task's gold answer), for SFT
    pk: int = 0  # its row in the store, for readers that poll in commit order

    @property
    def policy_version(self) -> int | None:
        """The oldest policy version that sampled any of its tokens (None when unknown)."""
        known = [b.policy_version for b in self.branches if b.policy_version is not None]
        return min(known) if known else None

    @classmethod
    def from_trace(cls, id: str, group_id: str, reward: float | None, trace: Trace | None, *,
                   status: str = "ok", gold: bool = False, pk: int = 0) -> TrainRollout:
        branches: list[Branch] = []
        if trace is not None and trace.has_tokens:
            for path in trace.branches():
                ids, lps, mask = trace.sequence(path)
                versions = [_version(n.policy_version) for n in path if n.kind == "assistant"]
                known = [v for v in versions if v is not None]
                branches.append(Branch(ids, lps, mask, min(known) if known else None))
        return cls(id, group_id, reward, branches, status, gold, pk)

    @property
    def ok(self) -> bool:
        """Finished without an error and scored; a gold demonstration needs no reward (an imported
        conversation may have none)."""
        if self.status != "ok":
            return False
        return self.gold if self.reward is None else math.isfinite(self.reward)


def _version(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


@dataclass(slots=True)
class TrainSample:
    """One sequence for the trainer. All per-token lists have the same length; ``advantages`` and
    ``inference_logprobs`` are 0.0 where ``loss_mask`` is 0."""

    token_ids: list[int]
    loss_mask: list[int]
    inference_logprobs: list[float]
    advantages: list[float]
    policy_version: int | None = None
    rollout_id: str = ""
    group_id: str = ""
    reward: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if not (len(self.loss_mask) == len(self.inference_logprobs) == len(self.advantages) == n):
            raise ValueError(f"TrainSample {self.rollout_id!r}: token_ids, loss_mask, inference_logprobs and "
                             "advantages must have the same length")

    @property
    def n_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def n_loss_tokens(self) -> int:
        return sum(1 for m in self.loss_mask if m)


@dataclass(slots=True)
class AlgorithmOutput:
    samples: list[TrainSample]
    stats: dict[str, float] = field(default_factory=dict)


def group_rollouts(rollouts: Iterable[TrainRollout]) -> list[list[TrainRollout]]:
    """Rollouts grouped by ``group_id``, groups in order of first appearance."""
    groups: dict[str, list[TrainRollout]] = {}
    for r in rollouts:
        groups.setdefault(r.group_id, []).append(r)
    return list(groups.values())


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (ddof=0)."""
    if not xs:
        return 0.0, 0.0
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))


class Algorithm:
    """Base class. Subclasses set ``name`` and ``default_loss`` and override
    :meth:`group_advantages` (one scalar per rollout) or :meth:`token_advantages` (per token).

    Options are dataclass-like keyword arguments declared as class annotations with defaults;
    :func:`make_algorithm` validates them."""

    name: ClassVar[str] = ""
    default_loss: ClassVar[str] = "pg"

    def group_advantages(self, group: list[TrainRollout], stats: dict[str, float]) -> list[float | None]:
        """One advantage per rollout of a group (all ``ok``); ``None`` drops the rollout."""
        raise NotImplementedError

    def token_advantages(self, rollout: TrainRollout, branch: Branch, advantage: float) -> list[float]:
        """Per-token advantages of one branch: ``advantage`` on sampled tokens, 0.0 elsewhere."""
        return [advantage if m else 0.0 for m in branch.mask]

    def process(self, groups: Iterable[Sequence[TrainRollout]]) -> AlgorithmOutput:
        stats: dict[str, float] = {"groups": 0, "rollouts": 0, "skipped_errors": 0, "skipped_no_tokens": 0,
                                   "zero_variance_groups": 0, "filtered": 0}
        samples: list[TrainSample] = []
        rewards: list[float] = []
        advs: list[float] = []
        for raw in groups:
            stats["groups"] += 1
            group = []
            for r in raw:
                stats["rollouts"] += 1
                if not r.ok:
                    stats["skipped_errors"] += 1
                elif not r.branches or not any(any(b.mask) for b in r.branches):
                    stats["skipped_no_tokens"] += 1
                else:
                    group.append(r)
            if not group:
                continue
            for r, a in zip(group, self.group_advantages(group, stats), strict=True):
                if a is None:
                    stats["filtered"] += 1
                    continue
                if r.reward is not None:  # a gold demonstration may have none (an imported conversation)
                    rewards.append(float(r.reward))
                advs.append(a)
                for b in r.branches:
                    samples.append(TrainSample(list(b.token_ids), [1 if m else 0 for m in b.mask],
                                               [lp if m else 0.0 for lp, m in zip(b.logprobs, b.mask, strict=True)],
                                               self.token_advantages(r, b, a), b.policy_version, r.id, r.group_id,
                                               float(r.reward or 0.0)))
        rm, rs = _mean_std(rewards)
        am, as_ = _mean_std(advs)
        stats.update(samples=len(samples), reward_mean=rm, reward_std=rs, advantage_mean=am, advantage_std=as_,
                     advantage_min=min(advs, default=0.0), advantage_max=max(advs, default=0.0))
        return AlgorithmOutput(samples, stats)

    def config(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in _options(type(self))}


def _options(cls: type) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        for k in getattr(klass, "__annotations__", {}):
            if not k.startswith("_") and k not in ("name", "default_loss") and hasattr(klass, k):
                out[k] = getattr(klass, k)
    return out


class GRPO(Algorithm):
    """Group-normalised advantages: ``(r - mean) / (std + eps)`` with the population std of the
    group. ``scale_by_std=False`` gives Dr.GRPO's ``r - mean``. A group whose rewards are all equal
    (or a group of one) carries no signal: every advantage is exactly 0.0 and the group is counted
    in ``stats["zero_variance_groups"]``; ``skip_zero_variance=True`` also drops its samples."""

    name = "grpo"
    scale_by_std: bool = True
    eps: float = 1e-6
    skip_zero_variance: bool = False

    def group_advantages(self, group: list[TrainRollout], stats: dict[str, float]) -> list[float | None]:
        rs = [float(r.reward or 0.0) for r in group]
        m, s = _mean_std(rs)
        if len(rs) < 2 or max(rs) - min(rs) <= 1e-12:
            stats["zero_variance_groups"] += 1
            return [None if self.skip_zero_variance else 0.0] * len(rs)
        return [(r - m) / (s + self.eps) if self.scale_by_std else r - m for r in rs]


class RLOO(Algorithm):
    """REINFORCE leave-one-out: ``r_i - mean(r_j, j != i)``. A group of one has no baseline and a
    group of equal rewards no signal: both give 0.0 and count as zero-variance groups."""

    name = "rloo"
    skip_zero_variance: bool = False

    def group_advantages(self, group: list[TrainRollout], stats: dict[str, float]) -> list[float | None]:
        rs = [float(r.reward or 0.0) for r in group]
        n = len(rs)
        if n < 2 or max(rs) - min(rs) <= 1e-12:
            stats["zero_variance_groups"] += 1
            return [None if self.skip_zero_variance else 0.0] * n
        total = sum(rs)
        return [r - (total - r) / (n - 1) for r in rs]


class SFT(Algorithm):
    """Supervised fine-tuning on chosen rollouts: advantage 1.0 on their sampled tokens (the
    cross-entropy loss). Gold rollouts (``TrainRollout.gold``) are always chosen; others only when
    ``gold_only`` is false and, if ``min_reward`` is set, their reward is at least ``min_reward``.
    Rollouts not chosen are counted in ``stats["filtered"]``."""

    name = "sft"
    default_loss = "ce"
    min_reward: float | None = None
    gold_only: bool = False

    def group_advantages(self, group: list[TrainRollout], stats: dict[str, float]) -> list[float | None]:
        out: list[float | None] = []
        for r in group:
            keep = r.gold or (not self.gold_only and (self.min_reward is None or (r.reward or 0.0) >= self.min_reward))
            out.append(1.0 if keep else None)
        return out


class OnPolicyDistillation(Algorithm):
    """On-policy distillation: the student samples, a teacher scores the same tokens, and each
    sampled token's advantage is ``coef * (teacher_logprob - student_logprob)`` (the negative
    per-token reverse KL), with the student's inference logprobs as ``student_logprob``. Teacher
    logprobs come from a teacher server's ``prompt_logprobs`` (:func:`teacher_request`,
    :func:`parse_prompt_logprobs`) and are set on each ``Branch.teacher_logprobs`` (one per token of
    the branch) before :meth:`process`. ``reward_weight`` adds a GRPO advantage of the rollout's
    reward (0.0 = pure distillation); ``clip`` bounds each token's advantage to ``[-clip, clip]``.
    ``stats["reverse_kl"]`` is the batch's mean reverse KL per sampled token (pure distillation, unclipped).
    A branch without teacher logprobs is an error (``ValueError``), never a silent zero. In a training run
    the trainer fills them from ``teacher_base_url``/``teacher_model`` (:mod:`workbench.training.teacher`)."""

    name = "distill"
    coef: float = 1.0
    reward_weight: float = 0.0
    clip: float | None = None
    teacher_base_url: str = ""  # the teacher's OpenAI-compatible endpoint (.../v1): vLLM or `workbench serve`
    teacher_model: str = ""  # the name it serves the teacher under (a model, or a LoRA adapter)

    def group_advantages(self, group: list[TrainRollout], stats: dict[str, float]) -> list[float | None]:
        if self.reward_weight == 0.0:
            return [0.0] * len(group)
        return [a if a is None else self.reward_weight * a for a in GRPO().group_advantages(group, stats)]

    def process(self, groups: Iterable[Sequence[TrainRollout]]) -> AlgorithmOutput:
        out = super().process(groups)
        values = [a for smp in out.samples for a, m in zip(smp.advantages, smp.loss_mask, strict=True) if m]
        if values and self.coef and not self.reward_weight and self.clip is None:
            out.stats["reverse_kl"] = -sum(values) / len(values) / self.coef
        return out

    def token_advantages(self, rollout: TrainRollout, branch: Branch, advantage: float) -> list[float]:
        teacher = branch.teacher_logprobs
        if teacher is None or len(teacher) != len(branch.token_ids):
            raise ValueError(f"rollout {rollout.id!r}: on-policy distillation needs one teacher logprob per token "
                             f"(got {None if teacher is None else len(teacher)} for {len(branch.token_ids)} tokens)")
        out = []
        for m, t, s in zip(branch.mask, teacher, branch.logprobs, strict=True):
            if not m:
                out.append(0.0)
                continue
            a = self.coef * (t - s) + advantage
            if self.clip is not None:
                a = max(-self.clip, min(self.clip, a))
            out.append(a)
        return out


# -- the teacher's prompt_logprobs (vLLM's /v1/completions) ----------------------------------------
def teacher_request(token_ids: Sequence[int], model: str, *, top: int = 1) -> dict[str, Any]:
    """The JSON body of an OpenAI-compatible ``POST /v1/completions`` that asks a vLLM teacher for
    the logprob of every token of ``token_ids`` (the prompt is given as token ids, so nothing is
    re-tokenized; one token is generated because some servers refuse ``max_tokens=0``)."""
    return {"model": model, "prompt": [int(t) for t in token_ids], "max_tokens": 1, "temperature": 1.0,
            "prompt_logprobs": int(top), "logprobs": None, "echo": False}


def parse_prompt_logprobs(response: dict[str, Any], token_ids: Sequence[int]) -> list[float]:
    """Teacher logprobs, one per token of ``token_ids``, from vLLM's completion response.

    vLLM puts ``prompt_logprobs`` on ``choices[0]`` (older versions also at the top level): a list
    with one entry per prompt token; the first is ``null`` (nothing predicts it, so 0.0 here) and
    each other is a dict from token id (a string in JSON) to ``{"logprob", "rank",
    "decoded_token"}`` (or a bare float). The entry for the prompt's own token is always present."""
    choices = response.get("choices") or [{}]
    plp = choices[0].get("prompt_logprobs") if isinstance(choices[0], dict) else None
    if plp is None:
        plp = response.get("prompt_logprobs")
    if not isinstance(plp, list):
        raise ValueError("the teacher's response has no prompt_logprobs; is it a vLLM server, and was "
                         "prompt_logprobs set in the request?")
    if len(plp) != len(token_ids):
        raise ValueError(f"the teacher returned {len(plp)} prompt logprobs for {len(token_ids)} tokens")
    out: list[float] = []
    for i, (entry, tok) in enumerate(zip(plp, token_ids, strict=True)):
        if entry is None:
            if i:
                raise ValueError(f"the teacher gave no logprob for prompt position {i}")
            out.append(0.0)
            continue
        val = entry.get(str(tok), entry.get(tok)) if isinstance(entry, dict) else None
        if val is None:
            raise ValueError(f"the teacher's prompt_logprobs at position {i} lack token {tok}")
        out.append(float(val["logprob"] if isinstance(val, dict) else val))
    return out


# -- registry ---------------------------------------------------------------------------------------
ALGORITHMS: dict[str, type[Algorithm]] = {
    "grpo": GRPO,
    "rloo": RLOO,
    "sft": SFT,
    "distill": OnPolicyDistillation,
    "on_policy_distillation": OnPolicyDistillation,
}


def configure(obj: Any, kind: str, cfg: dict[str, Any]) -> Any:
    """Set ``cfg`` options on ``obj``; an unknown option is a ConfigError naming the nearest one."""
    opts = _options(type(obj))
    for k, v in cfg.items():
        if k not in opts:
            raise ConfigError(f"{kind} has no option {k!r}{nearest(k, opts)}; its options are: "
                              f"{', '.join(sorted(opts)) or 'none'}")
        default = opts[k]
        numeric = (isinstance(default, int | float) and not isinstance(default, bool)) or (
            default is None and "float" in _annotation(type(obj), k))
        if isinstance(default, bool) and not isinstance(v, bool):
            raise ConfigError(f"{kind} option {k!r} must be true or false, not {v!r}")
        if numeric and not (v is None and default is None) and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise ConfigError(f"{kind} option {k!r} must be a number, not {v!r}")
        setattr(obj, k, float(v) if numeric and v is not None and not isinstance(default, int) else v)
    return obj


def _annotation(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        ann = getattr(klass, "__annotations__", {})
        if name in ann:
            return str(ann[name])
    return ""


def make_algorithm(name: str, **cfg: Any) -> Algorithm:
    """The algorithm registered as ``name`` with options ``cfg`` (e.g. ``make_algorithm("grpo",
    scale_by_std=False)``); a typo is a ConfigError naming the nearest valid name or option."""
    cls = ALGORITHMS.get(name.strip().lower().replace("-", "_"))
    if cls is None:
        raise ConfigError(f"unknown algorithm {name!r}{nearest(name, ALGORITHMS)}; choose one of "
                          f"{', '.join(sorted(ALGORITHMS))}")
    return configure(cls(), f"algorithm {cls.name!r}", cfg)


__all__ = ["ALGORITHMS", "RLOO", "SFT", "GRPO", "Algorithm", "AlgorithmOutput", "Branch", "OnPolicyDistillation",
           "TrainRollout", "TrainSample", "configure", "group_rollouts", "make_algorithm", "nearest",
           "parse_prompt_logprobs", "teacher_request"]
