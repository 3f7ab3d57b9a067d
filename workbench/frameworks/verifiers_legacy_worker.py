"""The worker that runs a verifiers environment of the legacy API (0.3.x: a ``load_environment()`` returning a
``vf.SingleTurnEnv``, ``vf.ToolEnv``, ...) inside that verifiers version's own interpreter
(``workbench.frameworks.venvs``). Standard library, verifiers and its dependencies only: this file never imports
Workbench, which lives in another interpreter. Its serving loop is ``worker_loop.py``, and what it refuses
``verifiers_legacy_checks.py``, both beside it.

    python verifiers_legacy_worker.py

Requests (``op``):

- ``load``: ``{"path", "name", "env_args", "extra_paths"}``: imports the file or package at ``path`` (its folder
  first on the import path, as ``python file.py`` would), calls ``load_environment(**env_args)`` and checks that
  the environment is one Workbench runs. Answers its tasks (one per row of its eval dataset, else its dataset,
  the prompt as verifiers builds it), its rubric's functions, its sampling arguments.
- ``rollout``: ``{"task" | "row", "key", "base_url", "model", "sampling_args"}``: the env's own
  ``env.rollout`` with verifiers' chat-completions client on ``base_url``; the live state is kept under ``key``
  for scoring. Answers the conversation, the state's own keys and the rollout's error.
- ``score``: ``{"rollout": {"key" | "row", "messages", "state"}}``: every non-group function of the rubric, in
  order, with verifiers' own arguments, on the live state (else one rebuilt from the messages).
- ``score_group``: ``{"function", "rollouts": [...]}``: one group function over a group's rollouts.
"""

import collections
import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import sys
import traceback
from typing import Any

import shared_tls  # type: ignore[import-not-found,unused-ignore]  # beside this file
from verifiers_legacy_checks import (  # type: ignore[import-not-found,unused-ignore]  # beside this file
    check_supported,
    download_error,
    flatten,
    v1_kind,
)
from worker_loop import JsonWorker, Refused, serve  # type: ignore[import-not-found,unused-ignore]  # beside this file

#: The variable the worker's model client reads its API key from (Workbench's proxy holds the real one).
KEY_VAR = "WORKBENCH_PROXY_KEY"
#: How many rollouts' live states are kept for scoring (the oldest go first; a rollout scored later is
#: scored on a state rebuilt from its messages).
LIVE_STATES = 4096
#: Keys of a verifiers State that are its machinery, not data a reward or a reader needs.
STATE_MACHINERY = frozenset({
    "input", "client", "model", "sampling_args", "tool_defs", "trajectory", "prompt", "completion",
    "usage_tracker", "usage", "timing", "task", "reward", "metrics", "advantage", "error", "trajectory_id",
    "final_env_response", "answer", "info", "example_id", "responses",
})
#: Errors of the model client: the rollout's model call failed (Workbench's proxy answered with an error).
MODEL_ERRORS = ("APIError", "APIStatusError", "APIConnectionError", "APITimeoutError", "InternalServerError",
                "RateLimitError", "BadRequestError")


def legacy(name):
    """verifiers' module ``name`` (``clients``, ``utils.async_utils``): under ``verifiers.legacy`` from 0.3.1 on,
    under ``verifiers`` itself in 0.3.0."""
    try:
        return importlib.import_module(f"verifiers.legacy.{name}")
    except ModuleNotFoundError:
        return importlib.import_module(f"verifiers.{name}")


def version():
    from importlib import metadata

    try:
        return metadata.version("verifiers")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree without metadata
        return "unknown"


# -- loading ---------------------------------------------------------------------------------------------
def import_env(path, name, extra_paths):
    """The environment's module, imported from its file or package folder."""
    home = os.path.dirname(path)
    if home not in sys.path:
        sys.path.insert(0, home)
    for extra in extra_paths or ():
        if extra not in sys.path:
            sys.path.append(extra)  # a pulled environment's own dependencies, after verifiers' own
    digest = hashlib.sha1(path.encode()).hexdigest()[:8]
    modname = f"_workbench_env_{name.replace('-', '_')}_{digest}"
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        spec = importlib.util.spec_from_file_location(modname, init, submodule_search_locations=[path])
    else:
        spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise Refused(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise Refused(f"{e.filename or path}:{e.lineno}: syntax error: {e.msg}; fix the file and try again") from None
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        msg = download_error(e)
        raise Refused(f"environment {name!r} {msg}" if msg else f"importing {path} failed: {where(e)}") from None
    return module


def where(e):
    tb = traceback.extract_tb(e.__traceback__)
    loc = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {e}{loc}"


def plain(obj):
    """``obj`` as JSON data: pydantic models dumped, mappings and sequences walked."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(exclude_none=True)
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def message(m):
    """An OpenAI chat message dict without the empty fields verifiers' conversions (and Arrow) add."""
    d = plain(dict(m) if not hasattr(m, "model_dump") else m)
    if d.get("tool_calls"):
        d["tool_calls"] = [dict(tc, function=dict(tc.get("function") or {})) for tc in d["tool_calls"]]
    return d


def state_keys(state):
    """What a reader and a re-score need of a verifiers State: its stop fields and the env's own keys."""
    out = {}
    for k, v in dict.items(state):
        if k in STATE_MACHINERY or k.startswith("_"):
            continue
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            v = str(v)
        out[k] = v
    out["stop_condition"] = state.get("stop_condition")
    return out


def chain_text(err):
    parts: list = []
    e = err
    while e is not None and len(parts) < 4:
        if str(e):
            parts.append(str(e))
        e = e.__cause__ or e.__context__
    return ": ".join(parts)[:500] or type(err).__name__


def is_model_error(err):
    e = err
    while e is not None:
        if any(c.__name__ in MODEL_ERRORS and c.__module__.startswith("openai") for c in type(e).__mro__):
            return True
        e = e.__cause__ or e.__context__
    return False


class Worker(JsonWorker):
    def __init__(self, out):
        super().__init__(out)
        self.env: Any = None
        self.rows: list = []
        self.functions: list = []  # (name, owner, function, weight, is_group)
        self.live: collections.OrderedDict = collections.OrderedDict()
        self.clients: dict = {}
        self.http: Any = None  # the HTTP client of every rollout's model client (made on first use)

    async def dispatch(self, op, request):
        if op == "load":
            return self.load(request["path"], request["name"], request.get("env_args") or {},
                             request.get("extra_paths") or [])
        if op == "rollout":
            return await self.rollout(request)
        if op == "score":
            return await self.score(request["rollout"])
        if op == "score_group":
            return await self.score_group(request["function"], request["rollouts"])
        raise Refused(f"unknown request {op!r}")

    def cancelled(self, request):
        if request.get("op") == "rollout":
            self.live.pop(request.get("key"), None)

    # -- load ----------------------------------------------------------------------------------------
    def load(self, path, name, env_args, extra_paths):
        module = import_env(path, name, extra_paths)
        fn = getattr(module, "load_environment", None)
        if fn is None or not callable(fn):
            raise Refused(f"{path} defines no load_environment(**kwargs) function")
        try:
            sig = inspect.signature(fn)
            sig.bind(**env_args)
        except TypeError as e:
            accepted = ", ".join(p for p in sig.parameters if p != "kwargs") or "none"
            raise Refused(f"load_environment of {name!r} does not accept these env_args ({e}); it accepts: "
                          f"{accepted}") from None
        try:
            vf_env = fn(**env_args)
        except Exception as e:
            traceback.print_exc(file=sys.stderr)
            msg = download_error(e)
            raise Refused(f"environment {name!r} {msg}" if msg else f"load_environment of {name!r} raised {where(e)}") from None
        import verifiers as vf

        if not isinstance(vf_env, vf.Environment):
            why = v1_kind(vf_env)
            kind = type(vf_env).__name__
            raise Refused(f"load_environment of {name!r} returned {kind}: {why}" if why else
                          f"load_environment of {name!r} returned {kind}, not a verifiers Environment")
        check_supported(vf_env, vf)
        self.env = vf_env
        self.rows = self.dataset_rows(name)
        names: set = set()
        for owner, f, weight in flatten(vf_env.rubric):
            base = getattr(f, "__name__", type(f).__name__)
            fname, i = base, 2
            while fname in names:
                fname, i = f"{base}_{i}", i + 1
            names.add(fname)
            self.functions.append((fname, owner, f, weight, bool(owner._is_group_func(f))))
        max_turns = getattr(vf_env, "max_turns", -1)
        return {
            "tasks": [self.task_row(row) for row in self.rows],
            "functions": [{"name": n, "weight": w, "group": g} for n, _, _, w, g in self.functions],
            "sampling_args": plain(dict(vf_env.sampling_args or {})),
            "env": type(vf_env).__name__, "description": (type(vf_env).__doc__ or "").strip()[:200],
            "max_turns": max_turns if isinstance(max_turns, int) and max_turns > 0 else None,
            "verifiers": version(),
        }

    def dataset_rows(self, name):
        env = self.env
        try:
            ds = env.build_eval_dataset() or env.build_dataset()
        except Exception as e:
            msg = download_error(e)
            if msg:
                raise Refused(f"verifiers environment {type(env).__name__} {msg}") from None
            raise
        if ds is None:
            raise Refused(f"verifiers environment {type(env).__name__} has no dataset or eval_dataset")
        return ds.to_list()

    @staticmethod
    def task_row(row):
        info = row.get("info")
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                info = {"info": info}
        prompt = row["prompt"]
        if isinstance(prompt, list):
            prompt = [message(m) for m in prompt]
        answer = row.get("answer", "")
        return {"prompt": prompt, "answer": "" if answer is None else answer, "info": dict(info or {})}

    # -- rollouts ------------------------------------------------------------------------------------
    def client(self, base_url):
        """verifiers' client for one rollout's URL; every rollout's shares one HTTP client (its connections, and
        the TLS context that is most of what starting one costs)."""
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        found = self.clients.get(base_url)
        if found is None:
            if len(self.clients) > 64:
                self.clients.clear()
            if self.http is None:
                self.http = DefaultAsyncHttpxClient(timeout=3600.0)
            # no retries here: Workbench's proxy answers for the model, and a failure is the rollout's
            openai = AsyncOpenAI(base_url=base_url, api_key=os.environ.get(KEY_VAR, "unused"), max_retries=0,
                                 timeout=3600.0, http_client=self.http)
            found = self.clients[base_url] = legacy("clients").OpenAIChatCompletionsClient(openai)
        return found

    def input_row(self, request):
        task = request.get("task")
        if isinstance(task, int):
            if not 0 <= task < len(self.rows):
                raise Refused(f"task {task} is not among the environment's {len(self.rows)} tasks")
            return dict(self.rows[task])
        row = dict(request.get("row") or {})
        return {"prompt": row.get("prompt") or [], "answer": row.get("answer", ""), "info": row.get("info") or {},
                "example_id": 0}

    async def rollout(self, request):
        row = self.input_row(request)
        client = self.client(request["base_url"])
        state = await self.env.rollout(row, client, request["model"], dict(request.get("sampling_args") or {}))
        key = request.get("key")
        if key is not None:
            self.live[key] = state
            while len(self.live) > LIVE_STATES:
                self.live.popitem(last=False)
        messages = None
        if state.get("completion") is not None:
            native, _ = await client.to_native_prompt(list(state["prompt"]) + list(state["completion"]))
            messages = [message(m) for m in native]
        err = state.get("error")
        error = None if err is None else {"type": type(err).__name__, "message": chain_text(err),
                                          "model": is_model_error(err)}
        return {"messages": messages, "state": state_keys(state), "error": error}

    # -- scoring -------------------------------------------------------------------------------------
    async def vf_state(self, rollout):
        """The verifiers State of a rollout: the live one after a rollout; for a re-score or a validation,
        one rebuilt as verifiers starts a rollout (``init_state``, then the env's ``setup_state``), with the
        stored messages as prompt and completion (one trajectory step per assistant turn, no tokens) and the
        stored state's keys over it."""
        live = self.live.get(rollout.get("key"))
        if live is not None:
            return live
        normalize_messages = legacy("utils.message_utils").normalize_messages
        row = self.input_row(rollout)
        prompt = row["prompt"] if isinstance(row["prompt"], list) else [{"role": "user", "content": row["prompt"]}]
        row["prompt"] = prompt
        st = await self.env.init_state(row, self.client("http://127.0.0.1:9/v1"), "", {})
        try:
            st = await self.env.setup_state(st) or st
        except Exception:  # noqa: BLE001 - the env's own setup; a reward that needs what it makes says so itself
            traceback.print_exc(file=sys.stderr)
        messages = rollout.get("messages") or []
        rest = [message(m) for m in messages[len(prompt):]]
        st["completion"] = normalize_messages(rest, field_name="completion") if rest else []
        st["trajectory"] = [{"prompt": st["prompt"], "completion": [m], "reward": None, "advantage": None}
                            for m in st["completion"] if getattr(m, "role", None) == "assistant"]
        for k, v in (rollout.get("state") or {}).items():
            if k not in STATE_MACHINERY and not k.startswith("_"):
                st[k] = v
        return st

    async def score(self, rollout):
        """Each non-group function's value (or its error, in one line) on the rollout, in the rubric's order."""
        maybe_await = legacy("utils.async_utils").maybe_await
        st = await self.vf_state(rollout)
        scores: dict = {}
        for name, owner, fn, _, group in self.functions:
            if group:
                continue
            try:
                value = await maybe_await(fn, **named_args(fn, owner.score_objects(st)))
                scores[name] = {"value": float(value)}
            except Exception as e:  # noqa: BLE001 - a reward that raises is a reward error
                traceback.print_exc(file=sys.stderr)
                scores[name] = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:500]}
        return {"scores": scores, "state": state_keys(st)}

    async def score_group(self, function, rollouts):
        maybe_await = legacy("utils.async_utils").maybe_await
        found = next(((owner, fn) for name, owner, fn, _, group in self.functions if name == function and group), None)
        if found is None:
            raise Refused(f"the rubric has no group function {function!r}")
        owner, fn = found
        states = [await self.vf_state(r) for r in rollouts]
        values = await maybe_await(fn, **named_args(fn, owner.group_score_objects(states)))
        return {"values": [float(v) for v in values]}


def named_args(fn, merged):
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return merged
    return {k: v for k, v in merged.items() if k in params}


if __name__ == "__main__":
    shared_tls.share()  # an env's own clients (a judge's) start without loading the CA bundle each time
    serve(Worker)
