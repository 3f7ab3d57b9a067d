"""``workbench prices``: the per-model token price table kept in the store; ``workbench gpu-prices``: the GPU
price table cluster plans are costed with."""

from __future__ import annotations

import click

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.cli.tables import Col, print_table
from workbench.errors import ConfigError

#: The price tables' columns: model ids, GPU names and prices whole, where a price comes from folded.
PRICE_COLUMNS = (Col("model", keep=True), Col("provider", keep=True), Col("$/Mtok in", keep=True, justify="right"),
                 Col("$/Mtok out", keep=True, justify="right"), Col("source", fold_to=16))
GPU_PRICE_COLUMNS = (Col("provider", keep=True), Col("gpu", keep=True), Col("$/GPU-s", keep=True, justify="right"),
                     Col("$/GPU-h", keep=True, justify="right"), Col("source", fold_to=16))


@click.group("prices")
def prices_group() -> None:
    """Show or edit token prices (USD per million tokens) used to cost API models."""


@prices_group.command("list")
@db_option
@json_option()
@click.pass_context
def prices_list(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """List the price table."""
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        prices = store.prices()
    rows = [{"model": p.model, "provider": p.provider, "input_usd_per_mtok": p.input_usd_per_mtok,
             "output_usd_per_mtok": p.output_usd_per_mtok, "source": p.source} for p in prices.values()]
    if as_json:
        emit_json({"prices": rows})
        return
    print_table(PRICE_COLUMNS, [(r["model"], r["provider"], f"{r['input_usd_per_mtok']:.3f}",
                                 f"{r['output_usd_per_mtok']:.3f}", r["source"]) for r in rows], console)


@prices_group.command("set")
@click.argument("model")
@click.option("--input", "inp", type=float, required=True, help="USD per million prompt tokens.")
@click.option("--output", "out", type=float, required=True, help="USD per million completion tokens.")
@click.option("--provider", default="", help="Provider name (openai, anthropic, ...).")
@db_option
@click.pass_context
def prices_set(ctx: click.Context, model: str, inp: float, out: float, provider: str, db: str | None) -> None:
    """Set the price of MODEL (an exact id, or a prefix ending in '*')."""
    from workbench.errors import ConfigError

    if inp < 0 or out < 0:
        raise ConfigError("prices cannot be negative")
    with open_store(ctx, db) as store:
        store.set_price(model, inp, out, provider)
    console.print(f"{model}: ${inp:g} in / ${out:g} out per million tokens")


@prices_group.command("delete")
@click.argument("model")
@db_option
@click.pass_context
def prices_delete(ctx: click.Context, model: str, db: str | None) -> None:
    """Remove MODEL's row from the price table."""
    from workbench.errors import NotFoundError

    with open_store(ctx, db) as store:
        if not store.delete_price(model):
            raise NotFoundError(f"no price row for {model!r}; `workbench prices list` shows them")
    console.print(f"removed {model}")


@click.group("gpu-prices")
def gpu_prices_group() -> None:
    """Show or edit GPU prices (USD per GPU-second) used to cost cluster plans."""


@gpu_prices_group.command("list")
@json_option()
def gpu_prices_list(as_json: bool) -> None:
    """List the GPU price table (defaults plus your overrides)."""
    from workbench.cost.gpu_prices import load_prices, prices_path

    rows = [p.to_dict() for p in load_prices().values()]
    if as_json:
        emit_json({"prices": rows, "path": str(prices_path())})
        return
    print_table(GPU_PRICE_COLUMNS, [(str(r["provider"]), str(r["gpu"]), f"{r['usd_per_gpu_s']:.6f}",
                                     f"{r['usd_per_gpu_hour']:.2f}", str(r["source"])) for r in rows], console)
    console.print(f"overrides: {prices_path()} (edit with `workbench gpu-prices set PROVIDER GPU --per-hour USD`)")


@gpu_prices_group.command("set")
@click.argument("provider")
@click.argument("gpu")
@click.option("--per-second", "per_s", type=float, default=None, help="USD per GPU-second.")
@click.option("--per-hour", "per_h", type=float, default=None, help="USD per GPU-hour.")
@click.option("--source", default="user", help="Where the price comes from.")
def gpu_prices_set(provider: str, gpu: str, per_s: float | None, per_h: float | None, source: str) -> None:
    """Set the price of GPU at PROVIDER (a new provider is added)."""
    from workbench.cost.gpu_prices import set_price

    if (per_s is None) == (per_h is None):
        raise ConfigError("give exactly one of --per-second or --per-hour")
    p = set_price(provider, gpu, per_s if per_s is not None else (per_h or 0.0) / 3600, source)  # exactly one is given
    console.print(f"{p.provider} {p.gpu}: ${p.usd_per_gpu_s:.6f}/GPU-s (${p.usd_per_gpu_hour:.2f}/GPU-h)")


@gpu_prices_group.command("delete")
@click.argument("provider")
@click.argument("gpu")
def gpu_prices_delete(provider: str, gpu: str) -> None:
    """Remove your override for GPU at PROVIDER (a default price comes back)."""
    from workbench.cost.gpu_prices import delete_price
    from workbench.errors import NotFoundError

    if not delete_price(provider, gpu):
        raise NotFoundError(f"no override for {provider} {gpu}; `workbench gpu-prices list` shows the table")
    console.print(f"removed {provider} {gpu}")


COMMANDS = [prices_group, gpu_prices_group]
