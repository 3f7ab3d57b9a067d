"""``workbench tasks``: tasks made from what Workbench recorded; ``tasks from-traffic`` writes an environment
from a product's gateway traffic (``workbench/gateway/from_traffic.py``)."""

from __future__ import annotations

import click

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import esc


@click.group("tasks")
def tasks_group() -> None:
    """Tasks made from what Workbench recorded: `tasks from-traffic NEW_ENV` from a product's traffic."""


@tasks_group.command("from-traffic")
@click.argument("new_env")
@click.option("--app", default=None, help="Only this app's traffic (default: every app's).")
@click.option("--since", default=None, help="Only traffic from this date on (2026-12-01, 2026-12-01T09:30).")
@click.option("--min-feedback", type=float, default=None,
              help="Only answers whose feedback (their own, else their session's) is at least this.")
@click.option("--held-out", type=float, default=0.2, show_default=True,
              help="The fraction of sessions held out (never a session in both splits).")
@click.option("--judge", default="local", show_default=True,
              help="The registered model that judges replies against the reference answers (local: the embedded one; "
                   "none: no judge, with --rubric).")
@click.option("--rubric", "rubric", default=None, metavar="FILE.py",
              help="A Python file defining `rubric` (a wb.Rubric) whose functions join the judge's; copied into the "
                   "environment.")
@db_option
@json_option()
@click.pass_context
def from_traffic_command(ctx: click.Context, new_env: str, app: str | None, since: str | None,
                         min_feedback: float | None, held_out: float, judge: str, rubric: str | None,
                         db: str | None, as_json: bool) -> None:
    """Write the environment folder NEW_ENV: each task a recorded conversation up to its user turn, the answer
    it got as the reference, near-duplicates removed, split by session, a judge rubric plus any --rubric."""
    from workbench.gateway.from_traffic import check_held_out, check_rubric, from_traffic, parse_since

    check_held_out(held_out)
    checked = check_rubric(rubric, judge)
    parse_since(since)  # bad arguments are refused before the store is opened
    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        result = from_traffic(store.conn, new_env, app=app, since=since, min_feedback=min_feedback,
                              held_out=held_out, judge=judge, rubric=checked)
    if as_json:
        emit_json(result.as_dict())
        return
    console.print(f"wrote {esc(result.path)}: {result.tasks} tasks ({result.train} training, {result.held_out} "
                  f"held out) from {result.sessions} sessions; {result.duplicates} near-duplicates removed")
    console.print(f"next: workbench eval {esc(result.path)} -n 4; workbench train {esc(result.path)} "
                  f"--loop.eval_tasks {result.held_out}", highlight=False)


COMMANDS = [tasks_group]
