"""The store's tables, declared once with SQLModel: columns, types, defaults, keys and indexes.

A new store is created from these declarations: :func:`create_statements` renders them as SQLite DDL
into ``sql/schema.sql`` (``python scripts/gen_schema_sql.py``; a test fails when the file is stale), which
``migrations.create_schema`` runs, so opening a store never imports SQLModel. A store written by an
older version reaches the same schema through the frozen steps of ``migrations.py``; a test compares the
two (tables, columns, types, defaults, keys, indexes) and fails when a model and the migrations disagree.
The hot paths read and write these tables with plain SQL (``workbench/store/*.py``).
"""

from __future__ import annotations

from sqlalchemy import Index, text
from sqlmodel import Field, SQLModel

metadata = SQLModel.metadata

#: What SQLModel cannot declare: the full-text index over each rollout's messages (contentless FTS5;
#: its rowid is the rollout's pk).
EXTRA_DDL = ("CREATE VIRTUAL TABLE rollout_fts USING fts5(text, content='', tokenize='unicode61 remove_diacritics 2')",)


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
    __table_args__ = (Index("ix_run_kind_created", "kind", "created_at"),)  # a listing of some kinds, newest first
    id: str = Field(primary_key=True)
    kind: str = "eval"  # one of workbench.runs.kinds.RUN_KINDS
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
    __table_args__ = (
        Index("ix_rollout_slot", "run_id", "task_index", "sample_index", unique=True),
        Index("ix_rollout_reward", "reward"),
        Index("ix_rollout_error_kind", "error_kind", sqlite_where=text("error_kind IS NOT NULL")),
        Index("ix_rollout_model", "model"),
        Index("ix_rollout_run_reward", "run_id", "reward"),
        Index("ix_rollout_duration", "duration_s"),  # the trace browser's slowest first
        Index("ix_rollout_env", "env_name"),
        Index("ix_rollout_env_reward", "env_name", "reward"),  # an environment's rollouts in a reward range
        Index("ix_rollout_source", "source"),
    )
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
    source: str = Field(default="model", sa_column_kwargs={"server_default": "model"})  # model | imported | human


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
    __table_args__ = (Index("ix_train_metric_run", "run_id", "kind", "step"),)
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
    __table_args__ = (Index("ix_rescore_env", "env_name", "created_at"),)
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
    __table_args__ = (Index("ix_rescore_rollout_pk", "rollout_pk", "rescore_id"), {"sqlite_with_rowid": False})
    rescore_id: int = Field(primary_key=True, foreign_key="rescore.id")
    rollout_pk: int = Field(primary_key=True)
    reward: float
    scores: str  # JSON {"rewards": {...}, "metrics": {...}}
    errors: str | None = None  # JSON [[function, message], ...]


class FeedbackRow(SQLModel, table=True):
    """A product's judgement of an answer the gateway served (schema v9): by the exchange's id
    (``response_id``, a rollout's ``id``, which may be committed after it) or by a whole session."""

    __tablename__ = "feedback"
    __table_args__ = (Index("ix_feedback_response", "response_id"), Index("ix_feedback_session", "session"))
    id: int | None = Field(default=None, primary_key=True)
    response_id: str | None = None
    session: str | None = None
    app: str
    score: float | None = None
    label: str = ""
    comment: str = ""
    created_at: float


def create_statements() -> list[str]:
    """The DDL that creates the declared schema in an empty SQLite database, one statement each: every
    table (in dependency order) with its indexes, then :data:`EXTRA_DDL`."""
    from sqlalchemy.dialects import sqlite
    from sqlalchemy.schema import CreateIndex, CreateTable

    dialect = sqlite.dialect()
    out = []
    for table in metadata.sorted_tables:
        out.append(str(CreateTable(table).compile(dialect=dialect)).strip())
        out += [str(CreateIndex(ix).compile(dialect=dialect)).strip() for ix in sorted(table.indexes, key=lambda i: i.name or "")]
    return out + list(EXTRA_DDL)


def schema_sql() -> str:
    """``sql/schema.sql``: :func:`create_statements`, each ending with ``;`` at the end of a line."""
    return "".join(f"{stmt};\n" for stmt in create_statements())
