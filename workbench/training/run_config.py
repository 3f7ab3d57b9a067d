"""The run configuration of ``workbench train``: a TOML file, dotted command-line overrides, and
validation that names the nearest valid key for a typo.

    [env]        name = "arithmetic"; args = {...}
    [loop]       max_steps, groups_per_step, rollouts_per_task, concurrency, max_off_policy_steps,
                 async_level (how many steps generation may run ahead of training), sync,
                 eval_every, eval_tasks (held out), eval_rollouts, checkpoint_every, temperature, max_tokens, seed
    [algorithm]  name = "grpo" | "rloo" | "sft" | "distill", plus the algorithm's options
    [loss]       name = "pg" | "ce", kl_coef, plus the loss's options
    [trainer]    workbench_local.training.trainer.TrainerConfig (model, lora, lora_rank, lr, ...)
    [data]       runs = ["RUN", ...]: SFT on those runs' stored rollouts instead of sampling (``--data RUN``)

``--trainer.lr 1e-4`` sets ``[trainer] lr``; values are parsed as TOML (``true``, ``[1, 2]``,
``"text"``), falling back to a plain string.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeGuard, runtime_checkable

from workbench import plugins
from workbench.errors import ConfigError, nearest
from workbench.training.algorithms import ALGORITHMS, make_algorithm
from workbench.training.roles import TrainRoles


@dataclass(slots=True)
class LoopConfig:
    """How rollouts and optimizer steps interleave (the ``[loop]`` table)."""

    max_steps: int = 20
    groups_per_step: int = 8  # groups (tasks) per optimizer step
    rollouts_per_task: int = 8  # the group size
    concurrency: int = 32
    max_off_policy_steps: int = 2  # rollouts older than this many policy versions are dropped
    async_level: int = 1  # generation may run this many steps ahead of training (0 = sync)
    sync: bool = False  # one step at a time: generate, train, update, repeat (for comparison)
    eval_every: int = 0  # steps between held-out evals (0 = only at the start and the end)
    eval_tasks: int = 0  # the last N tasks are held out for evals (never trained on)
    eval_rollouts: int = 1  # samples per held-out task in each eval
    checkpoint_every: int = 5
    temperature: float | None = None  # sampling overrides (default: the environment's)
    max_tokens: int | None = None
    seed: int = 0
    timeout_s: float = 600.0

    def eval_due(self, step: int, first: int = 0) -> bool:
        """Whether a held-out eval runs under the policy of ``step``; ``first`` is the run's first
        policy (0, or the step a resumed run starts from)."""
        return bool(self.eval_tasks) and (step in (first, self.max_steps)
                                          or bool(self.eval_every and step % self.eval_every == 0))


DEFAULTS: dict[str, Any] = {
    "env": {"name": "", "args": {}},
    "loop": dataclasses.asdict(LoopConfig()),
    "algorithm": {"name": "grpo"},
    "loss": {"name": "pg", "kl_coef": 0.0},
    "trainer": {},  # filled from the trainer plugin's defaults
    "data": {"runs": []},  # stored runs to train on (SFT) instead of sampling: workbench.training.sft_data
    "cloud": {},  # where and on what a launched run trains: checked by workbench_cloud.plan, unused by train
}


@runtime_checkable
class Trainer(Protocol):
    """What a ``workbench.trainers`` plugin names: what ``workbench train`` needs of a trainer without
    running it."""

    def defaults(self) -> dict[str, Any]:
        """The ``[trainer]`` table's defaults."""
        ...

    def check(self, tables: dict[str, Any]) -> None:
        """Refuse (``ConfigError``) an unknown loss, loss option or trainer option."""
        ...

    def roles(self) -> TrainRoles:
        """Where the inference server and the trainer process run."""
        ...


def is_trainer(found: object) -> TypeGuard[Trainer]:
    return isinstance(found, Trainer)


def trainer_plugin() -> Trainer | None:
    """The installed trainer (the ``workbench.trainers`` plugin ``local``), or None where it cannot be
    imported (the plain CLI without the local extra: the trainer then checks its own tables)."""
    if not plugins.available("trainers", "local"):
        return None
    try:
        return plugins.load("trainers", "local", is_trainer)
    except plugins.PluginError:
        return None


def _trainer_defaults() -> dict[str, Any]:
    trainer = trainer_plugin()
    try:
        return trainer.defaults() if trainer else {}
    except ImportError:
        return {}


@dataclass(slots=True)
class RunConfig:
    env: str
    env_args: dict[str, Any]
    loop: LoopConfig
    algorithm: dict[str, Any]  # name + options
    loss: dict[str, Any]  # name + kl_coef + options
    trainer: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict)  # the resolved tables, as printed by --dry-run
    data: list[str] = field(default_factory=list)  # runs whose stored rollouts are the SFT data (no sampling)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.raw)


def _parse_value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_overrides(args: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["--trainer.lr", "1e-4", "--loop.sync=true"]`` → ``{"trainer.lr": 1e-4, "loop.sync": True}``."""
    out: dict[str, Any] = {}
    it = iter(args)
    for a in it:
        if not a.startswith("--") or "." not in a.split("=", 1)[0]:
            raise ConfigError(f"unexpected argument {a!r}: overrides look like --section.key VALUE "
                              "(e.g. --trainer.lr 1e-4)")
        key, eq, value = a[2:].partition("=")
        if not eq:
            try:
                value = next(it)
            except StopIteration:
                raise ConfigError(f"--{key} needs a value") from None
        out[key] = _parse_value(value)
    return out


def _check_keys(section: str, table: dict[str, Any], valid: list[str]) -> None:
    for k in table:
        if k not in valid:
            raise ConfigError(f"unknown key {section}.{k}{nearest(k, [*valid])}; valid {section} keys: "
                              f"{', '.join(valid)}")


def resolve(file: str | Path | None = None, overrides: dict[str, Any] | None = None,
            env: str | None = None) -> RunConfig:
    """The run configuration: defaults, then ``file``, then ``env``, then dotted ``overrides``."""
    return validate_tables(load_tables(file, overrides, env))


#: The run config an environment may ship beside its code (``<package>/train.toml``, or
#: ``<name>.train.toml`` beside a single-file env): the settings its author found to train it well.
ENV_CONFIG_FILE = "train.toml"


def env_config_file(env: str) -> Path | None:
    """The run config shipped with ``env``, if it has one (an unknown env is reported when it loads)."""
    from workbench.authoring import discovery
    from workbench.errors import WorkbenchError

    try:
        ref = discovery.resolve(env)
    except WorkbenchError:
        return None
    if ref.path is None:
        return None
    path = ref.path / ENV_CONFIG_FILE if ref.path.is_dir() else ref.path.with_suffix("." + ENV_CONFIG_FILE)
    return path if path.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None


def _merge(tables: dict[str, Any], loaded: dict[str, Any], source: Path) -> None:
    for section, table in loaded.items():
        if section not in tables:
            raise ConfigError(f"{source}: unknown section {section!r}{nearest(section, list(tables))}; "
                              f"sections: {', '.join(tables)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{source}: {section!r} must be a table")
        tables[section].update(table)


def load_tables(file: str | Path | None = None, overrides: dict[str, Any] | None = None,
                env: str | None = None, *, env_config: bool = True) -> dict[str, Any]:
    """The merged tables, not yet validated. Later layers win: the defaults, the run config the
    environment ships (``env_config``), ``file``, ``env``, then the dotted ``overrides``."""
    tables: dict[str, Any] = copy.deepcopy(DEFAULTS)
    tables["trainer"] = _trainer_defaults()
    loaded = _read_toml(Path(file)) if file is not None else {}
    name = env or (loaded.get("env") or {}).get("name") or (overrides or {}).get("env.name")
    shipped = env_config_file(name) if env_config and isinstance(name, str) and name else None
    if shipped is not None:
        own = _read_toml(shipped)
        (own.get("env") or {}).pop("name", None)  # it configures the env; it does not choose it
        _merge(tables, own, shipped)
    if file is not None:
        _merge(tables, loaded, Path(file))
    if env:
        tables["env"]["name"] = env
    for dotted, value in (overrides or {}).items():
        section, _, key = dotted.partition(".")
        if section not in tables or not key:
            raise ConfigError(f"unknown key {dotted}{nearest(section, list(tables))}; keys look like "
                              "loop.max_steps or trainer.lr")
        tables[section][key] = value
    return tables


def _number_in(v: Any, low: float, high: float = math.inf) -> bool:
    """A finite number (not a bool) in [low, high]."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and low <= v <= high


def validate_tables(tables: dict[str, Any]) -> RunConfig:
    _check_keys("env", tables["env"], ["name", "args"])
    loop_keys = [f.name for f in dataclasses.fields(LoopConfig)]
    _check_keys("loop", tables["loop"], loop_keys)
    trainer_defaults = _trainer_defaults()
    if trainer_defaults:
        _check_keys("trainer", tables["trainer"], list(trainer_defaults))
    name = tables["env"]["name"]
    if not isinstance(name, str) or not name:
        raise ConfigError("no environment: `workbench train ENV` or [env] name = \"...\" in the config")
    if not isinstance(tables["env"]["args"], dict):
        raise ConfigError("env.args must be a table of keyword arguments")
    loop = LoopConfig(**tables["loop"])
    for k in ("max_steps", "groups_per_step", "rollouts_per_task", "concurrency", "eval_rollouts"):
        v = getattr(loop, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"loop.{k} must be a positive integer, not {v!r}")
    for k in ("max_off_policy_steps", "async_level", "eval_every", "eval_tasks", "checkpoint_every"):
        v = getattr(loop, k)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ConfigError(f"loop.{k} must be a non-negative integer, not {v!r}")
    if not isinstance(loop.sync, bool):
        raise ConfigError(f"loop.sync must be true or false, not {loop.sync!r}")
    if loop.temperature is not None and not _number_in(loop.temperature, 0.0, 5.0):
        raise ConfigError(f"loop.temperature must be a number from 0 to 5, not {loop.temperature!r}")
    if loop.max_tokens is not None and (not isinstance(loop.max_tokens, int) or isinstance(loop.max_tokens, bool)
                                        or loop.max_tokens < 1):
        raise ConfigError(f"loop.max_tokens must be a whole number of at least 1, not {loop.max_tokens!r}")
    if not _number_in(loop.timeout_s, 0.0) or loop.timeout_s <= 0:
        raise ConfigError(f"loop.timeout_s must be a positive number of seconds, not {loop.timeout_s!r}")
    if not isinstance(loop.seed, int) or isinstance(loop.seed, bool):
        raise ConfigError(f"loop.seed must be a whole number, not {loop.seed!r}")
    if loop.sync:
        loop.async_level = 0
    tables["loop"] = dataclasses.asdict(loop)
    if loop.async_level > loop.max_off_policy_steps:
        raise ConfigError(f"loop.async_level ({loop.async_level}) exceeds loop.max_off_policy_steps "
                          f"({loop.max_off_policy_steps}): every rollout generated that far ahead would be dropped")
    algo = dict(tables["algorithm"])
    aname = algo.pop("name", "grpo")
    if aname not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {aname!r}{nearest(aname, list(ALGORITHMS))}; "
                          f"choose one of {', '.join(ALGORITHMS)}")
    algorithm = make_algorithm(aname, **algo)  # unknown options fail here, naming the nearest
    if algorithm.name == "distill" and not (getattr(algorithm, "teacher_base_url", "")
                                            and getattr(algorithm, "teacher_model", "")):
        raise ConfigError("on-policy distillation needs its teacher: --algorithm.teacher_base_url URL (vLLM or "
                          "`workbench serve`, sharing the student's tokenizer) and --algorithm.teacher_model NAME")
    data = _check_data(tables, aname)
    loss = dict(tables["loss"])
    lname = loss.pop("name", "pg")
    trainer = trainer_plugin()
    if trainer_defaults and trainer is not None:
        trainer.check(tables)  # the loss and the trainer options, by the trainer that runs them
    return RunConfig(env=name, env_args=dict(tables["env"]["args"]), loop=loop,
                     algorithm={"name": aname, **algo}, loss={"name": lname, **loss},
                     trainer=dict(tables["trainer"]), raw=tables, data=data)


def _check_data(tables: dict[str, Any], algorithm: str) -> list[str]:
    """The ``[data]`` runs: SFT data needs the sft algorithm and the cross-entropy loss (a stored
    conversation has no sampler logprobs for a policy gradient); the default loss, pg, becomes ce."""
    tables.setdefault("data", {"runs": []})
    _check_keys("data", tables["data"], ["runs", "allow_other_env"])
    if not isinstance(tables["data"].get("allow_other_env", False), bool):
        raise ConfigError("data.allow_other_env must be true or false")
    runs = tables["data"].get("runs") or []
    if isinstance(runs, str):
        runs = [runs]
    if not isinstance(runs, list) or not all(isinstance(r, str) and r for r in runs):
        raise ConfigError(f"data.runs must be a list of run ids, not {runs!r}")
    tables["data"]["runs"] = runs = list(dict.fromkeys(runs))
    if runs:
        if ALGORITHMS[algorithm].name != "sft":
            raise ConfigError(f"--data trains on stored rollouts with SFT, not {algorithm}: add --algorithm.name sft "
                              "(or drop --data to sample)")
        lname = tables["loss"].get("name", "pg")
        if lname == DEFAULTS["loss"]["name"]:  # the sampling default: SFT's own loss instead
            tables["loss"]["name"] = lname = ALGORITHMS[algorithm].default_loss
        if lname not in ("ce", "cross_entropy"):
            raise ConfigError(f"--data trains with the ce loss, not {lname!r}: stored conversations have no "
                              "sampler logprobs for a policy gradient (drop loss.name, or set it to ce)")
    return runs


def to_toml(tables: dict[str, Any]) -> str:
    """The resolved configuration as TOML (what ``--dry-run`` prints; loadable with ``--config``)."""
    import json

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{json.dumps(k)} = {val(x)}" for k, x in v.items()) + "}"
        raise ConfigError(f"cannot write {v!r} as TOML")

    lines: list[str] = []
    for section, table in tables.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {val(v)}" for k, v in table.items() if v is not None]
        lines.append("")
    return "\n".join(lines)
