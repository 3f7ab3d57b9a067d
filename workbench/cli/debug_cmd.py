"""``workbench debug``: one rollout, turn by turn, with timing, cost and the final scores."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import (
    console,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    model_options,
    open_store,
    run_async,
)
from workbench.format import fnum


def print_turn(turn: Any, cost_known: bool) -> None:


    c = turn.call
    tokens = f"{c.prompt_tokens}→{c.completion_tokens} tokens" if c else "no reply"
    cost = f"${turn.cost_usd:.6f}" if turn.cost_usd is not None else ("-" if cost_known else "unpriced")
    finish = f"  finish {c.finish_reason}" if c and c.finish_reason else ""
    console.print(f"[bold]turn {turn.index + 1}[/]  model {turn.model_s:.3f}s  tools/env {turn.env_s:.3f}s  "
                  f"{tokens}  {cost}{finish}")
    print_messages(turn.messages)


def print_messages(messages: list[dict[str, Any]]) -> None:
    from rich.panel import Panel

    from workbench.records.rollout import content_text

    colors = {"system": "magenta", "user": "blue", "assistant": "green", "tool": "yellow"}
    for m in messages:
        role = str(m.get("role", "?"))
        body = content_text(m.get("content"))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            body += f"\n→ {fn.get('name')}({fn.get('arguments')})"
        title = role + (f" ({m.get('name')})" if m.get("name") else "")
        console.print(Panel(body or "(empty)", title=title, title_align="left", border_style=colors.get(role, "white"),
                            expand=True), markup=False, soft_wrap=False)


def print_result(session: Any) -> None:
    from rich.table import Table

    res = session.result
    if res is None:
        console.print(f"stopped after {len(session.turns)} turns: the rollout is not finished, so it was not scored "
                      "or stored (run without --turns to finish it)")
        return
    status = "[green]ok[/]" if res.status == "ok" else "[red]error[/]"
    console.print(f"[bold]rollout {res.rollout_id}[/]  {status}  reward {fnum(res.reward)}  "
                  f"{res.duration_s:.2f}s (+{res.scoring_s:.2f}s scoring)  cost ${res.cost_usd:.6f}")
    if res.scores:
        t = Table(show_edge=False, box=None, pad_edge=False)
        for col in ("function", "kind", "weight", "value"):
            t.add_column(col, justify="right" if col in ("weight", "value") else "left")
        for s in res.scores:
            t.add_row(s.name, s.kind, "-" if s.weight is None else f"{s.weight:g}", fnum(s.value))
        console.print(t)
    for e in res.errors:
        console.print(f"[red]{e['kind']}[/] in {e['source']}: {e['message']}", highlight=False)
    console.print(f"stored in run {session.run_id}: `workbench show {res.rollout_id}` (--tokens for its token trace)")


@click.command("debug")
@click.argument("env")
@click.option("--task", "task", type=int, default=0, show_default=True, help="Index of the task to run.")
@click.option("--turns", type=int, default=None, help="Stop after this many model turns (not scored or stored).")
@env_args_option()
@model_options
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Per-request timeout in seconds.")
@click.option("--max-retries", type=int, default=4, show_default=True, help="Retries on 429/5xx/connection errors.")
@click.option("-t", "--temperature", type=float, default=None, help="Override the environment's temperature.")
@click.option("--max-tokens", type=int, default=None, help="Override the environment's max_tokens.")
@click.option("--render-prompts", is_flag=True,
              help="Let the server re-render each follow-up prompt instead of continuing the sampled tokens.")
@db_option
@json_option()
@click.pass_context
def debug_command(ctx: click.Context, env: str, task: int, turns: int | None, env_args: str | None,
                  model: str | None, base_url: str | None, api_key: str | None, harness: str | None,
                  runtime: str | None, timeout: float, max_retries: int, temperature: float | None,
                  max_tokens: int | None, render_prompts: bool, db: str | None, as_json: bool) -> None:
    """Run one rollout of ENV turn by turn: each turn's messages, tool results, timing and cost, then
    each reward and metric by function. The finished rollout is stored as a `debug` run."""
    from workbench.authoring.discovery import parse_env_args
    from workbench.errors import ConfigError
    from workbench.runs.debug_session import debug_rollout
    from workbench.runs.evaluate import EvalOptions

    if turns is not None and turns < 1:
        raise ConfigError("--turns must be at least 1")
    opts = EvalOptions(env=env, env_args=parse_env_args(env_args), model=model, base_url=base_url, api_key=api_key,
                       timeout_s=timeout, max_retries=max_retries, harness=harness, runtime=runtime,
                       temperature=temperature, max_tokens=max_tokens, render_prompts=render_prompts)

    def on_turn(session: Any, turn: Any) -> None:
        if not as_json:
            if turn.index == 0:
                console.print(f"[bold]{session.env.name}[/] ({session.env.version}) task {task} on "
                              f"[bold]{session.model}[/] — debug run [cyan]{session.run_id}[/]")
                print_turn_prompt(session)
            print_turn(turn, session.price is not None)

    store = open_store(ctx, db)
    try:
        session = run_async(debug_rollout(opts, task, store, max_turns=turns, on_turn=on_turn))
    finally:
        store.close()
    if as_json:
        res = session.result
        emit_json({"run_id": session.run_id, "env": session.env.name, "env_version": session.env.version,
                   "model": session.model, "task": task, "done": res is not None,
                   "turns": [t.as_dict() for t in session.turns], "prompt": _prompt(session),
                   **(res.as_dict() if res is not None else {"rollout_id": None})})
    else:
        print_result(session)


def _prompt(session: Any) -> list[dict[str, Any]]:
    """The messages the first model call was sent (system prompt and task)."""
    r = session.rollout
    return list(r.messages[: r.calls[0].n_messages]) if r is not None and r.calls else []


def print_turn_prompt(session: Any) -> None:
    from rich.panel import Panel

    from workbench.records.rollout import content_text

    for m in _prompt(session):
        role = str(m.get("role", "?"))
        console.print(Panel(content_text(m.get("content")) or "(empty)", title=role, title_align="left",
                            border_style="magenta" if role == "system" else "blue", expand=True), markup=False,
                      soft_wrap=False)


COMMANDS = [debug_command]
