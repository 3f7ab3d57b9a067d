"""``workbench costs``: the cost ledger by run, provider or day, and budgets (the app's Costs screen)."""

from __future__ import annotations

import time
from dataclasses import asdict

import click

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import fcost

#: The table's column for each cost kind: every amount is in US dollars, whatever the kind counts.
KIND_COLUMNS = {"api_tokens": "api $", "gpu_seconds": "gpu $", "sandbox_seconds": "sandbox $"}
UNITS_LINE = ("amounts in US dollars: api $ = model API tokens, gpu $ = GPU time, sandbox $ = sandbox time, "
              "total $ = their sum; events = cost events recorded")


@click.command("costs")
@click.option("--by", "group", type=click.Choice(["run", "provider", "day"]), default="run", show_default=True)
@db_option
@json_option()
@click.pass_context
def costs_command(ctx: click.Context, group: str, db: str | None, as_json: bool) -> None:
    """What runs cost, in US dollars: API tokens, GPU time and sandbox time, with the monthly and per-run
    budgets."""
    from workbench.cost.budgets import monthly_budget_usd
    from workbench.cost.ledger import KINDS, read_ledger

    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        ledger = read_ledger(store.conn, group)
    monthly = monthly_budget_usd()
    if as_json:
        emit_json({**asdict(ledger), "monthly_budget_usd": monthly})
        return
    from rich.table import Table

    month = time.strftime("%B %Y", time.localtime(ledger.month_start))
    budget = f" of ${monthly:,.2f} monthly budget" if monthly is not None else " (no monthly budget: [budget] " \
        "monthly_usd in tui.toml)"
    console.print(f"total {fcost(ledger.total_usd)} in {ledger.total_events} cost events; {month}: "
                  f"{fcost(ledger.month_usd)}{budget}", markup=False)
    t = Table(box=None, show_edge=False)
    for col in (group, "events", *(KIND_COLUMNS.get(k, f"{k} $") for k in KINDS), "total $"):
        t.add_column(col, justify="left" if col == group else "right")
    for r in ledger.rows:
        t.add_row(r.key, str(r.events), *(fcost(r.by_kind[k]) for k in KINDS), fcost(r.usd))
    console.print(t)
    console.print(UNITS_LINE, markup=False, highlight=False)
    for rb in ledger.runs:
        cap = f"of ${rb.budget_usd:,.2f} ({100 * (rb.fraction or 0):.0f}%)" if rb.budget_usd is not None \
            else "(no budget)"
        console.print(f"launched run {rb.run_id} ({rb.env}, {rb.status}): {fcost(rb.spent_usd)} {cap}", markup=False)


COMMANDS = [costs_command]
