"""``workbench compare``: runs side by side and against a baseline (workbench/analysis/compare.py)."""

from __future__ import annotations

from typing import Any

import click
from rich.text import Text

from workbench.cli.common import (
    console,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    open_store,
    run_async,
)
from workbench.cli.tables import Col, print_table
from workbench.format import clip, fcost, fnum, visible

_SHOWN = 10

#: The leaderboard's columns; ids, numbers, intervals and costs are kept whole, the least needed left out first.
BOARD = (Col("model", fold_to=10), Col("run", keep=True), Col("reward", keep=True, justify="right"),
         Col("95% CI", keep=True), Col("pass@1", keep=True, justify="right"),
         Col("$/solved", keep=True, justify="right"), Col("cost", keep=True, justify="right", drop=2),
         Col("errors", keep=True, justify="right", drop=3), Col("p50 s", keep=True, justify="right", drop=4),
         Col("p95 s", keep=True, justify="right", drop=5))


@click.command("compare")
@click.argument("runs", nargs=-1)
@click.option("--traffic", "traffic", default=None, metavar="ROUTE",
              help="Compare a gateway route's arms on the product's feedback instead of runs.")
@click.option("--app", default=None, help="With --traffic: only this app's traffic.")
@click.option("--since", default=None, help="With --traffic: only traffic from this date on.")
@click.option("--env", "env", default=None, metavar="ENV",
              help="With --traffic: also score each arm's recorded answers with ENV's rubric (shadows paired).")
@env_args_option("With --env: JSON keyword arguments for ENV's load_environment.")
@click.option("--baseline", default=None, metavar="RUN", help="The run the others are compared with (default: "
              "the first).")
@click.option("--pass-threshold", type=float, default=1.0, show_default=True,
              help="A rollout passes (pass@k, solved tasks) when its total reward reaches this.")
@click.option("--allow-mismatch", is_flag=True, help="Compare the tasks the runs share, across env versions too.")
@db_option
@json_option()
@click.pass_context
def compare_command(ctx: click.Context, runs: tuple[str, ...], traffic: str | None, app: str | None,
                    since: str | None, env: str | None, env_args: str | None, baseline: str | None,
                    pass_threshold: float, allow_mismatch: bool, db: str | None, as_json: bool) -> None:
    """Compare RUNS (run ids, or a comparison id from `eval -m A -m B`): per model the mean reward with a 95%
    CI, pass@k, errors, tokens, cost (total, per rollout, per solved task) and latency; against the baseline
    the paired per-task difference with a bootstrap 95% CI, and the tasks that regressed, worst first, each
    named by its index and the start of its prompt. With --traffic ROUTE: a gateway route's arms on the
    product's feedback, each against the baseline arm with an unpaired bootstrap 95% CI; with --env ENV also on
    ENV's rubric re-scored over the recorded answers (a shadow against the answers it shadowed, paired)."""
    from workbench.errors import ConfigError
    from workbench.usecases.comparison import compare

    if traffic is not None:
        if runs:
            raise ConfigError("compare takes RUNS or --traffic ROUTE, not both")
        _compare_traffic(ctx, traffic, app, since, baseline, env, env_args, db, as_json)
        return
    if env is not None or env_args is not None:
        raise ConfigError("--env and --env-args go with --traffic ROUTE (runs are compared on their own rewards)")
    if not runs:
        raise ConfigError("name the RUNS to compare (`workbench runs` lists them), or --traffic ROUTE")
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        result = compare(store.conn, list(runs), baseline, pass_threshold, allow_mismatch)
    if as_json:
        emit_json(result)
        return
    print_comparison(result)


def _compare_traffic(ctx: click.Context, route: str, app: str | None, since: str | None, baseline: str | None,
                     env: str | None, env_args: str | None, db: str | None, as_json: bool) -> None:
    from workbench.errors import ConfigError
    from workbench.gateway.from_traffic import parse_since
    from workbench.gateway.traffic_compare import compare_traffic, compare_traffic_on_env

    parse_since(since)
    if env_args is not None and env is None:
        raise ConfigError("--env-args goes with --env ENV")
    environment = None
    if env is not None:
        from workbench.authoring.discovery import load_ref, parse_env_args, resolve

        environment = load_ref(resolve(env), parse_env_args(env_args) if env_args is not None else {})
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        if environment is None:
            result = compare_traffic(store.conn, route, app=app, since=since, baseline=baseline)
        else:
            result = run_async(compare_traffic_on_env(store.conn, route, environment, app=app, since=since,
                                                      baseline=baseline))
    if as_json:
        emit_json(result)
        return
    print_traffic(result)


def _versus(entry: dict[str, Any]) -> str:
    if entry.get("delta") is None:
        return "-"
    return f"{entry['delta']:+.3f}" + (" *" if entry["significant"] else "")


def print_traffic(result: dict[str, Any]) -> None:
    """A route's arms for people: feedback, and the rubric's scores when an environment re-scored them."""
    console.print(Text.assemble(("route ", "bold"), (visible(result["route"]), "bold"),
                                f"; baseline arm {visible(result['baseline'])}"))
    rubric = result.get("rubric")
    cols = [Col("arm", keep=True), Col("exchanges", keep=True, justify="right"),
            Col("rated", keep=True, justify="right"), Col("feedback", keep=True, justify="right"),
            Col("95% CI", keep=True, drop=3), Col("vs baseline", keep=True, justify="right"),
            Col("95% CI of the difference", keep=True, drop=2)]
    if rubric:
        cols += [Col("rubric", keep=True, justify="right"), Col("rubric vs baseline", keep=True, justify="right"),
                 Col("its 95% CI", keep=True, drop=1)]
    rows = []
    for a in result["arms"]:
        row = [a["arm"], str(a["exchanges"]), str(a["rated"]), fnum(a["mean_feedback"]), interval(a["mean_ci95"]),
               "-" if a["baseline"] else _versus(a), "-" if a["baseline"] else interval(a.get("ci95"))]
        if rubric:
            r = a["rubric"]
            row += [fnum(r["mean"]), "-" if a["baseline"] else _versus(r), "-" if a["baseline"] else interval(r.get("ci95"))]
        rows.append(tuple(row))
    print_table(tuple(cols), rows, console)
    for s in result["shadows"]:
        line = f"  shadow {visible(s['arm'])}: {s['exchanges']} answers recorded (never shown, so never rated)"
        if rubric:
            r = s["rubric"]
            line += (f"; rubric {fnum(r['mean'])}, vs the answers it shadowed {_versus(r)} over {r['pairs']} pairs, "
                     f"95% CI {interval(r['ci95'])} ({r['ci_method']})")
        console.print(line, highlight=False, markup=False)
    if rubric:
        console.print(f"rubric of {visible(rubric['env'])} ({visible(rubric['env_version'])}): {rubric['scored']} "
                      f"answers scored, {rubric['matched']} against a task of it", highlight=False, markup=False)
        for reason, n in rubric["skipped"].items():
            console.print(f"  skipped {n}: {visible(reason)}", highlight=False, markup=False, style="dim")
        for fn, n in rubric["errors"].items():
            console.print(f"  {visible(fn)} raised on {n}: {visible(rubric['error_examples'].get(fn, ''))}",
                          highlight=False, markup=False, style="yellow")


def interval(ci: list[float] | None) -> str:
    """A 95% CI as ``low–high``."""
    return f"{ci[0]:.3f}–{ci[1]:.3f}" if ci else "-"


def task_line(r: Any, task_id: str, delta: float, width: int) -> Text:
    """One regressed or improved task on one line: ``#index``, the difference, and as much of the start of
    its prompt as ``width`` leaves (the index and the difference are never cut)."""
    label = r.get("task_labels", {}).get(task_id)
    name = f"#{label['task_index']}" if label else visible(task_id)
    head = f"    {name:>5}  {delta:+.2f}  "
    prompt = visible(label["prompt"]) if label else ""
    return Text(head + clip(prompt, max(0, width - len(head))))


def print_tasks(r: Any, title: str, order: str, tasks: list[str], deltas: dict[str, float]) -> None:
    """The first :data:`_SHOWN` of ``tasks`` (in ``order``), each on its own line."""
    console.print(f"  {title} ({len(tasks)}), {order}:", highlight=False, markup=False)
    for t in tasks[:_SHOWN]:
        console.print(task_line(r, t, deltas.get(t, 0.0), console.width), soft_wrap=False, no_wrap=True,
                      overflow="ellipsis")
    if len(tasks) > _SHOWN:
        console.print(f"    and {len(tasks) - _SHOWN} more (--json lists every task)", highlight=False,
                      markup=False, style="dim")


def print_comparison(r: Any) -> None:
    """A :class:`~workbench.usecases.comparison.Comparison` for people."""
    console.print(Text.assemble((visible(r["env"]), "bold"), f" ({visible(r['env_version'])}), {r['tasks']} "
                                f"tasks; baseline {visible(r['baseline'])}"))
    for note in r["notes"]:
        console.print(Text.assemble(("note: ", "yellow"), visible(note)))
    rows = []
    for m in sorted(r["models"], key=lambda m: -(m["mean_reward"] or 0)):
        rows.append((m["label"], m["run_id"], fnum(m["mean_reward"]), interval(m["mean_ci95"]),
                     fnum(m["pass_at_k"].get("pass@1")), fcost(m["cost_per_solved_task"]), fcost(m["cost_usd"]),
                     str(m["errors"]), fnum(m["latency_p50_s"]), fnum(m["latency_p95_s"])))
    print_table(BOARD, rows, console)
    for p in (m for m in r["models"] if not m["baseline"]):
        ci = p["ci95"]
        verdict = Text("better", style="green") if p["significant"] and p["delta"] > 0 else \
            Text("worse", style="red") if p["significant"] else Text("no significant difference")
        ci_text = f"95% CI {ci[0]:+.3f} to {ci[1]:+.3f} ({p['ci_method']})" if ci else "no CI (one task)"
        console.print(Text.assemble(f"{visible(p['label'])} ({visible(p['run_id'])}) vs baseline: "
                                    f"Δ {p['delta']:+.3f}, {ci_text}: ", verdict))
        if p["regressions"]:
            print_tasks(r, "regressed", "worst first", p["regressions"], p["regression_deltas"])
        if p["improvements"]:
            print_tasks(r, "improved", "best first", p["improvements"], p.get("improvement_deltas", {}))


COMMANDS = [compare_command]
