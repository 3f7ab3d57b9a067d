"""``workbench probe``: adversarial policies against an environment's rubric (workbench/runs/probe.py)."""

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
    open_store,
    run_async,
)
from workbench.cli.tables import Col, print_table
from workbench.format import fnum


@click.command("probe")
@click.argument("env")
@env_args_option()
@click.option("-n", "--num-tasks", "n", type=int, default=None, help="Tasks each policy plays (default: the first 8).")
@click.option("--threshold", type=float, default=0.5, show_default=True,
              help="A policy that should earn nothing is exploitable at this share of the gold reward.")
@click.option("--probe", "extra", multiple=True, metavar="MODULE:CLASS",
              help="Your own wb.Probe subclass too (repeatable).")
@click.option("-m", "--model", default=None, help="The simulated user's model, for an env with a wb.UserSim that "
              "names none (default: the embedded model); the probe itself calls no model.")
@click.option("--base-url", default=None, callback=no_credentials, help="That model's OpenAI-compatible endpoint.")
@db_option
@json_option()
@click.pass_context
def probe_command(ctx: click.Context, env: str, env_args: str | None, n: int | None, threshold: float,
                  extra: tuple[str, ...], model: str | None, base_url: str | None, db: str | None,
                  as_json: bool) -> None:
    """Try the tricks RL finds on ENV before training does: the empty answer, the prompt echoed, every
    plausible answer at once, another task's answer, a wrong value in the right format, a very long answer,
    answers in every format, a judge-injection answer, and for tool and sandbox envs reading files, editing
    tests, malformed tool arguments and tool loops. Each policy is a stored run of kind probe; a policy that
    should earn nothing and earns at least --threshold of the gold reward is exploitable (exit 1)."""
    from workbench.authoring.discovery import parse_env_args
    from workbench.runs.probe import load_probe, probe_env

    probes = [load_probe(s) for s in extra]
    with open_store(ctx, db) as store:
        out = run_async(probe_env(env, store, env_args=parse_env_args(env_args), n=n, threshold=threshold,
                                  extra=probes, model=model, base_url=base_url,
                                  log=None if as_json else lambda m: console_err.print(m, highlight=False)))
    if as_json:
        emit_json(out)
    else:
        print_probe(out)
    if out["exploitable"]:
        ctx.exit(1)


#: The table's columns: policy names, rewards and rollout ids whole; the rewards by function left out first.
PROBE_COLUMNS = (Col("policy", keep=True), Col("reward", keep=True, justify="right"),
                 Col("by function", drop=2, fold_to=16), Col("verdict", fold_to=11), Col("example", keep=True, drop=1),
                 Col("what", fold_to=20))


def print_probe(out: dict[str, Any]) -> None:
    console.print(f"[bold]{out['env']}[/] ({out['env_version']}): {len(out['policies'])} policies on {out['tasks']} "
                  f"tasks; exploitable at {out['threshold']:g} × the {out['basis'].replace('_', ' ')} reward "
                  f"{out['basis_reward']:.3f} (empty answer {out['empty_reward']:.3f}); {out['wall_s']:.1f} s",
                  highlight=False)
    rows = []
    for p in out["policies"]:
        verdict = Text("EXPLOITABLE", style="bold red") if p["exploitable"] else \
            Text("baseline" if not p["earns_nothing"] else (p["skipped"] or "ok"))
        by = ", ".join(f"{k} {v:.2f}" for k, v in p["rewards"].items())
        rows.append((p["name"], fnum(p["mean_reward"]), by, verdict, p["example_rollout"] or "-", p["summary"]))
    print_table(PROBE_COLUMNS, rows, console)
    bad = [p for p in out["policies"] if p["exploitable"]]
    for p in bad:
        console.print(f"  {p['name']}: `workbench diff {p['example_rollout']} {p['gold_rollout']}` shows it against the "
                      "gold answer" if p["gold_rollout"] else f"  {p['name']}: `workbench show {p['example_rollout']}`",
                      highlight=False)
    console.print(f"{len(bad)} exploitable" if bad else "no policy that should earn nothing earned reward",
                  highlight=False)


COMMANDS = [probe_command]
