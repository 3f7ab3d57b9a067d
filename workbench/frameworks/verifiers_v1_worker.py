"""The worker that runs a verifiers v1 environment (``import verifiers.v1 as vf``) inside the verifiers
environment's own interpreter (``workbench.frameworks.venvs``). Standard library and verifiers only: this file
never imports Workbench, which lives in another interpreter.

    python verifiers_v1_worker.py

It reads one JSON request a line on stdin and writes one JSON answer a line on stdout (the answer carries the
request's ``id``); rollouts run concurrently on one event loop. Requests (``op``):

- ``load``: ``{"module", "path", "env_args", "confine", "confine_tmp"}``: the environment whose taskset is the
  package ``module`` (found on ``path``), its configuration built from ``env_args`` as
  ``vf-eval --env.taskset.KEY`` (or ``--env.KEY`` for a knob of the env itself, ``--env.id`` for ``env_id``)
  would; every agent's runtime is the local process unless the environment pins a local container engine, and
  every local process starts through the command-line prefix ``confine``, whose ``/tmp`` is the host folder
  ``confine_tmp`` (``confined_runs.py``). Answers the tasks, the reward and metric functions, the harness.
- ``rollout``: ``{"task", "base_url", "model"}``: one episode of task ``task`` with verifiers' own machinery,
  its model calls sent to ``base_url``. Answers each trace's messages, rewards, metrics and errors.
- ``score``: ``{"task", "messages"}``: the task's own scoring of a conversation (no runtime).
- ``cancel``: ``{"target"}``: the request ``target`` is given up (its episode is cancelled; no answer).
- ``close``: serving ends; the worker exits.

Anything the environment prints goes to stderr: stdout carries the answers only.
"""

import itertools
import os
import sys
from typing import Any

from worker_loop import JsonWorker, Refused, serve  # type: ignore[import-not-found,unused-ignore]  # beside this file

#: Runtimes that run elsewhere than this machine, and what they are.
REMOTE_RUNTIMES = {"prime": "Prime Intellect's cloud sandboxes", "modal": "Modal's cloud sandboxes",
                   "e2b": "E2B's cloud sandboxes"}
#: Local runtimes an environment may pin (they run here); anything unpinned runs as a local process.
LOCAL_RUNTIMES = ("subprocess", "docker", "podman", "apptainer")
#: The variable the worker's model client reads its API key from (Workbench's proxy holds the real one).
KEY_VAR = "WORKBENCH_PROXY_KEY"
#: The argument naming another env to play the taskset (`vf-eval --env.id`: `user-sim`, `best-of-n`, ...).
ENV_ID = "env_id"
#: How many tasks of an endless taskset are read.
MAX_TASKS = 100_000


class Worker(JsonWorker):
    def __init__(self, out):
        super().__init__(out)
        self.env: Any = None
        self.tasks: list = []
        self.serving: Any = None
        self.vf: Any = None

    # -- load ----------------------------------------------------------------------------------------
    async def load(self, module, path, env_args, confine=(), confine_tmp=None):
        import confined_runs  # type: ignore[import-not-found,unused-ignore]  # beside this file

        confined_runs.install(list(confine or ()), confine_tmp)  # before any process starts
        if path and path not in sys.path:
            sys.path.insert(0, path)
            # the environment's tool servers run as processes of their own (`python -m MODULE`)
            os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)
        import verifiers.v1 as vf
        from program_runs import install  # type: ignore[import-not-found,unused-ignore]  # beside this file

        install()  # agent programs start from warm interpreters (program_runs.py)
        from verifiers.v1.utils.loaders import env_config_type, load_environment, resolve_env_config

        self.vf = vf
        env_args = dict(env_args or {})
        env_id = str(env_args.pop(ENV_ID, "") or "")
        config_cls = env_config_type(module, env_id)
        taskset_args: dict = {}
        env_knobs: dict = {}
        for key, value in env_args.items():
            is_env_knob = key in config_cls.model_fields and key not in ("taskset", "id")
            (env_knobs if is_env_knob else taskset_args)[key] = value
        data = {**env_knobs, "id": env_id, "taskset": {**taskset_args, "id": module}}
        env = load_environment(self.localized(config_cls, resolve_env_config(dict(data)), data, "subprocess"))
        task_cls = type(env.taskset).task_type()
        if task_cls.NEEDS_CONTAINER or any(h.NEEDS_CONTAINER for h in env._harnesses.values()):
            # a task or harness that needs its own filesystem runs in a local container (Docker)
            env = load_environment(self.localized(config_cls, resolve_env_config(dict(data)), data, "docker"))
        for role, harness in env._harnesses.items():
            if isinstance(harness, vf.ACPHarness):
                raise Refused(f"the {role!r} agent's harness {harness.config.id!r} is an ACP harness (Agent "
                              "Client Protocol), which Workbench does not run")
        self.env = env
        # an endless taskset (`INFINITE`) is read up to MAX_TASKS tasks
        self.tasks = list(itertools.islice(env.taskset, MAX_TASKS))
        if not self.tasks:
            raise Refused(f"the taskset {type(env.taskset).__name__} yields no tasks")
        self.serving = env.serving()
        await self.serving.__aenter__()
        return self.describe()

    @staticmethod
    def localized(config_cls, config, data, local):
        """The env config with every agent that does not pin a local runtime on ``local``; an agent pinned to
        a remote one is refused."""
        from verifiers.v1.configs.agent import agent_config_fields
        from verifiers.v1.utils.loaders import resolve_env_config

        data = dict(data)
        for role, agent in agent_config_fields(config).items():
            kind = agent.runtime.type
            declared = config_cls.model_fields.get(role)
            pinned = declared is not None and "runtime" in getattr(declared.default, "model_fields_set", ())
            if pinned and kind in REMOTE_RUNTIMES:
                raise Refused(f"the {role!r} agent runs in {REMOTE_RUNTIMES[kind]} (runtime {kind!r}), which "
                              "Workbench does not run: it runs verifiers v1 agents as local processes or in "
                              "local containers")
            if not (pinned and kind in LOCAL_RUNTIMES):
                data[role] = {**data.get(role, {}), "runtime": {"type": local}}
        return resolve_env_config(data)

    def describe(self):
        from verifiers.v1.envs.single_agent import SingleAgentEnv

        env, vf = self.env, self.vf
        rewards, metrics = {}, []
        task_cls = type(env.taskset).task_type()
        for task in self.tasks[:1]:
            for fn in task.hooks("reward"):
                rewards[fn.__name__] = float(getattr(fn, "_vf_weight", 1.0))
            for judge in task.plugged_judges():
                rewards[judge.reward_name] = float(judge.config.weight)
            metrics = [fn.__name__ for fn in task.hooks("metric")]
        for harness in env._harnesses.values():
            metrics += [fn.__name__ for fn in getattr(harness, "hooks", lambda _: [])("metric")
                        if fn.__name__ not in metrics]
        finalizes = type(env).finalize is not vf.Env.finalize
        return {
            "tasks": [self.task_row(t) for t in self.tasks],
            "rewards": rewards, "metrics": metrics, "finalize": finalizes,
            "env": type(env).__name__, "single_agent": isinstance(env, SingleAgentEnv),
            "task_type": task_cls.__name__,
            "harnesses": {role: h.config.id for role, h in env._harnesses.items()},
            "verifiers": getattr(sys.modules.get("verifiers"), "__version__", "unknown"),
        }

    @staticmethod
    def task_row(task):
        from verifiers.v1.dialects.chat import message_to_wire

        data = task.data
        prompt = data.prompt
        messages = [] if data.system_prompt is None else [{"role": "system", "content": data.system_prompt}]
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        from verifiers.v1.task import TaskData

        fields = data.model_dump(mode="json", exclude_none=True)
        base = set(TaskData.model_fields) - {"idx", "id", "name"}
        info = {k: v for k, v in fields.items() if k not in base and k != "answer"}
        answer = fields.get("answer")
        return {"idx": data.idx, "messages": messages, "answer": None if answer is None else str(answer),
                "info": info, "key": task.key}

    # -- rollouts -----------------------------------------------------------------------------------
    async def rollout(self, task, base_url, model):
        from verifiers.v1.clients import ModelContext
        from verifiers.v1.configs.client import EvalClientConfig
        from verifiers.v1.env import RunSlot

        if not 0 <= task < len(self.tasks):
            raise Refused(f"task {task} is not among the environment's {len(self.tasks)} tasks")
        ctx = ModelContext(model=model, client=EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR))
        episode = await self.env.run_slot(RunSlot(self.tasks[task]), ctx)
        return {"ok": episode.ok, "errors": [_error(e) for e in episode.errors],
                "traces": [_trace(t) for t in episode.traces]}

    async def score(self, task, messages):
        """The task's own scoring of a conversation no rollout of this worker held (a stored one, a gold
        answer): a trace rebuilt from the messages, scored without a runtime (rewards that need one are
        skipped, as verifiers skips them)."""
        from pydantic import TypeAdapter
        from verifiers.v1.configs.agent import AgentConfig
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.state import state_cls
        from verifiers.v1.trace import AgentInfo, Trace, TraceTask

        if not 0 <= task < len(self.tasks):
            raise Refused(f"task {task} is not among the environment's {len(self.tasks)} tasks")
        t = self.tasks[task]
        parse = TypeAdapter(self.vf.Message).validate_python
        nodes = [MessageNode(parent=i - 1 if i else None, message=parse(m), sampled=m.get("role") == "assistant")
                 for i, m in enumerate(messages)]
        trace = Trace(task=TraceTask(type=type(t).__name__, data=t.data, key=t.key, hash=t.hash),
                      state=state_cls(type(t))(), agent=AgentInfo(config=AgentConfig()), nodes=nodes)
        try:
            await t.score(trace, None)
        except Exception as e:  # noqa: BLE001 - a reward that raises is the answer's data
            trace.record_error(e)
        return {"ok": True, "errors": [], "traces": [_trace(trace)]}

    async def dispatch(self, op, request):
        if op == "load":
            return await self.load(request["module"], request.get("path"), request.get("env_args"),
                                   request.get("confine"), request.get("confine_tmp"))
        if op == "score":
            return await self.score(int(request["task"]), list(request["messages"]))
        if op == "rollout":
            return await self.rollout(int(request["task"]), request["base_url"], request["model"])
        raise Refused(f"unknown request {op!r}")

    async def close(self):
        if self.serving is not None:
            try:
                await self.serving.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001 - ending anyway
                import traceback

                traceback.print_exc(file=sys.stderr)


def _error(e):
    return {"type": e.type, "message": e.message}


def _trace(t):
    from verifiers.v1.dialects.chat import message_to_wire

    return {
        "id": t.id, "agent": t.agent.name if t.agent else "agent",
        "trainable": bool(t.agent.trainable) if t.agent else True,
        "rewards": {k: None if r is None else {"score": r.score, "weight": r.weight} for k, r in t.rewards.items()},
        "metrics": dict(t.metrics), "errors": [_error(e) for e in t.errors], "ok": t.ok,
        "stop_condition": t.stop_condition, "is_timeout": t.is_timeout, "turns": t.num_turns,
        "messages": [message_to_wire(m) for m in t.messages], "reward": t.reward,
    }


if __name__ == "__main__":
    serve(Worker)
