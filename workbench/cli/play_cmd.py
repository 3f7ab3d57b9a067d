"""``workbench play``: you are the policy. One rollout of an environment in which you write each
assistant turn in the terminal; its tools, sandbox and rubric run as they do for a model."""

from __future__ import annotations

import sys
from typing import Any

import click

from workbench.cli.common import (
    console,
    db_option,
    emit_json,
    env_args_option,
    json_option,
    no_credentials,
    open_store,
    run_async,
)
from workbench.format import fnum

HELP_LINE = "Write the assistant's reply; a tool call is /call NAME {json arguments} (one per line)."


def _is_utf8(text: str) -> bool:
    """Whether a line read from the terminal or a pipe was UTF-8 (stdin hands undecodable bytes on as
    surrogates, which no message, store or model can take)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class TerminalPolicy:
    """Replies from the terminal: at a terminal, the conversation so far and a prompt (a bad reply is said
    and asked again); from a pipe or file, one reply per line (a bad reply ends the session)."""

    def __init__(self, name: str, stream: Any = None, interactive: bool | None = None, quiet: bool = False) -> None:
        self.name = name
        self.stream = stream or sys.stdin
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.quiet = quiet
        self.shown = 0
        self.line_no = 0

    def _show(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> None:
        from workbench.cli.debug_cmd import print_messages

        if self.quiet:
            return
        print_messages(messages[self.shown:])
        self.shown = len(messages)
        if tools and self.interactive:
            from workbench.rollouts.human import tool_schemas

            listed = ", ".join(f"{n}({', '.join(s.get('properties') or {})})" for n, s in tool_schemas(tools).items())
            console.print(f"[dim]tools: {listed}[/]", highlight=False)

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
        import asyncio

        from workbench.rollouts.human import PlayStopped, ReplyError, parse_reply

        self._show(messages, tools)
        while True:
            if self.interactive and not self.quiet:
                console.print("[bold green]assistant>[/] ", end="")
            line: str | None
            try:
                line = await asyncio.to_thread(self.stream.readline)
            except UnicodeDecodeError:  # a stream that decodes strictly
                line = None
            if line == "":
                raise PlayStopped(f"the input ended after {self.line_no} replies, before the rollout did: "
                                  "nothing was stored")
            self.line_no += 1
            try:
                if line is None or not _is_utf8(line):
                    raise ReplyError("the reply is not UTF-8 text")
                msg = parse_reply(line.rstrip("\n"), tools)
            except ReplyError as e:
                if not self.interactive:
                    raise PlayStopped(f"line {self.line_no}: {e.message}; nothing was stored") from None
                console.print(e.message, style="red", highlight=False, markup=False)
                continue
            self.shown = len(messages) + 1
            return msg


@click.command("play")
@click.argument("env")
@click.option("--task", "task", type=int, default=0, show_default=True, help="Index of the task to play.")
@env_args_option()
@click.option("--base-url", default=None, callback=no_credentials, help="Where a simulated user's model is served (default: the embedded model).")
@click.option("-m", "--model", default=None, help="The simulated user's model (with --base-url).")
@db_option
@json_option()
@click.pass_context
def play_command(ctx: click.Context, env: str, task: int, env_args: str | None, base_url: str | None,
                 model: str | None, db: str | None, as_json: bool) -> None:
    """Play task N of ENV yourself: you write each assistant turn (a tool call as `/call NAME {json}`), the
    environment's tools, sandbox and rubric run as they do for a model, and the rollout is stored with
    source `human` and your name (the `user_name` setting, else your login). From a pipe, one reply per line.
    A simulated user (wb.UserSim) answers you with --base-url/-m, else the embedded model."""
    from workbench.authoring.discovery import parse_env_args
    from workbench.errors import ConfigError
    from workbench.rollouts.human import PlayStopped
    from workbench.runs.play_session import person_name, play

    policy = TerminalPolicy(person_name(), quiet=as_json)
    if policy.interactive and not as_json:
        console.print(f"[dim]{HELP_LINE} Ctrl-D stops without storing.[/]")
    store = open_store(ctx, db)
    try:
        result = run_async(play(env, task, store, policy, parse_env_args(env_args), base_url=base_url, model=model))
    except PlayStopped as e:
        raise ConfigError(str(e)) from None
    finally:
        store.close()
    if as_json:
        emit_json({"rollout_id": result.rollout_id, "run_id": result.run_id, "status": result.status,
                   "reward": result.reward, "rewards": result.rewards, "metrics": result.metrics,
                   "errors": result.errors, "source": "human", "human": policy.name})
        return
    status = "[green]ok[/]" if result.status == "ok" else "[red]error[/]"
    console.print(f"[bold]rollout {result.rollout_id}[/]  {status}  reward {fnum(result.reward)}  "
                  f"(played by {policy.name})")
    for name, v in {**result.rewards, **result.metrics}.items():
        console.print(f"  {name}  {fnum(v)}", highlight=False)
    for err in result.errors:
        console.print(f"[red]{err['kind']}[/] in {err['source']}: {err['message']}", highlight=False)
    console.print(f"stored in run {result.run_id}: `workbench show {result.rollout_id}`")


COMMANDS = [play_command]
