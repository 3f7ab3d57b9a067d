"""``workbench gateway``: a product's own traffic through Workbench; ``gateway keys`` makes the keys a product
sends it (``workbench/gateway/keys.py``)."""

from __future__ import annotations

import time
from typing import Any

import click

from workbench.cli.common import (
    console,
    console_err,
    db_option,
    emit_json,
    json_option,
    open_store,
    run_async,
)
from workbench.cli.tables import Col, print_table

KEY_COLUMNS = (Col("app", keep=True), Col("id", keep=True), Col("made", keep=True), Col("status", keep=True))


def retention_options(f: Any) -> Any:
    """``--retain-days`` and ``--retain-exchanges``: how much recorded traffic is kept."""
    f = click.option("--retain-exchanges", type=int, default=None, metavar="N",
                     help="Keep only the newest N recorded exchanges (the rest deleted, with their feedback).")(f)
    return click.option("--retain-days", type=float, default=None, metavar="DAYS",
                        help="Delete recorded exchanges older than DAYS (with their feedback).")(f)


@click.group("gateway", invoke_without_command=True)
@click.option("--port", type=int, default=8400, show_default=True, help="The port to listen on (0: any free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to listen on (loopback unless told otherwise).")
@click.option("--route", "routes", multiple=True, metavar="NAME=MODEL[:W,...]",
              help="A model name the product asks for, served by a registered model, or split among several "
                   "(support=prod:0.9,cand:0.1). Repeatable.")
@click.option("--default", "default", default=None, metavar="NAME",
              help="The route (or registered model) that serves any other model name.")
@click.option("--shadow", "shadows", multiple=True, metavar="ROUTE=MODEL",
              help="MODEL also answers each call of ROUTE, after the arm that serves it: recorded, never returned. "
                   "Repeatable.")
@click.option("--record-rate", type=float, default=1.0, show_default=True,
              help="The fraction of exchanges recorded in the store.")
@click.option("--redact", "redact", multiple=True, metavar="REGEX",
              help="Also remove text matching REGEX before recording (keys, emails, phone and card numbers always "
                   "are). Repeatable.")
@retention_options
@click.option("--seed", type=int, default=None, hidden=True, help="Seed of the arm draws (tests).")
@db_option
@json_option("Print one JSON object (host, port, routes) once serving.")
@click.pass_context
def gateway_group(ctx: click.Context, port: int, host: str, routes: tuple[str, ...], default: str | None,
                  shadows: tuple[str, ...], record_rate: float, redact: tuple[str, ...], retain_days: float | None,
                  retain_exchanges: int | None, seed: int | None, db: str | None, as_json: bool) -> None:
    """A gateway a product points its OpenAI or Anthropic SDK at: `gateway --route NAME=MODEL` serves;
    `gateway keys add APP` makes the key the product sends."""
    if ctx.invoked_subcommand is not None:
        return
    from workbench.gateway.retention import Retention
    from workbench.gateway.serve import build_gateway, serve

    retention = Retention(retain_days, retain_exchanges)
    store = open_store(ctx, db)
    gateway = build_gateway(routes, default=default, store=store, record_rate=record_rate, redact=redact, seed=seed,
                            shadows=shadows)

    def ready(gw: Any) -> None:
        info = {"host": host, "port": gw.port, "base_url": f"http://{host}:{gw.port}/v1",
                "routes": {name: r.spec for name, r in gw.routes.items()},
                "shadows": {name: r.shadow for name, r in gw.routes.items() if r.shadow}, "store": str(store.path),
                "retention": retention.describe()}
        if as_json:
            emit_json(info)
        else:
            console.print(f"gateway on {info['base_url']}: " + ", ".join(info["routes"].values()), highlight=False)

    try:
        run_async(serve(gateway, host=host, port=port, on_ready=ready, retention=retention))
    finally:
        if gateway.recorder is not None and gateway.port:
            stats = gateway.recorder.stats()
            console_err.print(f"gateway stopped: {gateway.served} served, {stats['recorded']} recorded, "
                              f"{stats['dropped']} dropped, {gateway.refused} refused", highlight=False)
        store.close()


@gateway_group.command("promote")
@click.argument("route")
@click.argument("model", metavar="MODEL[:WEIGHT]")
@json_option()
def gateway_promote(route: str, model: str, as_json: bool) -> None:
    """Give MODEL (an arm or the shadow of ROUTE) all of ROUTE's traffic, or WEIGHT of it (the other arms share
    the rest as before); the running gateway serves the new split from its next request, without a restart."""
    from workbench.errors import ConfigError
    from workbench.gateway.live_routes import promote

    name, _, weight_text = model.rpartition(":") if ":" in model else (model, "", "")
    try:
        weight = float(weight_text) if weight_text else 1.0
    except ValueError:
        name, weight = model, 1.0
    if not name:
        raise ConfigError(f"{model!r}: name one of the route's models, e.g. cand or cand:0.5")
    new = promote(route, name, weight)
    if as_json:
        emit_json({"route": route, "spec": new.spec, "shadow": new.shadow})
        return
    console.print(f"{new.spec}" + (f" (shadow {new.shadow})" if new.shadow else ""), highlight=False)


@gateway_group.command("routes")
@json_option()
def gateway_routes(as_json: bool) -> None:
    """The routes the gateway serves (as it published them), with their splits and shadows."""
    from workbench.gateway.live_routes import load, routes_path

    routes = load()
    if as_json:
        emit_json({"routes": {n: {"spec": r.spec, **r.as_dict()} for n, r in routes.items()},
                   "path": str(routes_path())})
        return
    for r in routes.values():
        console.print(r.spec + (f"  shadow {r.shadow}" if r.shadow else ""), highlight=False, markup=False)


@gateway_group.group("keys")
def keys_group() -> None:
    """The keys products send the gateway (never a provider's key)."""


@keys_group.command("add")
@click.argument("app")
@json_option()
def keys_add(app: str, as_json: bool) -> None:
    """Make a key for APP; it is printed once (only its hash is kept)."""
    from workbench.gateway.keys import add_key, keys_path

    key, record = add_key(app)
    if as_json:
        emit_json({"key": key, **record.public(), "path": str(keys_path())})
        return
    console.print(f"gateway key for {record.app} (id {record.id}); shown once, keep it now:", highlight=False)
    console.print(key, highlight=False, markup=False)


@keys_group.command("list")
@json_option()
def keys_list(as_json: bool) -> None:
    """List the keys made here: app, id, when, whether revoked (never the key)."""
    from workbench.gateway.keys import keys_path, load_keys

    keys = load_keys()
    if as_json:
        emit_json({"keys": [k.public() for k in keys], "path": str(keys_path())})
        return
    if not keys:
        console.print("no gateway keys: `workbench gateway keys add APP`")
        return
    rows = [(k.app, k.id, time.strftime("%Y-%m-%d %H:%M", time.localtime(k.created_at)),
             "active" if k.active else "revoked") for k in keys]
    print_table(KEY_COLUMNS, rows, console)


@keys_group.command("revoke")
@click.argument("name")
@json_option()
def keys_revoke(name: str, as_json: bool) -> None:
    """Revoke the key with id NAME, or every key of the app NAME (a running gateway refuses it at once)."""
    from workbench.gateway.keys import revoke

    gone = revoke(name)
    if as_json:
        emit_json({"revoked": [k.public() for k in gone]})
        return
    console.print(f"revoked {len(gone)} key(s): " + ", ".join(f"{k.app} ({k.id})" for k in gone), highlight=False)




@gateway_group.command("prune")
@retention_options
@click.option("--app", default=None, help="Only this app's traffic.")
@db_option
@json_option()
@click.pass_context
def prune_command(ctx: click.Context, retain_days: float | None, retain_exchanges: int | None, app: str | None,
                  db: str | None, as_json: bool) -> None:
    """Apply a retention limit to the recorded traffic once: delete the exchanges older than --retain-days, or
    past the newest --retain-exchanges, with everything of theirs (scores, feedback, search entries)."""
    from workbench.errors import ConfigError
    from workbench.gateway.retention import Retention

    retention = Retention(retain_days, retain_exchanges)
    if not retention.limited:
        raise ConfigError("gateway prune needs a limit: --retain-days DAYS, --retain-exchanges N, or both")
    with open_store(ctx, db, existing=True) as store:
        path = store.path
    gone = retention.apply(path, app=app)
    if as_json:
        emit_json({**gone, "kept": retention.describe(), "app": app})
        return
    console.print(f"deleted {gone['exchanges']:,} exchanges, {gone['feedback']:,} judgements and {gone['runs']:,} "
                  f"empty runs (kept: {retention.describe()})", highlight=False, markup=False)


COMMANDS = [gateway_group]
