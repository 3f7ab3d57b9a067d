"""A pydantic model of Harbor's Agent Trajectory Interchange Format, ATIF-v1.6, written from the spec (the
field list and rules of its RFC as Harbor documents them) to check what ``workbench export --format atif``
writes. Strict: an unknown field, a missing required field, a step numbered out of order, an
agent-only field on another step, or an observation result answering a tool call its step did not
make is an error.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

VERSIONS = Literal["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4", "ATIF-v1.5", "ATIF-v1.6"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MediaSource(_Strict):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    path: str


class Part(_Strict):
    type: Literal["text", "image"]
    text: str | None = None
    source: MediaSource | None = None

    @model_validator(mode="after")
    def _one_payload(self) -> Part:
        if (self.type == "text") != (self.text is not None) or (self.type == "image") != (self.source is not None):
            raise ValueError(f"a {self.type} part carries exactly its own payload")
        return self


class ToolCall(_Strict):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class Result(_Strict):
    source_call_id: str | None = None
    content: str | list[Part] | None = None
    subagent_trajectory_ref: list[dict[str, Any]] | None = None


class Observation(_Strict):
    results: list[Result]


class Metrics(_Strict):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    extra: dict[str, Any] | None = None


class Step(_Strict):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    message: str | list[Part]
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    is_copied_context: bool | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only(self) -> Step:
        if self.source != "agent":
            for name in ("model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is only for agent steps")
        calls = {tc.tool_call_id for tc in self.tool_calls or ()}
        for r in self.observation.results if self.observation else ():
            if r.source_call_id is not None and r.source_call_id not in calls:
                raise ValueError(f"result answers {r.source_call_id!r}, not a tool call of step {self.step_id}")
        return self


class Agent(_Strict):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Strict):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None


class Trajectory(_Strict):
    schema_version: VERSIONS
    session_id: str
    agent: Agent
    steps: list[Step] = Field(min_length=1)
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _numbered(self) -> Trajectory:
        for i, step in enumerate(self.steps, 1):
            if step.step_id != i:
                raise ValueError(f"step {i} has step_id {step.step_id}")
        return self
