"""``workbench import FILE --format openai-jsonl|verifiers|inspect|atif``: conversations as an imported run."""

from __future__ import annotations

from pathlib import Path

import click

from workbench.cli.common import console, db_option, emit_json, env_args_option, json_option, open_store

_SHOWN = 20  # bad lines listed for people (--json lists them all)


@click.command("import")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", required=True, type=click.Choice(["openai-jsonl", "verifiers", "inspect", "atif"]),
              help="openai-jsonl: one {\"messages\": [...]} a line; verifiers: a `vf-eval -s` results folder; "
                   "inspect: an Inspect AI .eval log; atif: a Harbor ATIF trajectory file, or a folder of them "
                   "(a Harbor job or trial folder).")
@click.option("--env", default=None, help="Tie the run to this environment (so `workbench rescore ENV --run RUN` "
              "scores it); conversations whose first user turn is a task prompt take that task.")
@env_args_option("JSON keyword arguments for --env's load_environment.")
@click.option("-m", "--model", default=None, help="The model that wrote the conversations (default: the file's).")
@db_option
@json_option()
@click.pass_context
def import_command(ctx: click.Context, file: Path, fmt: str, env: str | None, env_args: str | None,
                   model: str | None, db: str | None, as_json: bool) -> None:
    """Import the conversations of FILE as the rollouts of a new run (source: imported).

    Rewards are kept where the file has them. Lines that cannot be imported are reported with their
    line numbers; every valid conversation is kept. The same file is never imported twice.
    """
    from rich.markup import escape

    from workbench.runs.import_traces import import_file

    args = None
    if env_args is not None:
        from workbench.authoring.discovery import parse_env_args

        args = parse_env_args(env_args)
    with open_store(ctx, db) as store:
        res = import_file(store, file, fmt, env=env, model=model, env_args=args)
    if as_json:
        emit_json(res.as_dict())
        return
    rate = f", {res.rollouts / res.wall_s:,.0f}/s" if res.wall_s > 0 else ""
    rewarded = f"; {res.rewarded:,} with a reward (mean {res.mean_reward:.3f})" if res.rewarded else "; no rewards"
    console.print(f"imported [bold]{res.rollouts:,}[/] conversations from {escape(res.file)} ({res.format}) as run "
                  f"[bold]{res.run_id}[/] of {escape(res.env)}{rewarded} ({res.wall_s:.2f} s{rate})")
    if res.matched is not None:
        unmatched = res.rollouts - res.matched
        console.print(f"{res.matched:,} of {res.rollouts:,} conversations matched a task of {escape(res.env)}" + (
            f"; [yellow]{unmatched:,} matched none[/] (their first user turn is no task prompt of it): "
            "`workbench rescore` skips them" if unmatched else ""))
    if res.problems:
        console.print(f"[yellow]skipped {len(res.problems):,}[/]:")
        for p in res.problems[:_SHOWN]:
            console.print(f"  {escape(p.where)}: {escape(p.reason)}")
        if len(res.problems) > _SHOWN:
            console.print(f"  … and {len(res.problems) - _SHOWN:,} more (--json lists every one)")
    console.print(f"[dim]browse: workbench runs {res.run_id}" + (
        f" · rescore: workbench rescore {escape(env)} --run {res.run_id}" if env else "") + "[/]")


COMMANDS = [import_command]
