"""verifiers 0.4 environments (its v1 API, ``import verifiers.v1 as vf``) as ``wb.Environment`` objects.

verifiers 0.4 cannot live in Workbench's interpreter (it pins ``mcp==2.0.0``), so a v1 environment runs in a
worker process of verifiers' own environment (``venvs.FrameworkEnv``, built by uv on first use, with the other
requirements the environment's package declares), reached through
a :class:`~workbench.frameworks.bridge.WorkerBridge`; the worker is ``verifiers_v1_worker.py``. One worker serves
one loaded environment and runs its rollouts concurrently.

What maps to what:

- the taskset's tasks are the task set: the prompt as the task gives it (system prompt, prompt text or
  messages), ``answer`` when the task data has one, the task data's own fields as ``info``;
- one rollout is one verifiers episode (``Env.run_slot``), run by verifiers' own machinery: its env
  (``SingleAgentEnv`` or the package's ``vf.Env``), its harness (the taskset's own, else ``bash``), its MCP
  toolsets and interception server, its ``@vf.stop``/``@vf.intercept`` hooks; the agents run as local
  processes (verifiers' ``subprocess`` runtime; a local container engine where the environment pins one).
  Every model call goes to the rollout's URL of Workbench's interception proxy, so each is recorded in the
  rollout's token-exact trace, and the rollout's messages are the conversations the agents held;
- the rubric's functions are the task's ``@vf.reward`` functions (with their weights), plugged judges and
  ``@vf.metric`` functions; verifiers scores each rollout in the worker (``Task.score``), and each function
  here reads its value. Rewards and metrics an env's ``finalize`` records (its cross-trace judgement) are
  the ``episode`` reward and the ``episode_metrics`` metric. An episode with several trainable traces
  (best-of-n) scores each function as the mean over them. A reward that raises is a reward error here;
  verifiers then scores none of the rollout's rewards, and neither does Workbench.

Refused, in one line each: agents pinned to a remote runtime (Prime's cloud sandboxes, Modal, E2B) and ACP
harnesses.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hashlib
import os
import re
import shutil
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

import orjson

from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import PROXY_KEY, Harness
from workbench.authoring.rubric import Rubric
from workbench.authoring.sandbox import SandboxError
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError
from workbench.frameworks import package_deps, v1_source
from workbench.frameworks.bridge import WorkerBridge, WorkerError
from workbench.frameworks.venvs import FrameworkEnv, frameworks_dir
from workbench.records.conversations import Conversations
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.records.task import Task

#: verifiers' v1 API, in its own environment.
FRAMEWORK = FrameworkEnv("verifiers", ("verifiers==0.4.0",))
WORKER = Path(__file__).with_name("verifiers_v1_worker.py")
#: The name of the reward (and the metric) holding what an env's ``finalize`` records.
EPISODE = "episode"
#: Errors of a rollout's model calls: the rollout fails as a model error.
_MODEL_ERRORS = ("ProviderError", "InterceptionError")
#: How verifiers words a failure of a task's scoring (``task PickyTask scoring: ValueError: ...``).
_SCORING = re.compile(r"^(?:task \w+ )?scoring\b")
#: Variables that are Workbench's own, never passed to the worker.
_NOT_PASSED = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "WORKBENCH_INDEX_USERNAME",
               "WORKBENCH_INDEX_PASSWORD")


class VerifiersV1Format:
    """verifiers v1 as a ``workbench.env_formats`` plugin."""

    name = "verifiers"

    def claims(self, spec: str) -> Path | None:
        src = v1_source.find(spec)
        return src.path if src is not None else None

    def env_name(self, where: Path | str) -> str:
        return _source(where).module

    def load(self, where: Path | str, env_args: dict[str, Any]) -> Environment:
        return load(_source(where), env_args)


def _source(where: Path | str) -> v1_source.V1Source:
    src = v1_source.find(str(where))
    if src is None:
        raise EnvLoadError(f"{where} is no longer a verifiers v1 environment (no Taskset exported through __all__)")
    return src


#: Names verifiers resolves to its own built-in tasksets before any other module (``verifiers.v1.tasksets``).
BUILTIN_TASKSETS = frozenset({"harbor", "nemo_gym", "openenv", "textarena"})


def _importable(src: v1_source.V1Source) -> tuple[str, Path]:
    """The module name verifiers imports the environment by (its id, as ``vf-eval`` normalises one: dashes
    to underscores, lower case) and the folder it is imported from: the one it lies in, or a folder holding
    only a link to it under that name (for an installed module, so Workbench's own site-packages stays out of
    verifiers' interpreter, and for a name verifiers would spell otherwise)."""
    module = src.module.replace("-", "_").lower()
    if not module.isidentifier():
        raise EnvLoadError(f"{src.path}: verifiers imports an environment by its name, and {src.module!r} "
                           "is not a Python module name; rename it")
    if module in BUILTIN_TASKSETS:
        raise EnvLoadError(f"{src.path}: {module!r} names one of verifiers' built-in tasksets, which verifiers "
                           "would load instead; rename it")
    home = src.path.parent
    own_site = home.name.endswith("-packages") or str(home) in {str(Path(p).resolve()) for p in sys.path if p}
    if module == src.module and not own_site:
        return module, home
    digest = hashlib.sha256(str(src.path).encode()).hexdigest()[:12]
    shim = frameworks_dir() / "modules" / f"{module}-{digest}"
    shim.mkdir(parents=True, exist_ok=True)
    link = shim / (f"{module}.py" if src.path.is_file() else module)
    if not link.is_symlink():
        link.symlink_to(src.path)
    return module, shim


def framework(src: v1_source.V1Source) -> FrameworkEnv:
    """The environment an environment runs in: verifiers 0.4 and the other requirements its package declares
    (``package_deps``; none for most, which share :data:`FRAMEWORK`)."""
    others = package_deps.others(src.path, "verifiers")
    return FrameworkEnv(FRAMEWORK.name, (*FRAMEWORK.requirements, *others)) if others else FRAMEWORK


def start_worker(python: Path, confine: bool = False) -> WorkerBridge:
    """The worker, on verifiers' interpreter ``python``. ``confine``: the processes it starts see a clean
    environment whose home is :func:`agents_home` (verifiers' cache, uv's), not the user's."""
    if confine:
        home = agents_home()
        env = {k: v for k, v in os.environ.items() if k in _PASSED_CONFINED or k.startswith(_PASSED_PREFIXES)}
        env.update({"HOME": str(home), "UV_CACHE_DIR": str(home / ".cache" / "uv"),
                    "UV_PYTHON_INSTALL_DIR": str(home / ".local" / "share" / "uv" / "python"),
                    "PATH": os.pathsep.join([*_tool_dirs(python), _SYSTEM_PATH])})
    else:
        env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED}
    # UV_COMPILE_BYTECODE: the agent programs' environments that verifiers has uv build start without compiling
    env.update({"PYTHONUNBUFFERED": "1", "WORKBENCH_PROXY_KEY": PROXY_KEY, "NO_COLOR": "1", "UV_COMPILE_BYTECODE": "1"})
    return WorkerBridge([str(python), str(WORKER)], name="verifiers v1", env=env)


#: What the confined agents' environment keeps of Workbench's: the locale, time zone, and how to reach the
#: package index (uv installs the agent programs' dependencies); never a key or token.
_PASSED_CONFINED = frozenset({"LANG", "LANGUAGE", "TZ", "TERM", "SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY",
                              "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
                              "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_NATIVE_TLS",
                              "UV_OFFLINE", "UV_PYTHON_DOWNLOADS"})
_PASSED_PREFIXES = ("LC_",)
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def agents_home() -> Path:
    """The home folder of a confined worker's processes: verifiers' cache (its runtimes' folders, the agent
    programs' scripts) and uv's (their environments), the only folder they may write besides their ``/tmp``."""
    home = frameworks_dir() / "agents"
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    return home


def _uv() -> Path | None:
    from workbench.errors import ConfigError
    from workbench.packaging.uv import uv_command

    try:
        return Path(uv_command()[0])
    except ConfigError:
        return None  # verifiers installs uv itself into the agents' home


def _tool_dirs(python: Path) -> list[str]:
    """The folders of the programs a confined worker's processes run: uv, the verifiers environment's own
    interpreter and the Python it is made from."""
    venv = python.parent.parent
    dirs = [str(venv / "bin")]
    base = _base_prefix(venv)
    if base is not None:
        dirs.append(str(base / "bin"))
    uv = _uv()
    if uv is not None:
        dirs.insert(0, str(uv.parent))
    return dirs


def _base_prefix(venv: Path) -> Path | None:
    """The installation of the Python a virtual environment is made from (``home`` in its ``pyvenv.cfg``)."""
    try:
        cfg = (venv / "pyvenv.cfg").read_text()
    except OSError:
        return None
    for line in cfg.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip()).resolve().parent
    return None


def _end(bridge: WorkerBridge, tmp: Path) -> None:
    bridge.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def confinement(python: Path, home: Path, src: v1_source.V1Source, tmp: Path) -> list[str]:
    """The command-line prefix the worker starts every agent process through: ``wb.Local()``'s confinement with
    verifiers' environment, its Python, uv, Workbench's worker files and the environment's own code read-only,
    and :func:`agents_home` writable, ``tmp`` their ``/tmp`` (``[]`` where isolation is turned off)."""
    from workbench.authoring.runtimes import Local

    venv = python.parent.parent
    read_only = [venv, WORKER.parent, home, src.path.resolve()]
    base = _base_prefix(venv)
    if base is not None and not str(base).startswith("/usr/"):
        read_only.append(base)
    uv = _uv()
    if uv is not None:
        read_only.append(uv)
    return Local().confinement(read_only=read_only, writable=[agents_home()], tmp=tmp)


def load(src: v1_source.V1Source, env_args: dict[str, Any]) -> Environment:
    module, home = _importable(src)
    python = framework(src).ensure()
    tmp = Path(tempfile.mkdtemp(prefix="tmp-", dir=agents_home()))
    try:
        confine = confinement(python, home, src, tmp)
    except SandboxError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EnvLoadError(f"verifiers v1 environment {src.module!r}: its agents cannot run confined: {e}") from None
    bridge = start_worker(python, confine=bool(confine))
    try:
        info = bridge.call("load", module=module, path=str(home), env_args=env_args, confine=confine,
                           confine_tmp=str(tmp))
    except WorkerError as e:
        _end(bridge, tmp)
        raise EnvLoadError(f"verifiers v1 environment {src.module!r}: {e}") from None
    except BaseException:
        _end(bridge, tmp)
        raise
    harness = V1Harness(bridge, info, tmp)
    tasks = [_task(row) for row in info["tasks"]]
    harness.index = {t.id: row["idx"] for t, row in zip(tasks, info["tasks"], strict=True)}
    env = Environment(name=src.module, tasks=TaskSet(lambda: list(tasks), name=src.module), harness=harness,
                      rubric=_rubric(info, harness), sampling=Sampling(max_tokens=4096, temperature=1.0),
                      description=f"verifiers v1 {info['env']} over {info['task_type']}")
    harness.environment = env
    env.adapter = f"verifiers {info.get('verifiers', 'unknown')}"
    env.dialect = "verifiers v1"
    return env


def _task(row: dict[str, Any]) -> Task:
    messages = row.get("messages") or []
    prompt: str | list[dict[str, Any]] = messages if messages else ""
    return Task(prompt=prompt, answer=row.get("answer"), info=dict(row.get("info") or {}), id=row["key"][:16])


# -- the harness -----------------------------------------------------------------------------------------
class V1Harness(Harness):
    """Runs one verifiers episode per rollout in the worker; its model calls come back through the proxy."""

    needs_proxy = True

    def __init__(self, bridge: WorkerBridge, info: dict[str, Any], tmp: Path) -> None:
        self.bridge = bridge
        self.info = info
        self.index: dict[str, int] = {}
        self.max_turns = 1_000_000
        #: the environment this harness runs (set once it is built)
        self.environment: Environment | None = None
        # the worker (and its agents' /tmp) ends with the environment that uses it (a reloaded environment
        # starts its own)
        weakref.finalize(self, _end, bridge, tmp)

    @property
    def env_version(self) -> str:
        """The environment's version (its files' hash): a rollout's kept scores are those of this code."""
        return self.environment.version if self.environment is not None else ""

    def describe(self) -> str:
        harnesses = ",".join(sorted(set(self.info.get("harnesses", {}).values())))
        return f"verifiers.{self.info.get('env', 'Env')}({harnesses})"

    def start(self, rollout: Rollout) -> None:
        rollout.messages = rollout.task.messages(None)

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        idx = self.index.get(rollout.task.id, rollout.task.info.get("idx"))
        if not isinstance(idx, int):
            raise RolloutFailed("harness", self.describe(), "the task is not one of the verifiers taskset's tasks")
        conversations = rollout.conversations = Conversations()
        try:
            result = await self.bridge.acall("rollout", task=idx, base_url=rollout.base_url, model=rollout.model)
        except WorkerError as e:
            raise RolloutFailed("harness", self.describe(), str(e)) from None
        finally:
            if len(conversations):
                rollout.messages = conversations.messages()
                if len(conversations) > 1:
                    rollout.state["conversations"] = conversations.lengths()
        scored = [t for t in result["traces"] if t["trainable"]] or result["traces"]
        if not len(conversations) and scored:
            rollout.messages = list(scored[-1]["messages"])
        elif len(conversations) > 1:
            rollout.messages, rollout.state["conversations"] = _scored_last(conversations, scored)
        rollout.state["verifiers"] = {**summary(result, scored), "env_version": self.env_version}
        for err in [*result["errors"], *(e for t in result["traces"] for e in t["errors"])]:
            text = f"{err['type']}: {err['message']}"[:500]
            if err["type"] in _MODEL_ERRORS:
                raise RolloutFailed("model.error", rollout.base_url, text)
            if not _scoring_error(err):
                rollout.errors.append(RolloutError("harness", self.describe(), text))


def _replies(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == "assistant"]


def _scored_last(conversations: Conversations, scored: list[dict[str, Any]]) -> tuple[list[Any], list[int]]:
    """The conversations with those of the scored traces last (an untrainable agent's, such as a simulated
    user's, before them), so the rollout's completion is the scored agent's."""
    flat, parts = conversations.messages(), []
    for n in conversations.lengths():
        parts.append(flat[:n])
        flat = flat[n:]
    mine = [_replies(t["messages"]) for t in scored]
    order = sorted(parts, key=lambda p: _replies(p) in mine)  # stable: each group keeps its order
    return [m for p in order for m in p], [len(p) for p in order]


def _scoring_error(err: dict[str, Any]) -> bool:
    """A failure of the task's scoring: a reward error here, reported by the functions that were not scored."""
    return err["type"] == "TaskError" and _SCORING.match(str(err["message"])) is not None


def summary(result: dict[str, Any], traces: list[dict[str, Any]]) -> dict[str, Any]:
    """What the rubric reads: each reward (score, weight) and metric, the mean over the scored traces; a
    reward verifiers left unscored is None with why."""
    rewards: dict[str, Any] = {}
    metrics: dict[str, Any] = {}
    for name in dict.fromkeys(k for t in traces for k in t["rewards"]):
        values = [t["rewards"].get(name) for t in traces]
        if any(v is None for v in values):
            rewards[name] = None
            continue
        rewards[name] = {"score": sum(v["score"] for v in values) / len(values), "weight": values[0]["weight"]}
    for name in dict.fromkeys(k for t in traces for k in t["metrics"]):
        got = [t["metrics"].get(name) for t in traces]
        metrics[name] = None if any(v is None for v in got) else sum(got) / len(got)
    why = [f"{e['type']}: {e['message']}" for t in traces for e in t["errors"]] + [
        f"{e['type']}: {e['message']}" for e in result["errors"]]
    return {"rewards": rewards, "metrics": metrics, "unscored": why[-1][:500] if why else "",
            "stop_condition": next((t["stop_condition"] for t in reversed(traces) if t["stop_condition"]), None),
            "traces": [{"id": t["id"], "agent": t["agent"], "reward": t["reward"]} for t in result["traces"]]}


# -- the rubric ------------------------------------------------------------------------------------------
class NotScored(Exception):
    """A function verifiers did not score for this rollout."""


class Scorer:
    """The scores of a rollout: those verifiers computed while it ran (``state["verifiers"]``), else the task's
    own scoring of its messages in the worker (``validate``'s gold answers, a rollout stored without them),
    asked once per conversation however many functions read it."""

    def __init__(self, harness: V1Harness, capacity: int = 256) -> None:
        self.harness = harness
        self._asked: collections.OrderedDict[bytes, concurrent.futures.Future[Any]] = collections.OrderedDict()
        self.capacity = capacity

    async def scores(self, state: dict[str, Any] | None, messages: list[dict[str, Any]] | None,
                     task: Task | None) -> dict[str, Any]:
        got = (state or {}).get("verifiers")
        if isinstance(got, dict) and isinstance(got.get("rewards"), dict) and got.get("env_version") in (
                None, self.harness.env_version, ""):
            return got  # verifiers' own scores of the live rollout, by the code that is loaded now
        if task is None:
            raise NotScored("verifiers scores a v1 rollout from its task and messages; neither is here")
        idx = self.harness.index.get(task.id, task.info.get("idx"))
        if not isinstance(idx, int):
            raise NotScored("the task is not one of the verifiers taskset's tasks")
        msgs = [m for m in (messages or []) if isinstance(m, dict) and m.get("role")]
        key = orjson.dumps([idx, msgs], option=orjson.OPT_SORT_KEYS)
        future = self._asked.get(key)
        if future is None:
            future = self._asked[key] = self.harness.bridge.submit("score", task=idx, messages=msgs)
            while len(self._asked) > self.capacity:
                self._asked.popitem(last=False)
        try:
            result = await asyncio.wrap_future(future)
        except WorkerError as e:
            raise NotScored(f"the verifiers worker could not score it: {e}") from None
        return summary(result, result["traces"])


def _reward(scorer: Scorer, name: str) -> Any:
    async def score(state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> float:
        got = await scorer.scores(state, messages, task)
        value = got["rewards"].get(name, "absent")
        if value == "absent":
            raise NotScored(f"verifiers recorded no {name!r} for this rollout (a reward returning keyed scores "
                            "records them by key)")
        if value is None:
            raise NotScored(f"not scored by verifiers: {got.get('unscored') or 'no reason given'}")
        return float(value["score"])

    score.__name__ = name
    return score


def _metric(scorer: Scorer, name: str) -> Any:
    async def score(state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> float:
        got = await scorer.scores(state, messages, task)
        value = got["metrics"].get(name)
        if value is None:
            raise NotScored(f"not measured by verifiers: {got.get('unscored') or 'no value recorded'}")
        return float(value)

    score.__name__ = name
    return score


def _episode(scorer: Scorer, known: set[str], kind: str) -> Any:
    async def episode(state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> dict[str, float]:
        got = await scorer.scores(state, messages, task)
        if kind == "rewards":
            return {k: v["score"] * v["weight"] for k, v in got["rewards"].items() if k not in known and v}
        return {k: v for k, v in got["metrics"].items() if k not in known and v is not None}

    return episode


def _rubric(info: dict[str, Any], harness: V1Harness) -> Rubric:
    scorer = Scorer(harness)
    rubric = Rubric()
    for name, weight in info["rewards"].items():
        rubric.reward(_reward(scorer, name), weight=weight, name=name)
    for name in info["metrics"]:
        if name not in info["rewards"]:
            rubric.metric(_metric(scorer, name), name=name)
    if info.get("finalize"):
        rubric.reward(_episode(scorer, set(info["rewards"]), "rewards"), weight=1.0, name=EPISODE)
        rubric.metric(_episode(scorer, set(info["metrics"]), "metrics"), name=f"{EPISODE}_metrics")
    return rubric


FORMAT = VerifiersV1Format()

__all__ = ["FORMAT", "FRAMEWORK", "V1Harness", "VerifiersV1Format", "load"]
