"""``workbench gateway``'s use case: the routes checked against the registered models, one upstream per model
named, the recorder on the store, the server started; then it serves until cancelled."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workbench.config.models import load_models
from workbench.errors import ConfigError
from workbench.rollouts.client import ChatClient
from workbench.runs.endpoint import resolve_endpoint
from workbench.store import Store
from workbench.store.prices import match_price

from .keys import KeyRing
from .live_routes import RouteBook
from .recorder import TrafficRecorder
from .redaction import Redactor
from .retention import Retention, keep_applying
from .routes import Route, parse_route, with_shadow
from .server import Gateway, Upstream


def build_gateway(route_specs: Sequence[str], *, default: str | None = None, store: Store | None = None,
                  record_rate: float = 1.0, redact: Sequence[str] = (), seed: int | None = None,
                  shadows: Sequence[str] = (), routes_file: Path | None = None) -> Gateway:
    """A gateway for ``route_specs`` (``NAME=MODEL[:W],...``; ``default`` is a route name or a registered model
    served for any other name); each bad route is one :class:`ConfigError`, before anything starts."""
    if not 0.0 <= record_rate <= 1.0:
        raise ConfigError(f"--record-rate {record_rate:g}: a fraction between 0 and 1")
    models = load_models()
    routes: dict[str, Route] = {}
    for spec in route_specs:
        route = parse_route(spec, models)
        if route.name in routes:
            raise ConfigError(f"--route {route.name}: named twice")
        routes[route.name] = route
    if default is not None and default not in routes:
        routes[default] = parse_route(f"{default}={default}", models)
    if not routes:
        raise ConfigError("the gateway needs a route: --route NAME=MODEL (a registered model; `workbench models`)")
    for spec in shadows:
        name = spec.partition("=")[0].strip()
        if name not in routes or "=" not in spec:
            raise ConfigError(f"--shadow {spec!r}: write ROUTE=MODEL for one of the routes "
                              f"({', '.join(sorted(routes))})")
        routes[name] = with_shadow(routes[name], spec, models)
    upstreams: dict[str, Upstream] = {}
    prices = store.prices() if store is not None else {}
    for route in routes.values():
        for model in route.models:
            if model in upstreams:
                continue
            endpoint = resolve_endpoint(model=model)
            upstreams[model] = Upstream(model, ChatClient(endpoint.api_key, max_connections=256,
                                                          provider=endpoint.provider),
                                        endpoint.base_url.rstrip("/"), endpoint.model,
                                        endpoint.price or match_price(endpoint.model, prices))
    rng = random.Random(seed)
    recorder = None
    if store is not None:
        recorder = TrafficRecorder(store, redactor=Redactor(extra=redact), rate=record_rate,
                                   rng=random.Random(rng.random()))
    return Gateway(book=RouteBook(routes, routes_file), upstreams=upstreams, keys=KeyRing(), recorder=recorder,
                   default=default, rng=rng)


async def serve(gateway: Gateway, *, host: str = "127.0.0.1", port: int = 0,
                on_ready: Callable[[Gateway], Any] | None = None, retention: Retention | None = None) -> None:
    """Serve until cancelled (Ctrl-C, SIGTERM), applying ``retention`` to the recorded traffic while it does; the
    recorder is flushed and closed at the end."""
    try:
        await gateway.start(host, port)
    except OSError as e:
        raise ConfigError(f"the gateway cannot listen on {host}:{port} ({e.strerror or e})") from None
    gateway.book.start()  # its routes published, for `gateway promote` and the app
    pruning = None
    if retention is not None and retention.limited and gateway.recorder is not None:
        pruning = asyncio.create_task(keep_applying(retention, gateway.recorder.store.path))
    try:
        if on_ready is not None:
            on_ready(gateway)
        await asyncio.Event().wait()
    finally:
        if pruning is not None:
            pruning.cancel()
        await gateway.close()
        if gateway.recorder is not None:
            await asyncio.to_thread(gateway.recorder.close)


__all__ = ["build_gateway", "serve"]
