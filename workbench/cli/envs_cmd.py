"""``workbench envs`` and ``workbench validate``."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from workbench.cli.common import (
    console,
    console_err,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    no_credentials,
    run_async,
)
from workbench.cli.tables import Col, print_table

#: ``envs``' columns: names and versions whole, origins and paths folded.
ENV_COLUMNS = (Col("name", keep=True), Col("origin", fold_to=12), Col("dialect", fold_to=9), Col("version", keep=True),
               Col("path", fold_to=16))


@click.command("envs")
@json_option()
def envs_command(as_json: bool) -> None:
    """List bundled and discovered environments with their versions.

    The version is the one a run stores (``eval ENV`` without -a): each environment is loaded, so the
    data files its tasks are read from count as well as its own files. One that does not load shows the
    hash of its files alone, and why it did not load. A pulled environment is never loaded here: its
    row is its record's metadata and the hash of its files (its code runs when you run it).
    """
    from workbench.usecases.environments import list_environments

    rows = [listing.row() for listing in list_environments()]
    if as_json:
        emit_json({"envs": rows})
        return
    cols = [*ENV_COLUMNS, *([Col("note", fold_to=16)] if any("error" in r for r in rows) else [])]
    cells = []
    for r in rows:
        note = [f"files only: did not load ({r['error']})"] if "error" in r else [""]
        origin = f"{r['origin']} ({r['framework']})" if "framework" in r else r["origin"]
        if "hub" in r:
            origin = f"hub: {r['hub']['index']} {r['hub']['version']}"
        if "forked_from" in r:
            origin += f" (fork of {r['forked_from'].get('name')} {r['forked_from'].get('version')})"
        version = f"{r['version']} (prompt from {r['override']['origin'] or 'an override'})" if "override" in r \
            else r["version"]
        cells.append((r["name"], origin, r["dialect"], version, r["path"] or "", *note[: len(cols) - 5]))
    print_table(cols, cells, console)


def token_check_line(tokens: dict[str, Any]) -> str:
    """The --model check's result: how many rollouts ran, how many came back with token ids, and how many
    later turns' prompt tokens did not extend the earlier turn's (mismatches)."""
    head = f"token check (run {tokens['run_id']}): {tokens['rollouts']} rollouts, {tokens['traced']} with token ids"
    if not tokens["traced"]:
        return head + "; not checked (the endpoint returned no token ids)"
    line = f"{head}, {tokens['mismatches']} token mismatches"
    if tokens.get("render_mismatches"):
        line += f", {tokens['render_mismatches']} chat-template re-render mismatches"
    return line


@click.command("validate")
@click.argument("env")
@env_args_option()
@click.option("--sample", type=int, default=20, show_default=True, help="How many tasks to score.")
@click.option("-m", "--model", default=None,
              help="Also run a few rollouts on this model and check multi-turn token consistency.")
@click.option("--base-url", default=None, callback=no_credentials, envvar="WORKBENCH_BASE_URL", help="Endpoint for --model (default: embedded).")
@click.option("--api-key", default=None, help="API key for --base-url.")
@click.option("--rollouts", type=int, default=3, show_default=True, help="Rollouts to run with --model.")
@click.option("--tokenizer", default=None, help="Tokenizer (model path or id) to re-render traces with.")
@click.option("--no-probe", "no_probe", is_flag=True, help="Skip the model-free adversarial probe.")
@db_option
@json_option()
@click.pass_context
def validate_command(ctx: click.Context, env: str, env_args: str | None, sample: int, model: str | None,
                     base_url: str | None, api_key: str | None, rollouts: int, tokenizer: str | None,
                     no_probe: bool, db: str | None, as_json: bool) -> None:
    """Load ENV, check its tasks and rubric, score gold answers and an empty completion, and run the
    model-free part of `workbench probe` (the adversarial policies that need no model; --no-probe skips it):
    an exploitable policy is a warning.

    With --model (or --base-url), also run a few rollouts and fail loudly when a later turn's
    prompt tokens do not extend the earlier turn's tokens (a re-tokenization mismatch).
    """
    import asyncio

    from workbench.authoring.discovery import parse_env_args
    from workbench.runs.validate import check_token_consistency, validate_env

    args = parse_env_args(env_args)
    rep = asyncio.run(validate_env(env, args, sample))
    if rep.ok and (model or base_url):
        from workbench.cli.common import open_store

        with open_store(ctx, db) as store:
            run_async(check_token_consistency(rep, store, env, args, model, base_url, api_key, rollouts, tokenizer))
    probe = None
    if rep.ok and not no_probe:  # its findings are warnings here, as a rewarded empty answer is; `probe` fails on them
        from workbench.cli.common import open_store
        from workbench.runs.probe import probe_env

        with open_store(ctx, db) as store:
            probe = run_async(probe_env(env, store, env_args=args, n=min(sample, 8), model_free_only=True))
        for pol in probe["policies"]:
            if pol["exploitable"]:
                rep.warnings.append(f"probe: the {pol['name']} policy ({pol['summary']}) earns {pol['mean_reward']:.3f}, "
                                    f"at least {probe['threshold']:g} of the {probe['basis'].replace('_', ' ')} reward "
                                    f"{probe['basis_reward']:.3f} (rollout {pol['example_rollout']}); see `workbench probe`")
    if as_json:
        emit_json({**rep.as_dict(), **({"probe": probe} if probe is not None else {})})
    else:
        total = f" of {rep.total_tasks}" if rep.total_tasks is not None else ""
        # Names, warnings and problems come from the environment: printed as text, never as markup.
        console.print(Text.assemble((rep.env, "bold"), f" ({rep.version}): {rep.tasks_checked}{total} tasks checked"))
        if rep.gold:
            console.print(Text("gold answer scores (mean per reward):  " + _means(rep.gold)))
        if rep.empty:
            console.print(Text("empty answer scores (mean per reward): " + _means(rep.empty)))
        if rep.tokens:
            console.print(token_check_line(rep.tokens), markup=False, highlight=False)
        if probe is not None:
            ran = [p for p in probe["policies"] if p["run_id"]]
            console.print(Text(f"probe (model-free): {len(ran)} policies, {probe['exploitable']} exploitable"
                               + (f"; skipped: {probe['skipped']}" if probe.get("skipped") else "")
                               + " (`workbench probe` runs the whole battery)"))
        for w in rep.warnings:
            console_err.print(Text.assemble(("warning:", "yellow"), f" {w}"))
        for p in rep.problems:
            console_err.print(Text.assemble(("problem:", "bold red"), f" {p}"))
        if rep.ok:
            console.print("[green]ok[/]")
    if not rep.ok:
        ctx.exit(1)


def _means(scores: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in scores.items())


COMMANDS = [envs_command, validate_command]
