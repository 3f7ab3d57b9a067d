"""verifiers environments (the legacy 0.3.x API the Environments Hub uses) as ``wb.Environment`` objects.

A module whose ``load_environment`` returns a verifiers ``Environment`` is wrapped here:

- the task set is the env's ``eval_dataset`` (else its ``dataset``), one task per row, with the prompt as
  verifiers builds it (``system_prompt``, ``few_shot``, ``question``) and ``answer``/``info`` as given;
- the harness runs the env's own rollout (``env.rollout``: its ``env_response``, its ``@vf.stop`` stop
  conditions, its tools, its ``setup_state`` and cleanup handlers) with a verifiers client whose every
  model call is ``Rollout.generate``: Workbench's model client, trace and debugger see each turn;
- the rubric calls each function of the env's rubric (``RubricGroup``s flattened) with verifiers' own
  arguments (``Rubric.score_objects``: ``prompt``, ``completion`` as verifiers messages, ``answer``,
  ``state``, ``info``, ``task``, ``parser``, ...); weight 0 makes a metric, and a function that raises is a
  reward error (verifiers scores it 0, and so does the weighted total here).

verifiers is imported only inside these functions: it is the optional extra ``rl-workbench[verifiers]``.
"""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import orjson

from workbench.authoring.env_adapters import EnvAdapter
from workbench.authoring.environment import Environment, Sampling
from workbench.authoring.harness import Harness
from workbench.authoring.rubric import Rubric
from workbench.authoring.tasks import TaskSet
from workbench.errors import EnvLoadError
from workbench.records.rollout import Rollout, RolloutError, RolloutFailed
from workbench.records.task import Task

EXTRA_HINT = "pip install 'rl-workbench[verifiers]'"
#: verifiers classes whose rollouts need what this adapter does not provide, and why.
_UNSUPPORTED = {
    "SandboxEnv": "runs its tools in Prime Intellect's remote sandboxes",
    "PythonEnv": "runs its tools in Prime Intellect's remote sandboxes",
    "EnvGroup": "routes each task to one of several environments",
    "CliAgentEnv": "runs an agent program through verifiers' own interception server",
}
#: verifiers decorators that a legacy Environment or Rubric does not run (its taskset API's hooks).
_V1_HOOKS = ("reward", "metric", "advantage", "update", "setup")
#: Keys of a verifiers State that are its machinery, not data a reward or a reader needs.
_STATE_MACHINERY = frozenset({
    "input", "client", "model", "sampling_args", "tool_defs", "trajectory", "prompt", "completion",
    "usage_tracker", "usage", "timing", "task", "reward", "metrics", "advantage", "error", "trajectory_id",
    "final_env_response", "answer", "info", "example_id", "responses",
})


def is_verifiers_env(obj: Any) -> bool:
    """Whether ``obj`` is a verifiers ``Environment`` (checked without importing verifiers)."""
    return any(c.__module__.split(".")[0] == "verifiers" and c.__name__ == "Environment" for c in type(obj).__mro__)


#: The base classes of verifiers' v1 API (``verifiers.v1``): a taskset, an env, a harness, exported by a
#: package through ``__all__`` instead of a ``load_environment``.
_V1_BASES = ("Taskset", "Env", "Harness")


def v1_kind(obj: Any) -> str | None:
    """What ``obj`` (a module, a class or an instance) is, when it is (or exports) a verifiers v1 taskset,
    env or harness: one line saying so, as the adapter runs the legacy API only; else None. Checked
    without importing verifiers."""
    if isinstance(obj, type):
        found = [obj]
    elif isinstance(obj, ModuleType):
        names = getattr(obj, "__all__", None)
        values = [getattr(obj, n, None) for n in names] if isinstance(names, list | tuple) else list(vars(obj).values())
        found = [v for v in values if isinstance(v, type)]
    else:
        found = [type(obj)]
    for cls in found:
        base = next((c for c in cls.__mro__ if c.__module__.startswith("verifiers.v1")
                     and c.__name__ in _V1_BASES), None)
        if base is not None and base is not cls:
            return (f"{cls.__name__} is a verifiers v1 {base.__name__.lower()} (the verifiers.v1 API of verifiers "
                    f"{verifiers_version()}), which Workbench's verifiers adapter does not support yet: it runs "
                    "environments of the legacy API, a load_environment() returning a vf.Environment")
    return None


def verifiers_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("verifiers")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


def missing_extra(error: BaseException) -> str | None:
    """The one-line error for an import that failed because verifiers is not installed, else None."""
    e: BaseException | None = error
    while e is not None:
        if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0] == "verifiers":
            return f"needs the verifiers package, which is not installed: {EXTRA_HINT}"
        e = e.__cause__ or e.__context__
    return None


_REACH = re.compile(r"Couldn't reach '([^']+)'|Dataset '?([\w./-]+?)'? is not cached|Repository Not Found for url: \S*/datasets/([\w.-]+/[\w.-]+)")


def download_error(e: BaseException) -> str | None:
    """Where an exception is a dataset download that failed (offline, the Hub out of reach), one line naming
    the dataset; else None."""
    seen: BaseException | None = e
    name = None
    hit = False
    while seen is not None:
        text = str(seen)
        m = _REACH.search(text)
        if m:
            name = name or next(g for g in m.groups() if g)
        mod = type(seen).__module__.split(".")[0]
        if m or mod in ("huggingface_hub", "datasets") and isinstance(seen, OSError | ConnectionError):
            hit = True
        seen = seen.__cause__ or seen.__context__
    if not hit:
        return None
    what = f"the dataset {name!r}" if name else "a dataset"
    return (f"needs {what}, a download from the Hugging Face Hub, which cannot be reached (offline?): run it once "
            "online so the dataset is cached, or point HF_HOME at a cache that has it")


# -- loading -----------------------------------------------------------------------------------------------
def wrap(vf_env: Any, name: str) -> Environment:
    """The ``wb.Environment`` that runs ``vf_env`` (a verifiers Environment)."""
    import verifiers as vf

    _check_supported(vf_env, vf)
    harness = VerifiersHarness(vf_env)
    tasks = TaskSet(lambda: _tasks(vf_env, name, harness), name=name)
    env = Environment(name=name, tasks=tasks, harness=harness, rubric=_rubric(vf_env),
                      sampling=_sampling(vf_env.sampling_args), description=(type(vf_env).__doc__ or "").strip()[:200])
    env.adapter = f"verifiers {verifiers_version()}"
    env.dialect = "verifiers legacy"
    return env


def _check_supported(vf_env: Any, vf: Any) -> None:
    cls = type(vf_env)
    for c in cls.__mro__:
        if c.__module__.startswith("verifiers.") and c.__name__ in _UNSUPPORTED:
            raise EnvLoadError(f"verifiers {c.__name__} is not covered by Workbench's verifiers adapter "
                               f"({_UNSUPPORTED[c.__name__]}); {cls.__name__} derives from it")
        if c.__module__.startswith(("verifiers.legacy.envs.experimental", "verifiers.legacy.envs.integrations")):
            raise EnvLoadError(f"verifiers {c.__name__} ({c.__module__}) is not covered by Workbench's verifiers "
                               "adapter: its experimental and integration environments are left out")
    if not isinstance(vf_env, vf.MultiTurnEnv):
        raise EnvLoadError(f"verifiers {cls.__name__} is not covered by Workbench's verifiers adapter: it derives "
                           "from vf.Environment directly, and only vf.MultiTurnEnv rollouts (SingleTurnEnv, "
                           "MultiTurnEnv, ToolEnv, StatefulToolEnv and their subclasses) are")
    if getattr(vf_env, "message_type", "chat") != "chat":
        raise EnvLoadError(f"verifiers {cls.__name__}(message_type={vf_env.message_type!r}) is not covered by "
                           "Workbench's verifiers adapter: only chat environments are")
    for obj in [vf_env, *(owner for owner, _, _ in _flatten(vf_env.rubric))]:
        for attr, member in inspect.getmembers(type(obj), callable):
            marks = [m for m in _V1_HOOKS if getattr(member, m, False) is True]
            if marks:
                raise EnvLoadError(f"verifiers @vf.{marks[0]} on {type(obj).__name__}.{attr} is not covered by "
                                   "Workbench's verifiers adapter (the legacy Environment and Rubric never call it)")
    if vf_env.rubric.has_advantages:
        raise EnvLoadError(f"verifiers {type(vf_env.rubric).__name__} computes its own advantages (@vf.advantage), "
                           "which Workbench's verifiers adapter does not cover")


def _dataset(vf_env: Any) -> Any:
    try:
        ds = vf_env.build_eval_dataset() or vf_env.build_dataset()
    except Exception as e:
        msg = download_error(e)
        if msg:
            raise EnvLoadError(f"verifiers environment {type(vf_env).__name__} {msg}") from None
        raise
    if ds is None:
        raise EnvLoadError(f"verifiers environment {type(vf_env).__name__} has no dataset or eval_dataset")
    return ds


def _tasks(vf_env: Any, name: str, harness: VerifiersHarness) -> list[Task]:
    """One task per row of the env's eval dataset (else its dataset), prompts as verifiers built them."""
    out = []
    for row in _dataset(vf_env).to_list():
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = orjson.loads(info)
            except orjson.JSONDecodeError:
                info = {"info": info}
        prompt = row["prompt"]
        if isinstance(prompt, list):
            prompt = [_clean(m) for m in prompt]
        task = Task(prompt=prompt, answer=row.get("answer", ""), info=dict(info or {}))
        harness.rows[task.id] = row
        out.append(task)
    return out


def _sampling(args: Mapping[str, Any]) -> Sampling:
    args = dict(args or {})
    extra = dict(args.pop("extra_body", None) or {})
    args.pop("n", None)
    known = {k: args.pop(k) for k in ("max_tokens", "temperature", "top_p", "stop", "seed") if args.get(k) is not None}
    if "max_completion_tokens" in args and "max_tokens" not in known:
        known["max_tokens"] = args.pop("max_completion_tokens")
    extra.update({k: v for k, v in args.items() if v is not None})
    return Sampling(**known, extra=extra)


def _clean(m: Any) -> dict[str, Any]:
    """An OpenAI chat message dict without the empty fields verifiers' conversions (and Arrow) add."""
    d = dict(m)
    return {k: v for k, v in d.items() if v is not None}


# -- the harness -------------------------------------------------------------------------------------------
class VerifiersHarness(Harness):
    """Runs a verifiers env's own rollout loop, every model call through the rollout's Workbench client."""

    def __init__(self, vf_env: Any) -> None:
        self.vf_env = vf_env
        self.max_turns = vf_env.max_turns if getattr(vf_env, "max_turns", -1) > 0 else 1_000_000
        self.rows: dict[str, dict[str, Any]] = {}

    def describe(self) -> str:
        return f"verifiers.{type(self.vf_env).__name__}"

    def rollout_input(self, task: Task, sample: int = 0) -> dict[str, Any]:
        row = self.rows.get(task.id)
        if row is not None:
            return dict(row)
        return {"prompt": task.prompt, "answer": task.answer if task.answer is not None else "",
                "info": dict(task.info), "example_id": 0}

    async def run(self, rollout: Rollout) -> None:
        self.start(rollout)
        client = _client_class()(rollout)
        state = await self.vf_env.rollout(self.rollout_input(rollout.task, rollout.sample_index), client,
                                          rollout.model, dict(rollout.params))
        rollout.state["_vf_state"] = state
        if state.get("completion") is not None:
            native, _ = await client.to_native_prompt(list(state["prompt"]) + list(state["completion"]))
            rollout.messages = [_clean(m) for m in native]
        _copy_state(state, rollout.state)
        err = state.get("error")
        if err is not None:
            _raise_workbench(err)  # a model or timeout failure of Workbench's own: the rollout fails
            rollout.errors.append(RolloutError("harness", self.describe(), f"{type(err).__name__}: {_chain_text(err)}"))


def _copy_state(state: Any, into: dict[str, Any]) -> None:
    """What a reader and a re-score need of the verifiers State (a dict subclass of an untyped package,
    read as a plain dict): its stop fields and the env's own keys."""
    for k, v in dict.items(state):
        if k in _STATE_MACHINERY or k.startswith("_"):
            continue
        try:
            orjson.dumps(v)
        except TypeError:
            v = str(v)
        into[k] = v
    into["stop_condition"] = state.get("stop_condition")


def _raise_workbench(err: BaseException) -> None:
    from workbench.records.model_reply import ModelError

    e: BaseException | None = err
    while e is not None:
        if isinstance(e, ModelError | RolloutFailed | TimeoutError):
            raise e
        e = e.__cause__ or e.__context__


def _chain_text(err: BaseException) -> str:
    parts: list[str] = []
    e: BaseException | None = err
    while e is not None and len(parts) < 4:
        if str(e):
            parts.append(str(e))
        e = e.__cause__ or e.__context__
    return ": ".join(parts)[:500] or type(err).__name__


_CLIENT: type | None = None
_FINISH = {"stop", "length", "tool_calls", "content_filter", "function_call"}


def _client_class() -> type:
    """verifiers' chat-completions client, its model call replaced by ``Rollout.generate`` (built once, on
    first use, so importing this module does not import verifiers)."""
    global _CLIENT
    if _CLIENT is not None:
        return _CLIENT
    from openai.types.chat import ChatCompletion
    from verifiers.legacy.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

    class WorkbenchClient(OpenAIChatCompletionsClient):
        """The rollout is the client: verifiers converts messages and tools, Workbench makes the call."""

        def setup_client(self, config: Any) -> Any:  # pragma: no cover - always built from a rollout
            raise EnvLoadError("the Workbench verifiers client is built from a rollout, not a ClientConfig")

        async def close(self) -> None:
            return None

        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any, tools: Any = None,
                                      **kwargs: Any) -> Any:
            rollout: Rollout = self.client
            msgs = [_clean(m) for m in prompt]
            for m in msgs:
                if m.get("tool_calls"):
                    m["tool_calls"] = [dict(tc, function=dict(tc["function"])) for tc in m["tool_calls"]]
            message = await rollout.generate(msgs, tools=[dict(t) for t in tools] if tools else None)
            call = rollout.calls[-1]
            reply = {"role": "assistant", "content": message.get("content")}
            if message.get("tool_calls"):
                reply["tool_calls"] = [{"type": "function", **tc} for tc in message["tool_calls"]]
            finish = call.finish_reason if call.finish_reason in _FINISH else "stop"
            return ChatCompletion.model_validate({
                "id": f"{rollout.id}.{call.index}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "choices": [{"index": 0, "message": reply, "finish_reason": finish}],
                "usage": {"prompt_tokens": call.prompt_tokens, "completion_tokens": call.completion_tokens,
                          "total_tokens": call.prompt_tokens + call.completion_tokens},
            })

    _CLIENT = WorkbenchClient
    return _CLIENT


# -- the rubric --------------------------------------------------------------------------------------------
def _flatten(rubric: Any) -> list[tuple[Any, Callable[..., Any], float]]:
    """(owning rubric, function, weight) for every function of a rubric, RubricGroups opened, in order."""
    inner = getattr(rubric, "rubrics", None)
    own = list(zip(rubric.funcs, rubric.weights, strict=True))
    out = [(rubric, f, float(w)) for f, w in own]
    if inner is not None:
        for r in inner:
            out.extend(_flatten(r))
    return out


def _rubric(vf_env: Any) -> Rubric:
    rubric = Rubric()
    names: set[str] = set()
    for owner, fn, weight in _flatten(vf_env.rubric):
        base = getattr(fn, "__name__", type(fn).__name__)
        name, i = base, 2
        while name in names:
            name, i = f"{base}_{i}", i + 1
        names.add(name)
        if owner._is_group_func(fn):
            rubric.group_reward(_group_call(vf_env, owner, fn), weight=weight, name=name)
        elif weight == 0.0:
            rubric.metric(_rollout_call(vf_env, owner, fn), name=name)
        else:
            rubric.reward(_rollout_call(vf_env, owner, fn), weight=weight, name=name)
    return rubric


def _named_args(fn: Callable[..., Any], merged: dict[str, Any]) -> dict[str, Any]:
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return merged
    return {k: v for k, v in merged.items() if k in params}


def _rollout_call(vf_env: Any, owner: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    async def score(state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> float:
        from verifiers.legacy.utils.async_utils import maybe_await

        vst = await _vf_state(vf_env, state, messages, task)
        try:
            return float(await maybe_await(fn, **_named_args(fn, owner.score_objects(vst))))
        finally:
            if state is not None and state.get("_vf_state") is vst:
                _copy_state(vst, state)  # what scoring kept in the state (a judge's answers) is stored too

    return score


def _group_call(vf_env: Any, owner: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
    async def score(states: list[dict[str, Any]], messages_list: list[list[dict[str, Any]]],
                    tasks: list[Task]) -> list[float]:
        from verifiers.legacy.utils.async_utils import maybe_await

        vsts = [await _vf_state(vf_env, s, m, t) for s, m, t in zip(states, messages_list, tasks, strict=True)]
        values = await maybe_await(fn, **_named_args(fn, owner.group_score_objects(vsts)))
        return [float(v) for v in values]

    return score


async def _vf_state(vf_env: Any, state: dict[str, Any], messages: list[dict[str, Any]], task: Task) -> Any:
    """The verifiers State of a rollout: the live one after a rollout; for a re-score or a validation, one
    rebuilt as verifiers starts a rollout (``init_state``, then the env's ``setup_state``), with the stored
    messages as prompt and completion (one trajectory step per assistant turn, no tokens) and the stored
    state's keys over it."""
    live = state.get("_vf_state") if state else None
    if live is not None:
        return live
    from verifiers.legacy.utils.message_utils import normalize_messages

    prompt = task.prompt if isinstance(task.prompt, list) else [{"role": "user", "content": task.prompt}]
    row = {"prompt": prompt, "answer": task.answer if task.answer is not None else "", "info": dict(task.info),
           "example_id": 0}
    st = await vf_env.init_state(row, _client_class()(None), "", {})
    try:
        st = await vf_env.setup_state(st) or st
    except Exception:  # noqa: BLE001 - the env's own setup; a reward that needs what it makes says so itself
        pass
    rest = [_clean(m) for m in messages[len(prompt):]] if messages else []
    st["completion"] = normalize_messages(rest, field_name="completion") if rest else []
    st["trajectory"] = [{"prompt": st["prompt"], "completion": [m], "reward": None, "advantage": None}
                        for m in st["completion"] if getattr(m, "role", None) == "assistant"]
    for k, v in (state or {}).items():
        if k not in _STATE_MACHINERY and not k.startswith("_"):
            st[k] = v
    return st


class VerifiersAdapter:
    """verifiers as a ``workbench.env_adapters`` plugin (``verifiers``): discovery's way to this module."""

    def adopts(self, obj: Any) -> bool:
        return is_verifiers_env(obj)

    def wrap(self, obj: Any, name: str) -> Environment:
        return wrap(obj, name)

    def unsupported(self, obj: Any) -> str | None:
        return v1_kind(obj)

    def missing_extra(self, error: BaseException) -> str | None:
        return missing_extra(error)

    def download_error(self, error: BaseException) -> str | None:
        return download_error(error)


ADAPTER: EnvAdapter = VerifiersAdapter()
