"""The Modal app of a cloud run: ``build_app(spec)`` and ``describe_app(app)``.

Three functions, one module per role, all on one image (``modal_image``), all with ``i6pn=True``
(Modal's workspace-private network: the roles reach each other, nothing else reaches them):

============  ==========================================  ===============================================
function      hardware                                    body
============  ==========================================  ===============================================
inference     ``{gpu}:{gpus_per_node}`` per node,          ``modal_inference.serve_inference``: vLLM +
              ``@modal.clustered`` when > 1 node           LoRA hot-loading behind the adapter gate
trainer       ``{gpu}:{gpus_per_node}`` per node,          ``modal_trainer.train_node``: one process per
              ``@modal.clustered(size=trainer_nodes)``    GPU in one torch.distributed (NCCL) group
orchestrator  CPU                                         ``modal_orchestrator.orchestrate``: starts the
                                                          GPU roles, runs ``job.run_remote``
============  ==========================================  ===============================================

Volumes: the run volume (``spec.volume_name``) at ``RUNS_PATH`` — each run's config, adapters and
checkpoints under ``RUNS_PATH/<run_id>`` — and the Hugging Face cache volume at ``HF_CACHE_PATH``.
Secrets: the keyring values the launch passes (``spec.secrets``) become one
``modal.Secret.from_dict`` (environment variables in every container; Modal's description of it
lists the names only), plus any ``spec.secret_names`` already stored in the workspace.

Nothing here contacts Modal: ``modal.App``, ``Image``, ``Volume.from_name``, ``Secret`` and the
function decorators are all lazy until ``app.run()`` / ``app.deploy()`` (:func:`launch`).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench_cloud.modal.image import (
    GPU_PINS,
    PYTHON_VERSION,
    WORKBENCH_PINS,
    build_image,
    dockerfile_commands,
    image_steps,
)
from workbench_cloud.modal.spec import (
    BUNDLE_PATH,
    HF_CACHE_PATH,
    INFERENCE_PORT,
    MASTER_PORT,
    RUNS_PATH,
    VLLM_PORT,
    ModalSpec,
)

if TYPE_CHECKING:
    import modal

ROLES = ("inference", "trainer", "orchestrator")


@dataclass(slots=True)
class BuiltApp:
    spec: ModalSpec
    image: Any
    functions: dict[str, Any]  # role -> modal.Function
    entries: dict[str, str]  # role -> the module-level function each container imports and runs


_built: weakref.WeakKeyDictionary[Any, BuiltApp] = weakref.WeakKeyDictionary()


def build_app(spec: ModalSpec) -> modal.App:
    """The run's ``modal.App`` (see the module doc). Raises ConfigError for a bad spec."""
    import modal
    from workbench_cloud.modal.inference import serve_inference
    from workbench_cloud.modal.orchestrator import orchestrate
    from workbench_cloud.modal.trainer import train_node

    spec.validate()
    image = build_image(spec)
    volumes = {RUNS_PATH: modal.Volume.from_name(spec.volume_name, create_if_missing=True),
               HF_CACHE_PATH: modal.Volume.from_name(spec.hf_cache_volume, create_if_missing=True)}
    secrets = [modal.Secret.from_dict(dict(spec.secrets))] if spec.secrets else []
    secrets += [modal.Secret.from_name(name) for name in spec.secret_names]
    app = modal.App(spec.app_name, tags={"workbench-run": spec.run_id}, include_source=False)
    common: dict[str, Any] = {"image": image, "volumes": volumes, "secrets": secrets, "timeout": spec.timeout_s,
                              "i6pn": True, "region": spec.region}

    inference_body: Any = serve_inference
    if spec.inference_nodes > 1:
        inference_body = modal.clustered(size=spec.inference_nodes)(serve_inference)
    trainer_body: Any = train_node
    if spec.trainer_nodes > 1:
        trainer_body = modal.clustered(size=spec.trainer_nodes, rdma=spec.rdma)(train_node)
    functions = {
        "inference": app.function(name="inference", gpu=spec.gpu_request, startup_timeout=spec.startup_timeout_s,
                                  **common)(inference_body),
        "trainer": app.function(name="trainer", gpu=spec.gpu_request, startup_timeout=spec.startup_timeout_s,
                                **common)(trainer_body),
        "orchestrator": app.function(name="orchestrator", cpu=spec.orchestrator_cpu,
                                     memory=spec.orchestrator_memory_mib, startup_timeout=spec.startup_timeout_s,
                                     **common)(orchestrate),
    }
    entries = {role: f"{f.__module__}.{f.__qualname__}" for role, f in
               (("inference", serve_inference), ("trainer", train_node), ("orchestrator", orchestrate))}
    _built[app] = BuiltApp(spec, image, functions, entries)
    return app


def app_functions(app: modal.App) -> dict[str, Any]:
    """The app's functions by role (for the launcher)."""
    return dict(_built_of(app).functions)


def _built_of(app: Any) -> BuiltApp:
    try:
        return _built[app]
    except (KeyError, TypeError):
        raise ValueError("this modal.App was not made by workbench_cloud.modal.app.build_app") from None


_FROM_DICT = re.compile(r"Secret\.from_dict\(\[(.*)\]\)")
_FROM_NAME = re.compile(r"Secret\.from_name\(['\"]([^'\"]+)['\"]")


def secret_names(reprs: list[str]) -> list[str]:
    """Names from Modal's secret descriptions: the keys of ``from_dict`` secrets (never values),
    the names of ``from_name`` secrets."""
    out: list[str] = []
    for r in reprs:
        if m := _FROM_DICT.search(r):
            out += [k.strip() for k in m.group(1).split(",") if k.strip()]
        elif m := _FROM_NAME.search(r):
            out.append(m.group(1))
    return out


def _gpu_string(gpus: list[tuple[str, int]]) -> str | None:
    return ",".join(f"{kind}:{count}" for kind, count in gpus) or None


def describe_app(app: modal.App) -> dict[str, Any]:
    """The app's definition as JSON-able data, read from the Modal objects themselves (no network):
    each function's GPU, cluster size, timeouts, volumes and secret names; the image's steps, pins
    and the Dockerfile lines Modal will build; the paths and ports the roles agree on."""
    built = _built_of(app)
    spec = built.spec
    functions: dict[str, Any] = {}
    for role, fn in built.functions.items():
        info = fn.info()  # local: set when the function was defined
        cluster = info.cluster_info
        functions[role] = {
            "gpu": _gpu_string(list(info.gpus)),
            "nodes": cluster.size if cluster else 1,
            "clustered": cluster is not None,
            "rdma": bool(cluster and cluster.rdma),
            "timeout_s": info.timeout,
            "startup_timeout_s": info.startup_timeout,
            "cpu": list(info.cpu) if isinstance(info.cpu, tuple) else info.cpu,
            "memory_mib": list(info.memory_mib) if isinstance(info.memory_mib, tuple) else info.memory_mib,
            "volumes": {path: v.name for path, v in sorted(info.volumes.items())},
            "secrets": secret_names(list(info.secrets)),
            "regions": info.regions,
            "entry": built.entries[role],
        }
    steps = image_steps(spec)
    return {
        "app": spec.app_name,
        "run_id": spec.run_id,
        "functions": functions,
        "image": {
            "python": PYTHON_VERSION,
            "pins": {**GPU_PINS, **WORKBENCH_PINS},
            "steps": [s.describe() for s in steps],
            "dockerfile": dockerfile_commands(built.image),
        },
        "volumes": {RUNS_PATH: spec.volume_name, HF_CACHE_PATH: spec.hf_cache_volume},
        "run_dir": spec.run_dir,
        "bundle": {"local": steps[-1].args[0], "path": BUNDLE_PATH, "hash": spec.bundle_hash},
        "secrets": spec.secret_keys + list(spec.secret_names),
        "ports": {"inference": INFERENCE_PORT, "vllm": VLLM_PORT, "master": MASTER_PORT},
        "dicts": {"state": spec.state_dict_name, "events": spec.events_dict_name, "train": spec.train_dict_name},
        "gpus_total": spec.gpus_per_node * (spec.trainer_nodes + spec.inference_nodes),
    }


def launch(app: modal.App, job: dict[str, Any]) -> str:
    """Start the run on Modal, detached (it goes on when this process exits); returns the
    orchestrator's function-call id. ``job``: ``config`` (run tables), ``stream``, ``cost`` — see
    ``modal_orchestrator.orchestrate``. Needs a Modal token: the only function here that talks to
    Modal, and it has never been run against Modal from this project's machines."""
    import modal

    built = _built_of(app)
    fns = built.functions
    with modal.enable_output(), app.run(detach=True):
        call = fns["orchestrator"].spawn(built.spec.to_json(), job, fns["inference"], fns["trainer"],
                                         fns["orchestrator"])
        return str(call.object_id)


__all__ = ["ROLES", "app_functions", "build_app", "describe_app", "launch", "secret_names"]
