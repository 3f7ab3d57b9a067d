"""What a cloud run asks of Modal, in one small value: :class:`ModalSpec`.

``build_app(spec)`` (``modal_app``) turns it into a ``modal.App``; the same spec, as JSON, is the
first argument of every remote function, so each container knows the run's shape (GPUs per node,
volumes, ports) without rebuilding the app. Secret *values* travel only inside a
``modal.Secret.from_dict``: they are left out of ``repr``, ``to_json`` and ``describe_app``.

This module imports nothing heavy (no modal, no torch): the launcher, the plan and the tests read it
without the cloud stack.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any

from workbench.errors import ConfigError

# -- where things live inside every container (stated once) ----------------------------------------
# The run Volume: each run's config, adapters, checkpoints and logs in RUNS_PATH/<run_id>. With
# XDG_DATA_HOME=DATA_HOME (set in the image) this is exactly where workbench.training.loop.run_dir(run_id)
# puts a run, so the pipeline writes onto the volume without knowing it is in the cloud.
DATA_HOME = "/data"
RUNS_PATH = f"{DATA_HOME}/workbench/runs"
HF_CACHE_PATH = "/hf-cache"  # the Hugging Face cache Volume, shared by runs (base weights download once)
BUNDLE_PATH = "/bundle"  # the environment bundle, exactly the files the user launched
INFERENCE_PORT = 8000  # the adapter gate every inference node serves (i6pn, workspace-private)
VLLM_PORT = 8001  # vLLM itself, on 127.0.0.1 only: all traffic goes through the gate
MASTER_PORT = 29500  # torch.distributed rendezvous on the trainer's node 0

#: Modal's limit on one function execution (its timeouts guide: between 1 s and 24 h).
MAX_TIMEOUT_S = 24 * 3600
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")  # Modal object names
_RUN = re.compile(r"^[A-Za-z0-9._-]{1,40}$")
MAX_APP_NAME = 57  # the app's Dicts are named APP-state and APP-events: 64 characters at most
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU = re.compile(r"^[A-Za-z0-9-]+$")


@dataclass(slots=True)
class ModalSpec:
    """Everything ``build_app`` decides from. Nodes are whole machines of ``gpus_per_node`` GPUs."""

    run_id: str
    base_model: str  # a Hugging Face id: vLLM serves it, the trainer loads it
    bundle_dir: str  # local folder of the packaged environment (mounted at BUNDLE_PATH)
    bundle_hash: str  # the hash the user launched; the cloud side refuses a bundle that differs
    gpu: str = "H100"
    gpus_per_node: int = 8
    trainer_nodes: int = 1
    inference_nodes: int = 1
    lora_rank: int = 16
    #: Full fine-tuning: vLLM serves without LoRA and in dev mode, and each step's whole weights
    #: replace its own through the gate's ``/update_weights`` (``vllm_weights``).
    full_weights: bool = False
    max_loras: int = 4  # adapters resident in vLLM at once (>= loop.max_off_policy_steps + 1)
    inference_tp: int | None = None  # GPUs per vLLM replica; default: the whole node
    max_model_len: int | None = None
    extra_vllm_args: tuple[str, ...] = ()
    #: vLLM's parser of tool calls in replies (``--tool-call-parser``), also used by the gate's token
    #: route (``vllm_tokens``, which knows ``hermes``: ``<tool_call>{json}</tool_call>``); "" for none.
    tool_call_parser: str = "hermes"
    volume_name: str = "workbench-runs"
    hf_cache_volume: str = "workbench-hf-cache"
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # env var -> value (from keyring)
    secret_names: tuple[str, ...] = ()  # secrets already stored in the Modal workspace, by name
    timeout_s: int = MAX_TIMEOUT_S
    startup_timeout_s: int = 3600  # image pull + weight download + vLLM warm-up of a large model
    region: str | None = None  # i6pn links containers within a region: pin one for big runs
    rdma: bool = True  # RDMA between trainer nodes (NCCL all-reduce); only with trainer_nodes > 1
    orchestrator_cpu: float = 8.0  # rollouts, rewards and local sandboxes run here
    orchestrator_memory_mib: int = 32768
    app_name: str = ""  # default: workbench-<run_id>
    max_handovers: int = 30  # fresh orchestrator calls at the 24 h limit before the run gives up (30 days)

    def __post_init__(self) -> None:
        self.extra_vllm_args = tuple(self.extra_vllm_args)
        self.secret_names = tuple(self.secret_names)
        if not self.app_name:
            self.app_name = f"workbench-{self.run_id}"
        self.validate()

    # -- derived -------------------------------------------------------------------------------------
    @property
    def gpu_request(self) -> str:
        """Modal's GPU string for one node, e.g. ``H200:8``."""
        return f"{self.gpu}:{self.gpus_per_node}"

    @property
    def tensor_parallel(self) -> int:
        return self.inference_tp or self.gpus_per_node

    @property
    def replicas_per_node(self) -> int:
        """vLLM data-parallel engines on one inference node (one API server in front of them)."""
        return self.gpus_per_node // self.tensor_parallel

    @property
    def run_dir(self) -> str:
        return f"{RUNS_PATH}/{self.run_id}"

    @property
    def state_dict_name(self) -> str:
        """The ``modal.Dict`` where roles meet: the inference URL, the done flag."""
        return f"{self.app_name}-state"

    @property
    def events_dict_name(self) -> str:
        """The ``modal.Dict`` of the streamed event log (``workbench_cloud.stream``)."""
        return f"{self.app_name}-events"

    @property
    def train_dict_name(self) -> str:
        """The ``modal.Dict`` of the batch hand-off between orchestrator and trainer (``handoff``)."""
        return f"{self.app_name}-train"

    @property
    def store_snapshot(self) -> str:
        """Where the orchestrator leaves its store on the run volume when it hands the run over."""
        return f"{self.run_dir}/orchestrator/remote.db"

    @property
    def secret_keys(self) -> list[str]:
        return sorted(self.secrets)

    # -- checks --------------------------------------------------------------------------------------
    def validate(self) -> None:
        def bad(msg: str) -> ConfigError:
            return ConfigError(f"cloud spec: {msg}")

        if not _RUN.match(self.run_id):
            raise bad(f"run id {self.run_id!r} must be 1-40 letters, digits, '.', '_' or '-'")
        if not _NAME.match(self.app_name) or len(self.app_name) > MAX_APP_NAME:
            raise bad(f"app name {self.app_name!r} must be 1-{MAX_APP_NAME} letters, digits, '.', '_' or '-'")
        if not _NAME.match(self.volume_name) or not _NAME.match(self.hf_cache_volume):
            raise bad("volume names must be 1-64 letters, digits, '.', '_' or '-'")
        if not self.base_model:
            raise bad("base_model is empty: name the Hugging Face model the run trains")
        if not self.bundle_hash:
            raise bad("bundle_hash is empty: package the environment first (workbench package ENV)")
        if not _GPU.match(self.gpu):
            raise bad(f"gpu {self.gpu!r} should be a Modal GPU type such as H100 or H200 (the count is gpus_per_node)")
        if not 1 <= self.gpus_per_node <= 8:
            raise bad(f"gpus_per_node must be 1..8, not {self.gpus_per_node}")
        if self.trainer_nodes < 1 or self.inference_nodes < 1:
            raise bad("trainer_nodes and inference_nodes must each be at least 1")
        if (self.trainer_nodes > 1 or self.inference_nodes > 1) and self.gpus_per_node != 8:
            raise bad("a multi-node role is a Modal cluster, which takes whole nodes: set gpus_per_node = 8")
        if self.gpus_per_node % self.tensor_parallel:
            raise bad(f"inference_tp ({self.tensor_parallel}) must divide gpus_per_node ({self.gpus_per_node})")
        if self.max_handovers < 0:
            raise bad("max_handovers must be 0 or more")
        if self.lora_rank < 1 or self.max_loras < 1:
            raise bad("lora_rank and max_loras must be positive")
        if not 60 <= self.timeout_s <= MAX_TIMEOUT_S:
            raise bad(f"timeout_s must be between 60 and {MAX_TIMEOUT_S} (Modal's 24 h limit per execution); "
                      "a longer run resumes from its checkpoint on the volume")
        for key in self.secrets:
            if not _ENV.match(key):
                raise bad(f"secret name {key!r} is not an environment variable name")

    # -- the form every container receives -----------------------------------------------------------
    def to_json(self) -> str:
        """The spec without secret values (containers get those from the Modal secret)."""
        d = dataclasses.asdict(self)
        d["secrets"] = {k: "" for k in self.secret_keys}
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ModalSpec:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModalSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"cloud spec: unknown field(s) {', '.join(unknown)}")
        return cls(**d)

    def redacted(self) -> dict[str, Any]:
        """For printing: everything but secret values."""
        d = json.loads(self.to_json())
        d["secrets"] = self.secret_keys
        return d


__all__ = ["BUNDLE_PATH", "DATA_HOME", "HF_CACHE_PATH", "INFERENCE_PORT", "MASTER_PORT",
           "MAX_TIMEOUT_S", "RUNS_PATH", "VLLM_PORT", "ModalSpec"]
