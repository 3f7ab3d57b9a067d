"""What Workbench does not run of a verifiers legacy environment, found in its worker
(``verifiers_legacy_worker.py``, which imports this file by its own folder), and the one line that says so.
Standard library only: the verifiers classes are looked at by name and module."""

import inspect
import re

from worker_loop import Refused  # type: ignore[import-not-found,unused-ignore]  # beside this file

#: verifiers classes whose rollouts need what Workbench does not provide, and why.
UNSUPPORTED = {
    "SandboxEnv": "runs its tools in Prime Intellect's remote sandboxes",
    "PythonEnv": "runs its tools in Prime Intellect's remote sandboxes",
    "EnvGroup": "routes each task to one of several environments",
    "CliAgentEnv": "runs an agent program through verifiers' own interception server",
}
#: verifiers decorators that a legacy Environment or Rubric does not run (its v1 taskset API's hooks).
V1_HOOKS = ("reward", "metric", "advantage", "update", "setup")
#: The base classes of verifiers' v1 API (``verifiers.v1``).
V1_BASES = ("Taskset", "Env", "Harness")
#: How a dataset download that failed reads (datasets, huggingface_hub).
_REACH = re.compile(r"Couldn't reach '([^']+)'|Dataset '?([\w./-]+?)'? is not cached|"
                    r"Repository Not Found for url: \S*/datasets/([\w.-]+/[\w.-]+)")


def download_error(e):
    """Where an exception is a dataset download that failed (offline, the Hub out of reach), one line naming
    the dataset; else None."""
    seen, name, hit = e, None, False
    while seen is not None:
        m = _REACH.search(str(seen))
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


def v1_kind(obj):
    """One line when ``obj`` is (or its class derives from) a verifiers v1 taskset, env or harness; else None."""
    cls = obj if isinstance(obj, type) else type(obj)
    base = next((c for c in cls.__mro__ if c.__module__.startswith("verifiers.v1") and c.__name__ in V1_BASES), None)
    if base is None or base is cls:
        return None
    return (f"{cls.__name__} is a verifiers v1 {base.__name__.lower()} (the verifiers.v1 API), which Workbench's "
            "verifiers legacy format does not support: it runs a load_environment() returning a vf.Environment; "
            "a v1 environment exports its Taskset through __all__ instead")


def check_supported(vf_env, vf):
    """Refuses, in one line, an environment whose rollouts need what Workbench does not provide."""
    cls = type(vf_env)
    for c in cls.__mro__:
        if c.__module__.startswith("verifiers.") and c.__name__ in UNSUPPORTED:
            raise Refused(f"verifiers {c.__name__} is not covered by Workbench's verifiers legacy format "
                          f"({UNSUPPORTED[c.__name__]}); {cls.__name__} derives from it")
        if c.__module__.startswith(("verifiers.legacy.envs.experimental", "verifiers.legacy.envs.integrations",
                                   "verifiers.envs.experimental", "verifiers.envs.integrations")):
            raise Refused(f"verifiers {c.__name__} ({c.__module__}) is not covered by Workbench's verifiers legacy "
                          "format: its experimental and integration environments are left out")
    if not isinstance(vf_env, vf.MultiTurnEnv):
        raise Refused(f"verifiers {cls.__name__} is not covered by Workbench's verifiers legacy format: it derives "
                      "from vf.Environment directly, and only vf.MultiTurnEnv rollouts (SingleTurnEnv, "
                      "MultiTurnEnv, ToolEnv, StatefulToolEnv and their subclasses) are")
    if getattr(vf_env, "message_type", "chat") != "chat":
        raise Refused(f"verifiers {cls.__name__}(message_type={vf_env.message_type!r}) is not covered by "
                      "Workbench's verifiers legacy format: only chat environments are")
    for obj in [vf_env, *(owner for owner, _, _ in flatten(vf_env.rubric))]:
        for attr, member in inspect.getmembers(type(obj), callable):
            marks = [m for m in V1_HOOKS if getattr(member, m, False) is True]
            if marks:
                raise Refused(f"verifiers @vf.{marks[0]} on {type(obj).__name__}.{attr} is not covered by "
                              "Workbench's verifiers legacy format (the legacy Environment and Rubric never call it)")
    if vf_env.rubric.has_advantages:
        raise Refused(f"verifiers {type(vf_env.rubric).__name__} computes its own advantages (@vf.advantage), "
                      "which Workbench's verifiers legacy format does not cover")


def flatten(rubric):
    """(owning rubric, function, weight) for every function of a rubric, RubricGroups opened, in order."""
    inner = getattr(rubric, "rubrics", None)
    out = [(rubric, f, float(w)) for f, w in zip(rubric.funcs, rubric.weights, strict=True)]
    for r in inner or ():
        out.extend(flatten(r))
    return out
