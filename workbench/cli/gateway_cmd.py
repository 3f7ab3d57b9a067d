"""``workbench gateway``: a product's own traffic through Workbench; ``gateway keys`` makes the keys a product
sends it (``workbench/gateway/keys.py``)."""

from __future__ import annotations

import time

import click

from workbench.cli.common import console, emit_json, json_option
from workbench.cli.tables import Col, print_table

KEY_COLUMNS = (Col("app", keep=True), Col("id", keep=True), Col("made", keep=True), Col("status", keep=True))


@click.group("gateway")
def gateway_group() -> None:
    """A gateway a product points its SDK at: `gateway keys add APP` makes the key it sends."""


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


COMMANDS = [gateway_group]
