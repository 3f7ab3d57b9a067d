"""``workbench prices``: the per-model token price table kept in the store."""

from __future__ import annotations

import click

from .common import console, emit_json, open_store


@click.group("prices")
def prices_group() -> None:
    """Show or edit token prices (USD per million tokens) used to cost API models."""


@prices_group.command("list")
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def prices_list(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """List the price table."""
    with open_store(ctx, db) as store:
        prices = store.prices()
    rows = [{"model": p.model, "provider": p.provider, "input_usd_per_mtok": p.input_usd_per_mtok,
             "output_usd_per_mtok": p.output_usd_per_mtok, "source": p.source} for p in prices.values()]
    if as_json:
        emit_json({"prices": rows})
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    for col in ("model", "provider", "$/Mtok in", "$/Mtok out", "source"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["model"], r["provider"], f"{r['input_usd_per_mtok']:.3f}", f"{r['output_usd_per_mtok']:.3f}",
                  r["source"])
    console.print(t)


@prices_group.command("set")
@click.argument("model")
@click.option("--input", "inp", type=float, required=True, help="USD per million prompt tokens.")
@click.option("--output", "out", type=float, required=True, help="USD per million completion tokens.")
@click.option("--provider", default="", help="Provider name (openai, anthropic, ...).")
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.pass_context
def prices_set(ctx: click.Context, model: str, inp: float, out: float, provider: str, db: str | None) -> None:
    """Set the price of MODEL (an exact id, or a prefix ending in '*')."""
    from ..errors import ConfigError

    if inp < 0 or out < 0:
        raise ConfigError("prices cannot be negative")
    with open_store(ctx, db) as store:
        store.set_price(model, inp, out, provider)
    console.print(f"{model}: ${inp:g} in / ${out:g} out per million tokens")


@prices_group.command("delete")
@click.argument("model")
@click.option("--db", "db", envvar="WORKBENCH_DB", default=None, help="Store file.")
@click.pass_context
def prices_delete(ctx: click.Context, model: str, db: str | None) -> None:
    """Remove MODEL's row from the price table."""
    from ..errors import NotFoundError

    with open_store(ctx, db) as store:
        if not store.delete_price(model):
            raise NotFoundError(f"no price row for {model!r}; `workbench prices list` shows them")
    console.print(f"removed {model}")


COMMANDS = [prices_group]
