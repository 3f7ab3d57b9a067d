"""verifiers environments of its legacy API (0.3.x, as the Environments Hub has them: a ``load_environment()``
returning a ``vf.SingleTurnEnv``, ``vf.MultiTurnEnv``, ``vf.ToolEnv``, ``vf.StatefulToolEnv``, ...) as
``wb.Environment`` objects.

verifiers 0.3 needs ``mcp<2``, which Workbench's interpreter does not have, so a legacy environment runs in a
worker process of the verifiers version it declares (``venvs.FrameworkEnv``, built by uv on first use; a
``verifiers`` requirement in its package's ``pyproject.toml`` or ``requirements.txt`` picks it, else
``verifiers==0.3.1``; the package's other requirements are installed beside it), reached through a
:class:`~workbench.frameworks.bridge.WorkerBridge`; the worker is ``verifiers_legacy_worker.py``. It is recognised from its source, never imported here (``legacy_source``).

What maps to what:

- the task set is the env's ``eval_dataset`` (else its ``dataset``), one task per row, with the prompt as
  verifiers builds it (``system_prompt``, ``few_shot``, ``question``) and ``answer``/``info`` as given;
- one rollout is the env's own ``env.rollout`` (its ``env_response``, ``@vf.stop`` conditions, tools,
  ``setup_state`` and cleanup handlers) with verifiers' chat-completions client on the rollout's URL of
  Workbench's interception proxy: every model call is recorded in the rollout's token-exact trace;
- the rubric is each function of the env's rubric (``RubricGroup``s flattened), called in the worker with
  verifiers' own arguments on the rollout's live state: weight 0 makes a metric, a group function a group
  reward, and a function that raises is a reward error (verifiers scores it 0, and so does the total here).

Refused, in one line each: ``SandboxEnv``/``PythonEnv`` (remote sandboxes), ``EnvGroup``, ``CliAgentEnv``,
experimental and integration environments, a direct ``vf.Environment`` subclass, completion (non-chat)
environments, v1 hooks (``@vf.reward``, ``@vf.metric``, ...) on a legacy class, and a ``load_environment``
returning a v1 object.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import os
import secrets
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import PROXY_KEY, Harness
from workbench.authoring.rubric import Rubric
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError
from workbench.frameworks import legacy_source, model_relay, package_deps
from workbench.frameworks.bridge import WorkerBridge, WorkerError
from workbench.frameworks.legacy_source import LegacySource
from workbench.frameworks.venvs import FrameworkEnv
from workbench.records.model_reply import ModelError
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.records.task import Task

WORKER = Path(__file__).with_name("verifiers_legacy_worker.py")
#: Variables that are Workbench's own, never passed to the worker.
_NOT_PASSED = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "WORKBENCH_INDEX_USERNAME",
               "WORKBENCH_INDEX_PASSWORD")


def framework(requirement: str, others: tuple[str, ...] = ()) -> FrameworkEnv:
    """The isolated environment of one verifiers requirement (``verifiers==0.3.1``) and the other requirements
    an environment declares (``package_deps``)."""
    return FrameworkEnv("verifiers", (requirement, *others))


class VerifiersLegacyFormat:
    """verifiers' legacy API as a ``workbench.env_formats`` plugin."""

    name = "verifiers-legacy"

    def claims(self, spec: str) -> Path | None:
        src = legacy_source.find(spec)
        return src.path if src is not None else None

    def env_name(self, where: Path | str) -> str:
        return _source(where).module

    def load(self, where: Path | str, env_args: dict[str, Any]) -> Environment:
        return load(_source(where), env_args)


def _source(where: Path | str) -> LegacySource:
    src = legacy_source.find(str(where))
    if src is None:
        raise EnvLoadError(f"{where} is no longer a verifiers environment (a module importing verifiers that "
                           "defines load_environment)")
    return src


def start_worker(requirement: str, others: tuple[str, ...] = ()) -> WorkerBridge:
    python = framework(requirement, others).ensure()
    env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED}
    env.update({"PYTHONUNBUFFERED": "1", "WORKBENCH_PROXY_KEY": PROXY_KEY, "NO_COLOR": "1"})
    return WorkerBridge([str(python), str(WORKER)], name="verifiers legacy", env=env)


def _hub_deps(path: Path) -> list[str]:
    """A pulled environment's dependencies folder (``hub pull``), for the worker's import path."""
    from workbench.authoring.discovery import hub_records

    for rec in hub_records().values():
        deps = rec.get("deps")
        if isinstance(rec.get("path"), str) and Path(rec["path"]).resolve() == path and isinstance(deps, str):
            return [deps] if Path(deps).is_dir() else []
    return []


def load(src: LegacySource, env_args: dict[str, Any]) -> Environment:
    requirement = legacy_source.requirement(src)
    hub_deps = _hub_deps(src.path)
    # a pulled environment's dependencies are installed already (`hub pull`); a local one's are installed here
    bridge = start_worker(requirement, () if hub_deps else package_deps.others(src.path, "verifiers"))
    try:
        info = bridge.call("load", path=str(src.path), name=src.module, env_args=env_args,
                           extra_paths=hub_deps)
    except WorkerError as e:
        bridge.close()
        raise EnvLoadError(f"verifiers environment {src.module!r}: {e}") from None
    except BaseException:
        bridge.close()
        raise
    harness = LegacyHarness(bridge, info)
    tasks = [Task(prompt=row["prompt"], answer=row["answer"], info=row["info"]) for row in info["tasks"]]
    harness.index = {t.id: i for i, t in enumerate(tasks)}
    env = Environment(name=src.module, tasks=TaskSet(lambda: list(tasks), name=src.module), harness=harness,
                      rubric=_rubric(info, Scorer(harness)), sampling=_sampling(info["sampling_args"]),
                      description=info["description"])
    env.adapter = f"verifiers {info.get('verifiers', 'unknown')}"
    env.dialect = "verifiers legacy"
    return env


def _sampling(args: Mapping[str, Any]) -> Sampling:
    args = dict(args or {})
    extra = dict(args.pop("extra_body", None) or {})
    args.pop("n", None)
    known = {k: args.pop(k) for k in ("max_tokens", "temperature", "top_p", "stop", "seed") if args.get(k) is not None}
    if "max_completion_tokens" in args and "max_tokens" not in known:
        known["max_tokens"] = args.pop("max_completion_tokens")
    extra.update({k: v for k, v in args.items() if v is not None})
    return Sampling(**known, extra=extra)


# -- the harness -----------------------------------------------------------------------------------------
class LegacyHarness(Harness):
    """Runs the env's own rollout in the worker; its model calls come back through the proxy."""

    needs_proxy = True

    def __init__(self, bridge: WorkerBridge, info: dict[str, Any]) -> None:
        self.bridge = bridge
        self.info = info
        self.index: dict[str, int] = {}
        self.max_turns = info.get("max_turns") or 1_000_000
        # the worker ends with the environment that uses it (a reloaded environment starts its own)
        weakref.finalize(self, bridge.shutdown)

    def describe(self) -> str:
        return f"verifiers.{self.info.get('env', 'Environment')}"

    def request(self, task: Task) -> dict[str, Any]:
        """How the worker finds a task: its row of the env's dataset, else the task itself."""
        idx = self.index.get(task.id)
        if idx is not None:
            return {"task": idx}
        return {"row": {"prompt": task.prompt, "answer": task.answer if task.answer is not None else "",
                        "info": dict(task.info)}}

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        key = f"{rollout.id}~{secrets.token_hex(6)}"
        base_url, relay, relay_key = rollout.base_url, None, ""
        if model_relay.needed(rollout):  # no proxy in this run (training, a probe): each call is generate()
            relay = await model_relay.relay()
            relay_key, base_url = relay.register(rollout)
        failure = None
        try:
            result = await self.bridge.acall("rollout", **self.request(rollout.task), key=key, base_url=base_url,
                                             model=rollout.model, sampling_args=dict(rollout.params))
        except WorkerError as e:
            raise RolloutFailed("harness", self.describe(), str(e)) from None
        finally:
            if relay is not None:
                failure = relay.release(relay_key)
        if isinstance(failure, ModelError | RolloutFailed | TimeoutError):
            raise failure  # a model or timeout failure of Workbench's own: the rollout fails
        rollout.state["_vf_key"] = key
        if result["messages"] is not None:
            rollout.messages = result["messages"]
        rollout.state.update(result["state"])
        err = result["error"]
        if err is not None:
            text = f"{err['type']}: {err['message']}"[:500]
            if err["model"]:
                raise RolloutFailed("model.error", rollout.base_url, text)
            rollout.errors.append(RolloutError("harness", self.describe(), text))


# -- the rubric ------------------------------------------------------------------------------------------
class RewardFailed(Exception):
    """A function of the env's rubric that raised (its one line is the message)."""


class Scorer:
    """The rollout-level scores of a rollout, computed once in the worker however many functions read them:
    on the live state of a rollout this worker ran, else on one rebuilt from the stored messages and state."""

    def __init__(self, harness: LegacyHarness, capacity: int = 1024) -> None:
        self.harness = harness
        self._asked: collections.OrderedDict[Any, concurrent.futures.Future[Any]] = collections.OrderedDict()
        self.capacity = capacity

    def describe(self, state: dict[str, Any] | None, messages: list[dict[str, Any]] | None,
                 task: Task | None) -> dict[str, Any]:
        """What the worker needs to find (or rebuild) the rollout's verifiers State."""
        got: dict[str, Any] = {"key": (state or {}).get("_vf_key")}
        if task is not None:
            got.update(self.harness.request(task))
        got["messages"] = [m for m in (messages or []) if isinstance(m, dict) and m.get("role")]
        got["state"] = {k: v for k, v in (state or {}).items() if not k.startswith("_")}
        return got

    async def scores(self, state: dict[str, Any] | None, messages: list[dict[str, Any]] | None,
                     task: Task | None) -> dict[str, Any]:
        rollout = self.describe(state, messages, task)
        key = rollout["key"] or orjson.dumps(rollout, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                                             default=str)
        future = self._asked.get(key)
        if future is None:
            future = self._asked[key] = self.harness.bridge.submit("score", rollout=rollout)
            while len(self._asked) > self.capacity:
                self._asked.popitem(last=False)
        try:
            result: dict[str, Any] = await asyncio.wrap_future(future)
        except WorkerError as e:
            raise RewardFailed(f"the verifiers worker could not score it: {e}") from None
        if state is not None:
            state.update(result["state"])  # what scoring kept in the state (a judge's answers) is stored too
        return result

    async def group(self, name: str, states: list[dict[str, Any]], messages_list: list[list[dict[str, Any]]],
                    tasks: list[Task]) -> list[float]:
        rollouts = [self.describe(s, m, t) for s, m, t in zip(states, messages_list, tasks, strict=True)]
        try:
            result = await self.harness.bridge.acall("score_group", function=name, rollouts=rollouts)
        except WorkerError as e:
            raise RewardFailed(str(e)) from None
        return [float(v) for v in result["values"]]


def _rollout_fn(scorer: Scorer, name: str) -> Any:
    async def score(state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> float:
        got = (await scorer.scores(state, messages, task))["scores"].get(name) or {"error": "not scored"}
        if "error" in got:
            raise RewardFailed(got["error"])
        return float(got["value"])

    score.__name__ = name
    return score


def _group_fn(scorer: Scorer, name: str) -> Any:
    async def score(states: list[dict[str, Any]], messages_list: list[list[dict[str, Any]]],
                    tasks: list[Task]) -> list[float]:
        return await scorer.group(name, states, messages_list, tasks)

    score.__name__ = name
    return score


def _rubric(info: dict[str, Any], scorer: Scorer) -> Rubric:
    rubric = Rubric()
    for fn in info["functions"]:
        name, weight = fn["name"], float(fn["weight"])
        if fn["group"]:
            rubric.group_reward(_group_fn(scorer, name), weight=weight, name=name)
        elif weight == 0.0:
            rubric.metric(_rollout_fn(scorer, name), name=name)
        else:
            rubric.reward(_rollout_fn(scorer, name), weight=weight, name=name)
    return rubric


FORMAT = VerifiersLegacyFormat()

__all__ = ["FORMAT", "LegacyHarness", "VerifiersLegacyFormat", "framework", "load"]
