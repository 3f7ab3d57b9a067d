"""Routes: the model names a product asks the gateway for, each served by one registered model or split among
several (``--route support=prod:0.9,cand:0.1``). A route's arms name registered models (``workbench models``);
their weights add up to 1. Checked before the gateway serves anything: a route that names an unknown model, a
weight that is not a number in (0, 1], weights that do not add up to 1, or a model named twice is one
:class:`~workbench.errors.ConfigError` naming the route."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config.models import ModelEndpoint, unknown_model_message
from workbench.errors import ConfigError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,79}$")


@dataclass(frozen=True, slots=True)
class Arm:
    """One model a route sends part of its traffic to."""

    model: str
    weight: float


@dataclass(frozen=True, slots=True)
class Route:
    """A route: its arms, and the model that answers every call in parallel without being returned (``shadow``)."""

    name: str
    arms: tuple[Arm, ...]
    shadow: str | None = None

    def pick(self, rng: random.Random) -> Arm:
        """The arm of one call, drawn by weight."""
        if len(self.arms) == 1:
            return self.arms[0]
        x = rng.random()
        for arm in self.arms:
            x -= arm.weight
            if x < 0:
                return arm
        return self.arms[-1]

    @property
    def spec(self) -> str:
        return f"{self.name}=" + ",".join(f"{a.model}:{a.weight:g}" for a in self.arms)

    @property
    def models(self) -> list[str]:
        """Every model the route may call: its arms', then its shadow's."""
        return [a.model for a in self.arms] + ([self.shadow] if self.shadow else [])

    def promoted(self, model: str, weight: float = 1.0, served: Sequence[str] = ()) -> Route:
        """The route with ``model`` (one of its models, or of the ``served`` ones) given ``weight`` of the traffic
        and the other arms the rest, in the shares they had among themselves (all of it: the others leave the
        route). A shadow promoted stops being the shadow."""
        if model not in self.models and model not in served:
            raise ConfigError(f"route {self.name}: {model} is none of its arms or its shadow "
                              f"({', '.join(self.models)}), nor another model the gateway serves")
        if not (0 < weight <= 1):
            raise ConfigError(f"route {self.name}: the weight of {model} ({weight:g}) must be a number in (0, 1]")
        others = [a for a in self.arms if a.model != model]
        rest = sum(a.weight for a in others)
        arms = [Arm(model, weight)]
        if weight < 1:
            if not others:
                raise ConfigError(f"route {self.name}: {model} is its only arm, so it takes all of the traffic")
            arms += [Arm(a.model, (1 - weight) * (a.weight / rest if rest else 1 / len(others))) for a in others]
        return Route(self.name, tuple(arms), None if self.shadow == model else self.shadow)

    def as_dict(self) -> dict[str, object]:
        return {"arms": [[a.model, a.weight] for a in self.arms], "shadow": self.shadow}

    @classmethod
    def from_dict(cls, name: str, data: dict[str, object]) -> Route:
        arms = data.get("arms")
        if not isinstance(arms, list) or not arms:
            raise ConfigError(f"route {name}: no arms")
        shadow = data.get("shadow")
        return cls(name, tuple(Arm(str(m), float(w)) for m, w in arms), str(shadow) if shadow else None)


def parse_route(spec: str, models: dict[str, ModelEndpoint]) -> Route:
    """``NAME=MODEL`` or ``NAME=MODEL:W,MODEL:W,...`` as a :class:`Route` of registered models."""
    name, sep, arms_text = spec.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name) or not arms_text.strip():
        raise ConfigError(f"--route {spec!r}: write NAME=MODEL or NAME=MODEL:WEIGHT,MODEL:WEIGHT (weights add up to 1)")
    parts = [p.strip() for p in arms_text.split(",")]
    arms: list[Arm] = []
    for part in parts:
        model, colon, weight_text = part.rpartition(":") if _weighted(part) else (part, "", "")
        model = model.strip()
        if not model:
            raise ConfigError(f"--route {spec!r}: an arm names no model")
        if model not in models:
            raise ConfigError(f"--route {name}: {unknown_model_message(model, models)}")
        if colon:
            try:
                weight = float(weight_text)
            except ValueError:
                weight = math.nan
        else:
            weight = 1.0 if len(parts) == 1 else math.nan
        if not (0 < weight <= 1):
            raise ConfigError(f"--route {name}: the weight of {model} ({weight_text or 'none'}) must be a number in "
                              "(0, 1]; a split names each arm's share, e.g. prod:0.9,cand:0.1")
        if any(a.model == model for a in arms):
            raise ConfigError(f"--route {name}: {model} is named twice")
        arms.append(Arm(model, weight))
    total = sum(a.weight for a in arms)
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        raise ConfigError(f"--route {name}: the weights add up to {total:g}, not 1")
    return Route(name, tuple(arms))


def _weighted(part: str) -> bool:
    """Whether an arm ends in ``:WEIGHT`` (model names may hold colons themselves: ``qwen:7b``)."""
    head, colon, tail = part.rpartition(":")
    return bool(colon and head) and re.fullmatch(r"[0-9.eE+-]+", tail.strip()) is not None


def with_shadow(route: Route, spec: str, models: dict[str, ModelEndpoint]) -> Route:
    """``--shadow NAME=MODEL``: ``route`` with MODEL answering every call in parallel (recorded, never returned)."""
    _, _, model = spec.partition("=")
    model = model.strip()
    if model not in models:
        raise ConfigError(f"--shadow {route.name}: {unknown_model_message(model, models)}")
    if any(a.model == model for a in route.arms):
        raise ConfigError(f"--shadow {route.name}: {model} is already one of its arms")
    return Route(route.name, route.arms, model)


__all__ = ["Arm", "Route", "parse_route", "with_shadow"]
