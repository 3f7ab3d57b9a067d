"""The command line's names for the fields a domain error names (:class:`workbench.errors.FieldError`): each
field is said as the flag that sets it, read from the command's own click parameters, so a flag is declared
once. A parameter sets a field when it is named as the field (``click.option("-r", "--rollouts",
"rollouts_per_task")``) or its long flag is the field's name (``--max-tokens`` for ``max_tokens``)."""

from __future__ import annotations

from collections.abc import Sequence

import click

from workbench.errors import FieldError, field_name


def flag_of(command: click.Command, field: str, *, within: Sequence[click.Command] = (), typed: bool = False) -> str:
    """How ``command`` spells ``field``: its flags (``-t/--temperature``; ``typed``: the first, as it is typed
    before a value, ``-t``), an argument's metavar (``ENV``); else the flag of a group ``within`` which it
    runs (``workbench --db``); else the field's own name."""
    attr = field_name(field)
    long = "--" + attr.replace("_", "-")
    for each in (command, *reversed(within)):
        for param in each.params:
            if param.name == attr or long in param.opts:
                if not isinstance(param, click.Option):
                    return param.human_readable_name
                return param.opts[0] if typed else "/".join(param.opts)
    return attr


def commands_of(group: click.Group, args: list[str]) -> list[click.Command]:
    """The commands ``args`` run, from ``group`` down through subgroups to the command itself, found by
    parsing them again without running anything (no callback, no prompt)."""
    chain: list[click.Command] = [group]
    ctx: click.Context | None = None
    try:
        while isinstance(chain[-1], click.Group):
            command = chain[-1]
            ctx = command.make_context(command.name, list(args), parent=ctx, resilient_parsing=True)
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
            if not rest:
                break
            _, sub, args = command.resolve_command(ctx, rest)
            if sub is None:
                break
            chain.append(sub)
    except click.ClickException:
        pass
    return chain


def cli_message(error: BaseException, group: click.Group, args: list[str]) -> str:
    """``error``'s line as the command line says it: the fields it names as the flags of the command run."""
    if not isinstance(error, FieldError):
        return str(error)
    *groups, command = commands_of(group, args)
    return error.render(lambda field: flag_of(command, field, within=groups),
                        lambda field: flag_of(command, field, within=groups, typed=True))
