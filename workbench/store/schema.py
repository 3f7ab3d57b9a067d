"""The store's tables, declared once with SQLModel. Migrations in ``migrations.py`` create them."""

from __future__ import annotations

from sqlmodel import Field, SQLModel

metadata = SQLModel.metadata


class Meta(SQLModel, table=True):
    key: str = Field(primary_key=True)
    value: str


class EnvironmentRow(SQLModel, table=True):
    __tablename__ = "environment"
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    source: str = ""
    description: str = ""
    created_at: float


class EnvVersionRow(SQLModel, table=True):
    __tablename__ = "env_version"
    id: int | None = Field(default=None, primary_key=True)
    env_id: int = Field(foreign_key="environment.id", index=True)
    hash: str = Field(index=True)
    source: str = ""
    created_at: float


class RunRow(SQLModel, table=True):
    __tablename__ = "run"
    id: str = Field(primary_key=True)
    kind: str = "eval"  # eval | train | import
    env_name: str = Field(index=True)
    env_version: str = ""
    env_source: str = ""
    env_args: str = "{}"  # JSON
    model: str = ""
    base_url: str = ""
    harness: str = ""
    runtime: str = ""
    n_tasks: int = 0
    rollouts_per_task: int = 1
    concurrency: int = 1
    sampling: str = "{}"  # JSON
    config: str = "{}"  # JSON: everything needed to resume the run
    status: str = "running"  # running | completed | interrupted | failed
    error: str = ""
    created_at: float = Field(index=True)
    finished_at: float | None = None
    summary: str = "{}"  # JSON


class RolloutRow(SQLModel, table=True):
    __tablename__ = "rollout"
    pk: int | None = Field(default=None, primary_key=True)
    id: str = Field(unique=True)
    run_id: str = Field(foreign_key="run.id")
    env_name: str
    model: str
    task_id: str
    task_index: int
    sample_index: int
    status: str  # ok | error
    error_kind: str | None = None
    reward: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    duration_s: float = 0.0
    turns: int = 0
    created_at: float
    prompt: str = ""  # JSON (string or messages)
    answer: str = "null"  # JSON
    info: str = "{}"  # JSON
    completion: str = ""
    messages: str = "[]"  # JSON
    state: str = "{}"  # JSON, JSON-able part of the harness state
    source: str = "model"  # model | imported | human (schema v7)


class ScoreRow(SQLModel, table=True):
    __tablename__ = "score"
    id: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(index=True)
    name: str
    kind: str  # reward | metric
    value: float


class ModelCallRow(SQLModel, table=True):
    __tablename__ = "model_call"
    id: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(index=True)
    idx: int
    n_messages: int
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    extra: str | None = None  # JSON: logprobs, token ids, policy version when the server gives them


class RolloutErrorRow(SQLModel, table=True):
    __tablename__ = "rollout_error"
    id: int | None = Field(default=None, primary_key=True)
    rollout_pk: int = Field(index=True)
    run_id: str = Field(index=True)
    kind: str  # model.<kind> | timeout | harness | tool | reward
    source: str
    message: str


class CostEventRow(SQLModel, table=True):
    __tablename__ = "cost_event"
    id: int | None = Field(default=None, primary_key=True)
    run_id: str | None = Field(default=None, index=True)
    kind: str  # api_tokens | gpu_seconds | sandbox_seconds
    provider: str = ""
    model: str = ""
    quantity: float = 0.0
    unit: str = ""
    usd: float = 0.0
    created_at: float = Field(index=True)


class ModelPriceRow(SQLModel, table=True):
    __tablename__ = "model_price"
    model: str = Field(primary_key=True)  # exact id, or a prefix ending in '*'
    provider: str = ""
    input_usd_per_mtok: float = 0.0
    output_usd_per_mtok: float = 0.0
    source: str = ""
    updated_at: float = 0.0


class TraceRow(SQLModel, table=True):
    """A rollout's token-exact trace graph, packed (schema v2)."""

    __tablename__ = "trace"
    rollout_pk: int = Field(primary_key=True)
    nodes: bytes  # JSON: nodes (segments of messages) with offsets into the arrays, mismatches
    token_ids: bytes  # int32 little-endian
    logprobs: bytes  # float32
    mask: bytes  # uint8: 1 where the model sampled the token
    n_tokens: int
    mismatches: int


class TrainMetricRow(SQLModel, table=True):
    """One record of a training run (schema v4): an optimizer step's metrics, a skipped step, a
    held-out eval, or an event (a checkpoint, a dropped batch, ...)."""

    __tablename__ = "train_metric"
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(foreign_key="run.id")
    step: int  # the policy version after the step (the version evaluated, for evals)
    kind: str  # step | skipped | eval | event
    metrics: str = "{}"  # JSON: floats
    message: str = ""
    created_at: float


class RescoreRow(SQLModel, table=True):
    """An applied re-score (schema v5): the env version whose rubric scored the stored rollouts again."""

    __tablename__ = "rescore"
    id: int | None = Field(default=None, primary_key=True)
    env_name: str
    env_version: str
    run_id: str | None = None  # None: every run of the environment
    status: str  # running | completed | interrupted | failed
    rollouts: int = 0
    changed: int = 0
    created_at: float
    finished_at: float | None = None
    summary: str = "{}"  # JSON: RescoreResult.as_dict()


class RescoreRolloutRow(SQLModel, table=True):
    """A rollout's new scores in one re-score; its original reward and scores stay where they were."""

    __tablename__ = "rescore_rollout"
    rescore_id: int = Field(primary_key=True, foreign_key="rescore.id")
    rollout_pk: int = Field(primary_key=True)
    reward: float
    scores: str  # JSON {"rewards": {...}, "metrics": {...}}
    errors: str | None = None  # JSON [[function, message], ...]
