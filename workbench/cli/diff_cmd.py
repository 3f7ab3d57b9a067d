"""``workbench diff A B``: two rollouts side by side (the same comparison as the app's diff screen)."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import console, db_option, emit_json, json_option, open_store
from workbench.format import esc


def print_diff(d: Any, show_all: bool = False) -> None:
    """The comparison for a terminal: fields, scores, errors, then the messages in two columns.
    Without colours (a pipe, ``NO_COLOR``) changed words are bracketed ``[-A's-]`` / ``{+B's+}``."""
    from workbench.analysis.diff_render import errors_text, messages_table, values_table

    console.print(f"[bold]A[/] {esc(d.a['id'])}   [bold]B[/] {esc(d.b['id'])}")
    if not d.same_task:
        console.print(f"[yellow]different tasks:[/] A is {esc(d.a.get('env_name'))} task #{esc(d.a.get('task_index'))}, "
                      f"B is {esc(d.b.get('env_name'))} task #{esc(d.b.get('task_index'))}")
    console.print(values_table(d.fields))
    if d.scores:
        console.print()
        console.print(values_table(d.scores, "score"))
    errors = errors_text(d)
    if errors is not None:
        console.print(errors)
    plain = console.no_color or console.color_system is None
    console.print(messages_table(d, full=show_all, plain=plain))
    console.print(f"{d.changed_messages} of {len(d.messages)} messages differ")


@click.command("diff")
@click.argument("rollout_a")
@click.argument("rollout_b")
@click.option("--all", "show_all", is_flag=True, help="Print the messages both rollouts share in full.")
@db_option
@json_option()
@click.pass_context
def diff_command(ctx: click.Context, rollout_a: str, rollout_b: str, show_all: bool, db: str | None,
                 as_json: bool) -> None:
    """Compare two rollouts side by side: messages aligned with the changed words marked, scores per
    function with deltas, status, errors, tokens, timing and cost. An id may be shortened to a unique prefix."""
    from workbench.analysis.diff import load_diff

    with open_store(ctx, db, read_only_ok=True, existing=True) as store:
        d = load_diff(store.conn, rollout_a, rollout_b)
    if as_json:
        emit_json(d.to_json())
    else:
        print_diff(d, show_all)


COMMANDS = [diff_command]
