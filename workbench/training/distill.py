"""``workbench distill ENV --teacher T --student S``: a teacher's good rollouts become the student's SFT data.

The pipeline, each stage a run in the store whose config holds ``pipeline`` = ``{"id": "dst-...", "kind":
"distill", "stage": ...}`` (so Runs shows the stages together):

1. ``teacher-train``: the teacher on the training split (every task but the last ``heldout``, or its first
   ``-n``), ``-r`` rollouts per task, without token ids (its tokens are the teacher's, not the student's:
   the student's trainer renders the conversations with its own chat template);
2. the filter: the teacher's rollouts that reached ``min_reward`` are the data; none is a ConfigError that
   names the teacher run (which stays in the store) and the best reward it reached;
3. ``train``: the existing SFT algorithm and trainer on that run (``--data``), LoRA by default, holding
   out the same tasks (``loop.eval_tasks``) so its own held-out curve is over the same tasks;
4. ``student-before``, ``student-after``, ``teacher``: the held-out tasks on the base student, on the
   student with the trained adapter (loaded under its own name into the student's embedded server, as
   vLLM's ``/v1/load_lora_adapter`` does it), and on the teacher; the three share ``comparison_id`` = the
   pipeline id, so ``workbench compare dst-...`` shows them again (the outcome carries the same comparison,
   student-before its baseline).

With ``method="on-policy"`` stages 1 and 2 do not run: the training run samples the student on the training
split and the teacher scores every sampled token (``prompt_logprobs``; the on-policy distillation algorithm,
``workbench.training.teacher``), so the teacher must share the student's tokenizer (checked up front).

Everything that can be checked is checked before the first stage runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import ConfigError, EndpointError, OptionError, WorkbenchError
from workbench.runs.endpoint import resolve_endpoint
from workbench.runs.evaluate import EvalOptions, EvalOutcome, evaluate
from workbench.store import Store
from workbench.store.run_lookups import rollout_results

METHODS = ("sft", "on-policy")


class PipelineInterrupted(WorkbenchError):
    """Ctrl-C during a stage: the runs so far are kept, the pipeline stops there."""

    exit_code = 130


HELDOUT_STAGES = ("student_before", "student_after", "teacher")


@dataclass(slots=True)
class DistillOptions:
    env: str
    teacher: str  # a registered model, a model id at teacher_base_url, or an embedded model spec
    student: str  # a model the local trainer loads: "tiny", a model directory or a cached Hugging Face id
    env_args: dict[str, Any] = field(default_factory=dict)
    teacher_base_url: str | None = None
    min_reward: float = 1.0  # a teacher rollout becomes SFT data when its reward reaches this
    heldout: int | None = None  # the last N tasks are held out (default: a fifth of the tasks, at least 1)
    n: int | None = None  # only the first N tasks of the training split
    rollouts_per_task: int = 4  # the teacher's rollouts per training task
    steps: int = 20  # the student's optimizer steps
    lr: float | None = None  # the student's learning rate (default: the trainer's)
    method: str = "sft"
    concurrency: int = 32
    threads: int | None = None  # torch CPU threads of the training run's server and trainer

    def validate(self) -> None:
        def check(name: str, ok: bool, allowed: str, template: str = "{field} must be {allowed}, not {value}") -> None:
            if not ok:
                raise OptionError(f"DistillOptions.{name}", getattr(self, name), allowed, template)

        check("method", self.method in METHODS, f"one of {', '.join(METHODS)}", "{field} must be {allowed}, not {value!r}")
        if self.method == "on-policy" and self.n is not None:
            raise OptionError("DistillOptions.n", self.n, template="{field} limits the teacher's rollouts of {method} "
                              "sft; on-policy distillation samples the student on every training task (hold out more "
                              "with {heldout}, or pass {env_args})", names={
                                  "method": "DistillOptions.method", "heldout": "DistillOptions.heldout",
                                  "env_args": "DistillOptions.env_args"})
        check("min_reward", math.isfinite(self.min_reward), "a finite number")
        check("heldout", self.heldout is None or self.heldout >= 1, "at least 1",
              "{field} must be {allowed} (the comparison is on held-out tasks), not {value}")
        check("n", self.n is None or self.n >= 1, "at least 1")
        check("rollouts_per_task", self.rollouts_per_task >= 1, "at least 1")
        check("steps", self.steps >= 1, "at least 1")
        check("lr", self.lr is None or (math.isfinite(self.lr) and self.lr > 0), "a positive number")
        check("concurrency", self.concurrency >= 1, "at least 1")


@dataclass(slots=True)
class DistillOutcome:
    pipeline_id: str
    teacher_run: str
    train_run: str
    kept: int  # teacher rollouts that reached min_reward (the SFT data)
    teacher_rollouts: int
    runs: dict[str, str]  # student_before / student_after / teacher -> held-out run id
    heldout: dict[str, float | None]  # the same keys -> mean held-out reward (failed rollouts count 0)
    comparison: dict[str, Any]  # workbench.analysis.compare's, student-before the baseline
    train_summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"pipeline_id": self.pipeline_id, "teacher_run": self.teacher_run or None, "train_run": self.train_run,
                "kept": self.kept, "teacher_rollouts": self.teacher_rollouts, "runs": self.runs,
                "heldout": self.heldout, "comparison": self.comparison}


@dataclass(slots=True)
class Plan:
    """What the stages run, resolved and checked before the first one starts."""

    pipeline_id: str
    train_indices: list[int]
    heldout_indices: list[int]
    teacher: EvalOptions  # the endpoint resolved: base_url and model id set
    train_overrides: dict[str, Any]  # the training run's dotted config, all but its data run (checked)

    def stage(self, name: str) -> dict[str, str]:
        return {"id": self.pipeline_id, "kind": "distill", "stage": name}


def new_pipeline_id() -> str:
    return "dst-" + secrets.token_hex(4)


def plan(opts: DistillOptions) -> Plan:
    """Every check that needs no model: the options, the split, the teacher's endpoint, the student and the
    training configuration."""
    from workbench.authoring import discovery
    from workbench.training.run_config import resolve, trainer_plugin

    opts.validate()
    if trainer_plugin() is None:
        raise ConfigError("distill trains the student with the local trainer: pip install 'rl-workbench[local]'")
    env = discovery.load(opts.env, opts.env_args)
    total = len(list(env.tasks))
    heldout = opts.heldout if opts.heldout is not None else max(1, total // 5)
    if heldout >= total:
        raise ConfigError(f"--heldout {heldout} leaves no training tasks: {env.name!r} has {total} task"
                          f"{'' if total == 1 else 's'}; hold out fewer (or pass more tasks with -a)")
    n_train = total - heldout if opts.n is None else min(opts.n, total - heldout)
    teacher = EvalOptions(env=opts.env, env_args=dict(opts.env_args), model=opts.teacher,
                          base_url=opts.teacher_base_url, concurrency=opts.concurrency)
    teacher.validate()
    try:
        teacher_endpoint = teacher.resolve()
    except ConfigError as e:
        raise ConfigError(f"--teacher {opts.teacher}: {e}") from None
    _check_student(opts.student)
    overrides: dict[str, Any] = {"env.args": dict(opts.env_args), "loop.max_steps": opts.steps,
                                 "loop.eval_tasks": heldout, "trainer.model": opts.student}
    if opts.method == "on-policy":
        _check_teacher_tokenizer(teacher, opts)
        overrides.update({"algorithm.name": "distill", "algorithm.teacher_base_url": teacher_endpoint.base_url,
                          "algorithm.teacher_model": teacher_endpoint.model, "loss.name": "pg"})
    else:
        overrides.update({"algorithm.name": "sft", "algorithm.min_reward": opts.min_reward, "loss.name": "ce"})
    if opts.lr is not None:
        overrides["trainer.lr"] = opts.lr
    cfg = resolve(None, overrides, opts.env)  # checked now; resolved again with the teacher run as its data
    if not cfg.trainer.get("lora", True):
        raise ConfigError("distill evaluates the student with its trained LoRA adapter; full fine-tuning "
                          "(trainer.lora = false in the environment's train.toml) is not supported here")
    return Plan(new_pipeline_id(), list(range(n_train)), list(range(total - heldout, total)), teacher, overrides)


def _check_teacher_tokenizer(teacher: EvalOptions, opts: DistillOptions) -> None:
    """On-policy: the teacher scores the student's own token ids, so it must read them as the student does."""
    from workbench.training.teacher import check_same_tokenizer

    def student() -> tuple[str, str]:
        endpoint = resolve_endpoint(opts.student, model_field="DistillOptions.student")
        return endpoint.base_url, endpoint.model

    teacher_endpoint = teacher.resolve()
    check_same_tokenizer(teacher_endpoint.base_url, teacher_endpoint.model, student)


def _check_student(student: str) -> None:
    """The student is trained here: a registered endpoint cannot be; a near miss of one is a typo."""
    import difflib

    from workbench.config.models import load_models, unknown_model_message

    models = load_models()
    if student in models:
        raise ConfigError(f"--student {student} is a registered endpoint ({models[student].base_url}), which "
                          "cannot be trained here; pass a model the local trainer loads: tiny, a model "
                          "directory or a cached Hugging Face id")
    if difflib.get_close_matches(student, list(models), n=1, cutoff=0.8) and not os.path.exists(student):
        raise ConfigError(f"--student {student}: {unknown_model_message(student, models)}")
    from workbench import plugins

    try:
        check = getattr(plugins.load("endpoints", "embedded"), "check", None)
    except plugins.PluginError as e:
        raise ConfigError(f"--student {student} cannot be served here: the embedded model server is not "
                          f"available ({e})") from None
    if check is not None:
        try:
            check(student)
        except Exception as e:  # the server's own reason (no such directory, not in the cache, ...)
            raise ConfigError(f"--student {student} cannot be served here: {e}") from None


def _kept(store: Store, run_id: str, min_reward: float) -> tuple[int, int, float | None]:
    """(rollouts that reached ``min_reward`` without an error, all rollouts, the best finite reward)."""
    kept = total = 0
    best: float | None = None
    for _pk, _id, _task, reward, status in rollout_results(store.conn, run_id):
        total += 1
        if status != "ok" or reward is None or not math.isfinite(reward):
            continue
        best = reward if best is None else max(best, reward)
        kept += reward >= min_reward
    return kept, total, best


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return dict(json.loads(resp.read() or b"{}"))
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        try:
            detail = json.loads(detail)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            pass
        raise EndpointError(f"{url} answered {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as e:
        raise EndpointError(f"{url} cannot be reached ({e})") from None


async def _evaluate_all(runs: dict[str, EvalOptions], store_path: Path) -> dict[str, EvalOutcome]:
    """The held-out evals at once, each with its own store connection and writer (as ``eval -m A -m B``)."""
    stores = {k: Store(store_path) for k in runs}
    try:
        results = await asyncio.gather(*(evaluate(o, stores[k]) for k, o in runs.items()), return_exceptions=True)
    finally:
        for s in stores.values():
            s.close()
    outcomes: dict[str, EvalOutcome] = {}
    for key, r in zip(runs, results, strict=True):
        if isinstance(r, BaseException):
            if isinstance(r, WorkbenchError):
                raise type(r)(f"the held-out eval of {key.replace('_', '-')}: {r}") from None
            raise r
        outcomes[key] = _finished(r, key.replace("_", "-"))
    return outcomes


def _finished(outcome: EvalOutcome, stage: str) -> EvalOutcome:
    """The outcome of a stage that ran to its end; an interrupted one (Ctrl-C) ends the pipeline there."""
    if outcome.interrupted:
        raise PipelineInterrupted(f"interrupted in the {stage} stage; its run {outcome.run_id} and the runs "
                                  "before it are kept")
    return outcome


async def distill(opts: DistillOptions, store: Store, *, log: Callable[[str], None] | None = None) -> DistillOutcome:
    """Run the pipeline of the module docstring; ``log`` hears each stage as it ends."""
    from workbench.analysis.compare import compare
    from workbench.training.loop import run_dir, train
    from workbench.training.run_config import resolve

    say = log or (lambda _msg: None)
    p = plan(opts)

    if opts.method == "on-policy":  # the student samples, the teacher scores its tokens: no teacher data
        teacher_run, kept, total = "", 0, 0
        cfg = resolve(None, p.train_overrides, opts.env)
    else:
        teacher_run, kept, total = await _teacher_data(p, opts, store, say)
        cfg = resolve(None, {**p.train_overrides, "data.runs": [teacher_run]}, opts.env)
    cfg.raw["pipeline"] = p.stage("train")  # the training run's config is its resolved tables
    trained = await train(cfg, store, threads=opts.threads, log=lambda m: say(f"train: {m}"))
    train_run = trained.run_id
    if trained.status != "completed":
        raise WorkbenchError(f"the student's training run {train_run} ended {trained.status}: "
                             f"{store.get_run(train_run).get('error') or 'see `workbench runs ' + train_run + '`'}")
    s = trained.summary
    what = f"SFT steps of {opts.student} on {kept} teacher rollouts" if opts.method == "sft" else \
        f"on-policy distillation steps of {opts.student} scored by {p.teacher.resolve().model}"
    say(f"train: run {train_run}, {s['steps']} {what}; its own held-out evals {_fmt(s.get('eval_first'))} -> "
        f"{_fmt(s.get('eval_last'))}")
    adapter = run_dir(train_run) / "checkpoint" / "adapter"
    if not (adapter / "adapter_config.json").is_file():
        raise WorkbenchError(f"the training run {train_run} left no LoRA adapter at {adapter}")

    # 4. the held-out evals: the base student, the trained student, the teacher
    student = EvalOptions(env=opts.env, env_args=dict(opts.env_args), model=opts.student,
                          concurrency=opts.concurrency)
    student_endpoint = student.resolve()
    student_url = student_endpoint.base_url
    lora_name = f"distilled-{train_run}"
    await asyncio.to_thread(_post, student_url + "/load_lora_adapter", {"lora_name": lora_name,
                                                                        "lora_path": str(adapter)})
    heldout: dict[str, Any] = {"task_indices": p.heldout_indices, "rollouts_per_task": 1,
                               "comparison_id": p.pipeline_id}
    runs = {
        "student_before": dataclasses.replace(student, **heldout, pipeline=p.stage("student-before")),
        "student_after": dataclasses.replace(student, endpoint=dataclasses.replace(student_endpoint, model=lora_name,
                                                                                   name=None),
                                             **heldout, pipeline=p.stage("student-after")),
        "teacher": dataclasses.replace(p.teacher, **heldout, pipeline=p.stage("teacher")),
    }
    try:
        outcomes = await _evaluate_all(runs, Path(store.path))
    finally:
        try:
            await asyncio.to_thread(_post, student_url + "/unload_lora_adapter", {"lora_name": lora_name})
        except EndpointError:
            pass  # the server went away: so did the adapter
    ids = {k: o.run_id for k, o in outcomes.items()}
    comparison = compare(store.conn, [ids[k] for k in HELDOUT_STAGES])
    means = {m["run_id"]: m["mean_reward"] for m in comparison["models"]}
    for k in HELDOUT_STAGES:
        say(f"{k.replace('_', '-')}: run {ids[k]}, held-out reward {_fmt(means[ids[k]])}")
    return DistillOutcome(p.pipeline_id, teacher_run, train_run, kept, total, ids,
                          {k: means[ids[k]] for k in HELDOUT_STAGES}, comparison, s)


async def _teacher_data(p: Plan, opts: DistillOptions, store: Store,
                        say: Callable[[str], None]) -> tuple[str, int, int]:
    """Stages 1 and 2: the teacher's rollouts on the training split and how many pass the filter. They run
    without token ids: the student learns the conversations, rendered with its own chat template (the
    teacher's tokens would be another tokenizer's)."""
    teacher_train = dataclasses.replace(p.teacher, task_indices=p.train_indices,
                                        rollouts_per_task=opts.rollouts_per_task, tokens=False,
                                        pipeline=p.stage("teacher-train"))
    t = _finished(await evaluate(teacher_train, store), "teacher-train")
    kept, total, best = _kept(store, t.run_id, opts.min_reward)
    say(f"teacher-train: run {t.run_id}, {total} rollouts on {len(p.train_indices)} training tasks, "
        f"{kept} reached --min-reward {opts.min_reward:g}")
    if not kept:
        seen = "none of them finished without an error" if best is None else f"the best reward was {best:g}"
        raise OptionError("DistillOptions.min_reward", opts.min_reward, template="no rollout of the teacher run {run} "
                          "reached {field} {value:g} ({total} rollouts; {seen}); lower {field}, sample more with {r}, or "
                          "use a stronger teacher (the run is kept: `workbench show {run}`)", run=t.run_id, total=total,
                          seen=seen, names={"r": "DistillOptions.rollouts_per_task"})
    return t.run_id, kept, total


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
