"""The routes a running gateway serves, in a file both it and ``workbench gateway promote`` read
(``~/.config/workbench/gateway_routes.json``, written atomically): the gateway writes its routes there when it
starts; ``promote`` changes a route's split there; the gateway reads the file again when it changes (checked
at each request) and serves the new split from then on, without a restart. Only a split among the models the
gateway started with is taken; anything else in the file is ignored, and said once on stderr.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from workbench.config import paths
from workbench.errors import ConfigError
from workbench.fsutil import atomic_write

from .routes import Route

ROUTES_FILE = "gateway_routes.json"


def routes_path() -> Path:
    return paths.config_dir() / ROUTES_FILE


def publish(routes: dict[str, Route], path: Path | None = None, served: Sequence[str] = ()) -> Path:
    """Write the routes a gateway serves and every model it can call (the file it and ``promote`` share)."""
    data = {"routes": {name: r.as_dict() for name, r in routes.items()}, "published_at": time.time(),
            "models": sorted(set(served) | {m for r in routes.values() for m in r.models})}
    return atomic_write(path or routes_path(), orjson.dumps(data, option=orjson.OPT_INDENT_2), mkdirs=True)


def load(path: Path | None = None) -> dict[str, Route]:
    p = path or routes_path()
    try:
        data = orjson.loads(p.read_bytes())
        return {str(name): Route.from_dict(str(name), spec) for name, spec in data["routes"].items()}
    except FileNotFoundError:
        raise ConfigError(f"no gateway has published its routes here ({p}); start one with "
                          "`workbench gateway --route NAME=MODEL`") from None
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise ConfigError(f"{p}: not a gateway routes file ({e})") from None


def promote(route: str, model: str, weight: float = 1.0, path: Path | None = None) -> Route:
    """Give ``model`` ``weight`` of ``route``'s traffic in the running gateway's routes; the new route."""
    routes = load(path)
    if route not in routes:
        raise ConfigError(f"the gateway has no route {route!r}; its routes: {', '.join(sorted(routes)) or 'none'}")
    served = served_models(path)
    routes[route] = routes[route].promoted(model, weight, served)
    publish(routes, path, served)
    return routes[route]


def served_models(path: Path | None = None) -> list[str]:
    """Every model the gateway that published the file can call."""
    try:
        found = orjson.loads((path or routes_path()).read_bytes()).get("models")
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return []
    return [str(m) for m in found] if isinstance(found, list) else []


class RouteBook:
    """A running gateway's routes: those it started with, then what the file says, once it changes."""

    def __init__(self, routes: dict[str, Route], path: Path | None = None) -> None:
        self.routes = dict(routes)
        self.models = {m for r in routes.values() for m in r.models}
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self.changes = 0

    def start(self) -> None:
        publish(self.routes, self.path, sorted(self.models))
        self._stamp = self._current_stamp()

    def _current_stamp(self) -> tuple[int, int] | None:
        try:
            st = (self.path or routes_path()).stat()
            return st.st_mtime_ns, st.st_size
        except OSError:
            return None

    def current(self) -> dict[str, Route]:
        stamp = self._current_stamp()
        if self._stamp is not None and stamp is not None and stamp != self._stamp:
            self._stamp = stamp
            self._take(stamp)
        return self.routes

    def _take(self, stamp: Any) -> None:
        try:
            found = load(self.path)
        except ConfigError as e:
            print(f"gateway: the routes file changed and cannot be read ({e}); serving the routes as they were",
                  file=sys.stderr)
            return
        for name, route in found.items():
            shares = [a.weight for a in route.arms]
            if not (math.isclose(sum(shares), 1.0, abs_tol=1e-6) and all(0 < w <= 1 for w in shares)):
                continue  # a hand-edited split that does not add up: the route stays as it was
            if name in self.routes and set(route.models) <= self.models and route != self.routes[name]:
                self.routes[name] = route
                self.changes += 1


__all__ = ["ROUTES_FILE", "RouteBook", "load", "promote", "publish", "routes_path", "served_models"]
