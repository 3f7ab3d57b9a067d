"""``workbench rescore``: score the stored rollouts of an environment again with its current rubric."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.browse import kind_option
from workbench.cli.common import (
    console,
    console_err,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    open_store,
    run_async,
)
from workbench.format import fnum

_BAR = 24  # characters of the longest histogram bar


@click.command("rescore")
@click.argument("env")
@click.option("--run", "run_id", default=None, help="Only this run's rollouts (default: every run of ENV).")
@click.option("--limit", type=int, default=None, help="Stop after N rollouts (whole groups).")
@kind_option("Without --run: the runs of these kinds")
@click.option("--apply", "apply", is_flag=True,
              help="Store the new scores as a re-score record beside the originals (which are never changed).")
@env_args_option("JSON keyword arguments for load_environment, for every run (default: each run's own).")
@db_option
@json_option()
@click.pass_context
def rescore_command(ctx: click.Context, env: str, run_id: str | None, limit: int | None, kinds: tuple[str, ...],
                    apply: bool, env_args: str | None, db: str | None, as_json: bool) -> None:
    """Re-score every stored rollout of ENV's own runs (evals, training, imports, optimize, distill; --kind for
    others, such as a probe's) with its rubric as it is now, without calling the model.

    Prints the reward distribution before and after (mean ± standard error, a histogram over the
    same bins), how many rollouts changed and which functions raised. Nothing is written unless
    --apply is given.
    """
    from workbench.analysis.rescore import rescore
    from workbench.authoring.discovery import load_ref, parse_env_args, resolve
    from workbench.usecases.runs import kinds_of

    wanted = kinds_of(kinds)
    override = parse_env_args(env_args) if env_args is not None else None
    ref = resolve(env)
    environment = load_ref(ref, override or {})
    factory = None if override is not None else (lambda args: load_ref(ref, args))
    with open_store(ctx, db) as store:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(TextColumn(f"[bold]re-scoring {environment.name}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console_err, transient=True,
                            disable=not console_err.is_terminal)
        task = progress.add_task("rescore", total=None)
        with progress:
            res = run_async(rescore(store, environment, env_for_args=factory, run_id=run_id, limit=limit,
                                    apply=apply, kinds=wanted, progress=lambda done, total: progress.update(
                                        task, completed=done, total=total)))
    if as_json:
        emit_json({**res.as_dict(), "kinds": list(wanted)})
    else:
        print_result(res, wanted)


def _bar(count: int, peak: int, style: str) -> str:
    width = round(_BAR * count / peak) if peak else 0
    return f"[{style}]{'█' * width}[/]{' ' * (_BAR - width)} {count}"


def _mean(d: Any) -> str:
    if d.mean is None:
        return "-"
    return f"{d.mean:.3f} ± {d.stderr:.3f}" if d.n > 1 else f"{d.mean:.3f}"


def print_result(res: Any, kinds: tuple[str, ...] | None = None) -> None:
    """Before and after side by side, for people (``--json`` is the machine form)."""
    from rich.console import JustifyMethod
    from rich.markup import escape
    from rich.table import Table

    scope = f"run {res.run_id}" if res.run_id else f"{len(res.runs)} run{'s' * (len(res.runs) != 1)}" + \
        (f" of kind {', '.join(kinds)}" if kinds else "")
    console.print(f"[bold]{escape(res.env)}[/] (version {res.env_version}): {res.rescored:,} of {res.considered:,} stored "
                  f"rollouts re-scored from their messages ({scope}, {res.wall_s:.2f} s)")
    if res.rescored:
        t = Table(box=None, show_edge=False, pad_edge=False)
        t.add_column("")
        t.add_column("before", justify="right")
        t.add_column("after", justify="right")
        t.add_row("mean ± stderr", _mean(res.before), _mean(res.after))
        t.add_row("std", fnum(res.before.std), fnum(res.after.std))
        t.add_row("min … max", f"{fnum(res.before.min)} … {fnum(res.before.max)}",
                  f"{fnum(res.after.min)} … {fnum(res.after.max)}")
        console.print(t)
        console.print()
        h = res.histogram
        hist = Table(box=None, show_edge=False, pad_edge=False, title="weighted reward, same bins",
                     title_justify="left")
        hist.add_column("bin")
        hist.add_column("before")
        hist.add_column("after")
        for label, b, a in zip(h.labels(), h.before, h.after, strict=True):
            hist.add_row(label, _bar(b, h.peak, "cyan"), _bar(a, h.peak, "magenta"))
        console.print(hist)
        console.print(f"changed: [bold]{res.changed:,}[/] of {res.rescored:,} rollouts; "
                      f"{res.failed:,} with a scoring error")
        console.print()
        ft = Table(box=None, show_edge=False, pad_edge=False)
        columns: tuple[tuple[str, JustifyMethod], ...] = (("function", "left"), ("kind", "left"), ("before", "right"),
                                                          ("after", "right"), ("changed", "right"), ("errors", "right"))
        for col, just in columns:
            ft.add_column(col, justify=just)
        for f in res.functions:
            ft.add_row(escape(f.name), f.kind, fnum(f.before.mean), fnum(f.after.mean), f"{f.changed:,}",
                       f"[red]{f.errors:,}[/]" if f.errors else "0")
        console.print(ft)
    for name, n in res.errors.items():
        console.print(f"[red]error[/] in {escape(name)} on {n:,} rollout{'s' * (n != 1)}: "
                      f"{escape(res.error_examples.get(name, ''))}")
    for reason, n in res.skipped.items():
        console.print(f"[yellow]skipped[/] {n:,} rollout{'s' * (n != 1)}: {escape(reason)}")
    if res.kept:
        console.print(f"kept as stored (not rubric functions the messages can recompute): {', '.join(res.kept)}")
    if res.record_id is not None:
        console.print(f"applied: re-score record {res.record_id} (env version {res.env_version}); "
                      "the original scores are unchanged")
    else:
        console.print("[dim]not applied: nothing was written (--apply keeps these scores beside the originals)[/]")


COMMANDS = [rescore_command]
