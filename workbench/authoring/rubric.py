"""Rubrics: reward, metric and group-reward functions with arguments injected by name."""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from workbench.errors import RubricError

#: A scoring function, returned unchanged by the decorators that register it.
F = TypeVar("F", bound=Callable[..., Any])

#: Names a per-rollout reward or metric may ask for.
ROLLOUT_ARGS: frozenset[str] = frozenset(
    {"prompt", "completion", "messages", "answer", "info", "task", "state", "trace", "sandbox", "usage", "mcp"}
)
#: Plural names a group reward may ask for (one entry per rollout of the group), plus the
#: singular task-level names, which are the same for every rollout of a group.
GROUP_ARGS: frozenset[str] = frozenset(
    {
        "prompts", "completions", "messages_list", "answers", "infos", "tasks", "states", "traces",
        "sandboxes", "usages", "rewards",
        "prompt", "answer", "info", "task",
    }
)
_PLURAL = {
    "prompts": "prompt", "completions": "completion", "messages_list": "messages", "answers": "answer",
    "infos": "info", "tasks": "task", "states": "state", "traces": "trace", "sandboxes": "sandbox",
    "usages": "usage",
}


_SCALARS = (float, int, bool)
#: What a scoring function (or a tool) may raise that is its own failure, recorded on its rollout:
#: every ``Exception`` and the exits a library may throw (``sys.exit``, a stray ``KeyboardInterrupt``).
#: A cancellation (``asyncio.CancelledError``: Ctrl-C, SIGTERM, a timeout) is never one: it ends the run.
USER_CODE_ERRORS: tuple[type[BaseException], ...] = (Exception, SystemExit, KeyboardInterrupt)


@dataclass(slots=True)
class ScoreFn:
    """A registered scoring function and how to call it."""

    name: str
    fn: Callable[..., Any]
    kind: str  # "reward" | "metric" | "group"
    weight: float
    args: tuple[str, ...]
    takes_kwargs: bool
    is_async: bool

    @property
    def group_args(self) -> tuple[str, ...]:
        """The names a group reward is called with (every group name when it takes ``**kwargs``)."""
        return tuple(sorted(set(self.args) | GROUP_ARGS)) if self.takes_kwargs else self.args


@dataclass(slots=True)
class Scores:
    """The outcome of scoring one rollout."""

    rewards: dict[str, float] = field(default_factory=dict)  # raw, unweighted, by name
    metrics: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (function name, message)
    total: float = 0.0  # weighted sum of rewards and group rewards


def _describe(kind: str) -> str:
    return {"reward": "reward", "metric": "metric", "group": "group reward"}[kind]


def _inspect(fn: Callable[..., Any], kind: str, allowed: frozenset[str], name: str) -> tuple[tuple[str, ...], bool]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise RubricError(f"{_describe(kind)} {name!r} has no inspectable signature: {e}") from None
    args: list[str] = []
    takes_kwargs = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            takes_kwargs = True
            continue
        if p.kind is p.VAR_POSITIONAL:
            continue
        if p.name in allowed:
            args.append(p.name)
        elif p.default is p.empty:
            known = ", ".join(sorted(allowed))
            raise RubricError(f"{_describe(kind)} {name!r} asks for unknown argument {p.name!r}; it can ask for: {known}")
    return tuple(args), takes_kwargs


def _as_values(name: str, value: Any) -> dict[str, float]:
    """Normalise a function's return value into named floats: the one place a returned value becomes a
    score, so a value that is not a finite number (NaN, inf, a type of its own) never reaches the store."""
    t = type(value)
    if t is float or t is int or t is bool:
        return {name: _finite(name, float(value))}
    if isinstance(value, Mapping):
        out: dict[str, float] = {}
        for k, v in value.items():
            out[f"{name}.{k}"] = _as_float(f"{name}.{k}", v)
        return out
    return {name: _as_float(name, value)}


def _finite(name: str, f: float) -> float:
    if not math.isfinite(f):
        raise ValueError(f"{name} returned {f}, not a finite number")
    return f


def _as_float(name: str, v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float):
        try:
            f = float(v)
        except OverflowError:  # an integer past a float's range
            raise ValueError(f"{name} returned an integer too large for a score") from None
        return _finite(name, f)
    raise TypeError(f"{name} returned {type(v).__name__}, expected a float or a dict of floats")


def _error_text(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    text = str(e) if not isinstance(e, SystemExit) else f"exit code {e.code!r}"
    return f"{type(e).__name__}: {text}{where}"


class Rubric:
    """A set of scoring functions.

    ``@rubric.reward(weight=1.0)`` adds a per-rollout reward, ``@rubric.metric`` a logged-only
    metric and ``@rubric.group_reward(weight=...)`` a function that sees every rollout of a task.
    """

    def __init__(self) -> None:
        self.functions: list[ScoreFn] = []

    # -- registration --------------------------------------------------------------------------
    def _add(self, fn: F, kind: str, weight: float, name: str | None) -> F:
        fname = name or getattr(fn, "__name__", None) or repr(fn)
        if any(f.name == fname for f in self.functions):
            raise RubricError(f"the rubric already has a function named {fname!r}; pass name=... to tell them apart")
        allowed = GROUP_ARGS if kind == "group" else ROLLOUT_ARGS
        args, kw = _inspect(fn, kind, allowed, fname)
        try:
            weight = float(weight)
        except (TypeError, ValueError):
            raise RubricError(f"{_describe(kind)} {fname!r} has a non-numeric weight {weight!r}") from None
        self.functions.append(
            ScoreFn(fname, fn, kind, weight, args, kw, inspect.iscoroutinefunction(fn))
        )
        return fn

    @overload
    def reward(self, fn: F, *, weight: float = 1.0, name: str | None = None) -> F: ...
    @overload
    def reward(self, fn: None = None, *, weight: float = 1.0, name: str | None = None) -> Callable[[F], F]: ...
    def reward(self, fn: F | None = None, *, weight: float = 1.0, name: str | None = None) -> F | Callable[[F], F]:
        if fn is not None:
            return self._add(fn, "reward", weight, name)
        return lambda f: self._add(f, "reward", weight, name)

    @overload
    def metric(self, fn: F, *, name: str | None = None) -> F: ...
    @overload
    def metric(self, fn: None = None, *, name: str | None = None) -> Callable[[F], F]: ...
    def metric(self, fn: F | None = None, *, name: str | None = None) -> F | Callable[[F], F]:
        if fn is not None:
            return self._add(fn, "metric", 0.0, name)
        return lambda f: self._add(f, "metric", 0.0, name)

    @overload
    def group_reward(self, fn: F, *, weight: float = 1.0, name: str | None = None) -> F: ...
    @overload
    def group_reward(self, fn: None = None, *, weight: float = 1.0, name: str | None = None) -> Callable[[F], F]: ...
    def group_reward(self, fn: F | None = None, *, weight: float = 1.0,
                     name: str | None = None) -> F | Callable[[F], F]:
        if fn is not None:
            return self._add(fn, "group", weight, name)
        return lambda f: self._add(f, "group", weight, name)

    @property
    def rewards(self) -> list[ScoreFn]:
        return [f for f in self.functions if f.kind == "reward"]

    @property
    def metrics(self) -> list[ScoreFn]:
        return [f for f in self.functions if f.kind == "metric"]

    @property
    def group_rewards(self) -> list[ScoreFn]:
        return [f for f in self.functions if f.kind == "group"]

    # -- scoring -------------------------------------------------------------------------------
    async def score_rollout(self, ctx: Mapping[str, Any]) -> Scores:
        """Run every reward and metric on one rollout. ``ctx`` maps argument names to values."""
        s = Scores()
        total = 0.0
        for f in self.functions:
            if f.kind == "group":
                continue
            try:
                value = f.fn(**ctx) if f.takes_kwargs else f.fn(**{a: ctx.get(a) for a in f.args})
                if f.is_async or (type(value) not in _SCALARS and inspect.isawaitable(value)):
                    value = await value
                values = _as_values(f.name, value)
                part = f.weight * sum(values.values()) if f.kind == "reward" else 0.0
                _finite(f.name + " (weighted)", part)
            except USER_CODE_ERRORS as e:  # recorded on the rollout; the run goes on
                s.errors.append((f.name, _error_text(e)))
                continue
            if f.kind == "reward":
                if not math.isfinite(total + part):
                    s.errors.append((f.name, f"ValueError: the total reward passes a float's range with {f.name}"))
                    continue
                s.rewards.update(values)
                total += part
            else:
                s.metrics.update(values)
        s.total = total
        return s

    async def score_group(self, ctxs: Sequence[Mapping[str, Any]], scores: Sequence[Scores]) -> None:
        """Run group rewards over the rollouts of one task and fold them into ``scores`` in place."""
        groups = self.group_rewards
        if not groups or not ctxs:
            return
        n = len(ctxs)
        for f in groups:
            try:
                kwargs: dict[str, Any] = {}
                for a in f.group_args:
                    if a == "rewards":
                        kwargs[a] = [sc.total for sc in scores]
                    elif a in _PLURAL:
                        kwargs[a] = [c.get(_PLURAL[a]) for c in ctxs]
                    else:
                        kwargs[a] = ctxs[0].get(a)
                value = f.fn(**kwargs)
                if f.is_async or inspect.isawaitable(value):
                    value = await value
                if isinstance(value, Mapping) or not isinstance(value, Sequence) or len(value) != n:
                    raise TypeError(f"group reward must return a list of {n} values, one per rollout, got {value!r:.80}")
                per = [_as_values(f.name, v) for v in value]
                for sc, values in zip(scores, per, strict=True):
                    _finite(f.name + " (weighted)", sc.total + f.weight * sum(values.values()))
            except USER_CODE_ERRORS as e:
                msg = _error_text(e)
                for sc in scores:
                    sc.errors.append((f.name, msg))
                continue
            for sc, values in zip(scores, per, strict=True):
                sc.rewards.update(values)
                sc.total += f.weight * sum(values.values())
