"""``workbench envs`` and ``workbench validate``."""

from __future__ import annotations

import click

from .common import console, console_err, emit_json


@click.command("envs")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line of stdout.")
def envs_command(as_json: bool) -> None:
    """List bundled and discovered environments with their version hashes."""
    from ..discovery import discover

    rows = []
    for ref in discover():
        try:
            version = ref.version()
        except OSError as e:
            version = f"unreadable ({e.strerror})"
        rows.append({"name": ref.name, "origin": ref.origin, "version": version,
                     "path": str(ref.path) if ref.path else ref.module})
    if as_json:
        emit_json({"envs": rows})
        return
    from rich.table import Table

    t = Table(box=None, show_edge=False)
    for col in ("name", "origin", "version", "path"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], r["origin"], r["version"], r["path"] or "")
    console.print(t)


@click.command("validate")
@click.argument("env")
@click.option("-a", "--env-args", "env_args", default=None, help="JSON keyword arguments for load_environment.")
@click.option("--sample", type=int, default=20, show_default=True, help="How many tasks to score.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object as the last line of stdout.")
@click.pass_context
def validate_command(ctx: click.Context, env: str, env_args: str | None, sample: int, as_json: bool) -> None:
    """Load ENV, check its tasks and rubric, score gold answers and an empty completion."""
    import asyncio

    from ..discovery import parse_env_args
    from ..validate import validate_env

    rep = asyncio.run(validate_env(env, parse_env_args(env_args), sample))
    if as_json:
        emit_json(rep.as_dict())
    else:
        total = f" of {rep.total_tasks}" if rep.total_tasks is not None else ""
        console.print(f"[bold]{rep.env}[/] ({rep.version}): {rep.tasks_checked}{total} tasks checked")
        if rep.gold:
            console.print("gold answer scores:  " + ", ".join(f"{k} {v:.3f}" for k, v in rep.gold.items()))
        console.print("empty answer scores: " + ", ".join(f"{k} {v:.3f}" for k, v in rep.empty.items()))
        for w in rep.warnings:
            console_err.print(f"[yellow]warning:[/] {w}")
        for p in rep.problems:
            console_err.print(f"[bold red]problem:[/] {p}")
        if rep.ok:
            console.print("[green]ok[/]")
    if not rep.ok:
        ctx.exit(1)


COMMANDS = [envs_command, validate_command]
