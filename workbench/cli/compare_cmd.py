"""``workbench compare``: runs side by side and against a baseline (workbench/analysis/compare.py)."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import esc, fnum, safe_text

_SHOWN = 10


@click.command("compare")
@click.argument("runs", nargs=-1, required=True)
@click.option("--baseline", default=None, metavar="RUN", help="The run the others are compared with (default: "
              "the first).")
@click.option("--pass-threshold", type=float, default=1.0, show_default=True,
              help="A rollout passes (pass@k, solved tasks) when its total reward reaches this.")
@click.option("--allow-mismatch", is_flag=True, help="Compare the tasks the runs share, across env versions too.")
@db_option
@json_option()
@click.pass_context
def compare_command(ctx: click.Context, runs: tuple[str, ...], baseline: str | None, pass_threshold: float,
                    allow_mismatch: bool, db: str | None, as_json: bool) -> None:
    """Compare RUNS (run ids, or a comparison id from `eval -m A -m B`): per model the mean reward with a 95%
    CI, pass@k, errors, tokens, cost (total, per rollout, per solved task) and latency; against the baseline
    the paired per-task difference with a bootstrap 95% CI, and the tasks that regressed, worst first."""
    from workbench.usecases.comparison import compare

    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        result = compare(store.conn, list(runs), baseline, pass_threshold, allow_mismatch)
    if as_json:
        emit_json(result)
        return
    print_comparison(result)


def _money(v: Any) -> str:
    return "-" if v is None else f"${v:.4f}"


def print_comparison(r: Any) -> None:
    """A :class:`~workbench.usecases.comparison.Comparison` for people."""
    from rich.table import Table

    console.print(f"[bold]{esc(r['env'])}[/] ({esc(r['env_version'])}), {r['tasks']} tasks; baseline "
                  f"{esc(r['baseline'])}", highlight=False)
    for note in r["notes"]:
        console.print(f"[yellow]note:[/] {esc(note)}", highlight=False)
    t = Table(box=None, show_edge=False, header_style="bold")
    for col in ("model", "run", "reward", "95% CI", "pass@1", "errors", "cost", "$/solved", "p50 s", "p95 s"):
        t.add_column(col, justify="left" if col in ("model", "run", "95% CI") else "right")
    for m in sorted(r["models"], key=lambda m: -(m["mean_reward"] or 0)):
        ci = m["mean_ci95"]
        t.add_row(safe_text(m["label"]), safe_text(m["run_id"]), fnum(m["mean_reward"]),
                  f"{ci[0]:.3f}–{ci[1]:.3f}" if ci else "-", fnum(m["pass_at_k"].get("pass@1")), str(m["errors"]),
                  _money(m["cost_usd"]), _money(m["cost_per_solved_task"]), fnum(m["latency_p50_s"]),
                  fnum(m["latency_p95_s"]))
    console.print(t)
    for p in (m for m in r["models"] if not m["baseline"]):
        ci = p["ci95"]
        verdict = "[green]better[/]" if p["significant"] and p["delta"] > 0 else \
            "[red]worse[/]" if p["significant"] else "no significant difference"
        ci_text = f"95% CI {ci[0]:+.3f} to {ci[1]:+.3f} ({p['ci_method']})" if ci else "no CI (one task)"
        console.print(f"{esc(p['label'])} ({esc(p['run_id'])}) vs baseline: Δ {p['delta']:+.3f}, {ci_text}: {verdict}",
                      highlight=False)
        if p["regressions"]:
            worst = esc(", ".join(f"{t} ({p['regression_deltas'][t]:+.2f})" for t in p["regressions"][:_SHOWN]))
            more = f" and {len(p['regressions']) - _SHOWN} more" if len(p["regressions"]) > _SHOWN else ""
            console.print(f"  regressed ({len(p['regressions'])}): {worst}{more}", highlight=False)
        if p["improvements"]:
            best = esc(", ".join(str(t) for t in p["improvements"][:_SHOWN]))
            more = f" and {len(p['improvements']) - _SHOWN} more" if len(p["improvements"]) > _SHOWN else ""
            console.print(f"  improved ({len(p['improvements'])}): {best}{more}", highlight=False)


COMMANDS = [compare_command]
