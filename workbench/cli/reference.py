"""The CLI reference, docs/cli_reference.md, generated from the click commands themselves.

``python -m workbench.cli.reference`` writes it; ``--check`` exits 1 when the file differs from what the
commands say now (``tests/test_cli_reference.py`` runs the same comparison). The page is a pure function of
the command tree: commands and options in a fixed order, no terminal width, no machine's paths.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import click

PAGE = Path("docs") / "cli_reference.md"
REGENERATE = "python -m workbench.cli.reference"

HEADER = f"""# CLI reference

Every `workbench` command and subcommand with its usage, help and options, generated from the click
commands by `{REGENERATE}` (a test fails when this page is out of date). Every command also takes
`-h`/`--help`. The guide to the commands, with examples, is [cli.md](cli.md).
"""


def walk(command: click.Command, path: tuple[str, ...],
         parent: click.Context | None = None) -> Iterator[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Each visible command under ``command`` (itself first), subcommands in alphabetical order."""
    ctx = click.Context(command, info_name=path[-1], parent=parent)
    yield path, command, ctx
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            sub = command.commands[name]
            if not sub.hidden:
                yield from walk(sub, (*path, name), ctx)


def _help_text(command: click.Command) -> str:
    text = inspect.cleandoc((command.help or command.short_help or "").split("\f")[0])
    lines = [line for line in text.splitlines() if line.strip() != "\b"]
    return "\n".join(line.rstrip() for line in lines).strip()


def _default(param: click.Parameter, ctx: click.Context) -> str | None:
    if isinstance(param, click.Option) and param.is_flag and not param.secondary_opts and param.count is False:
        return None  # a plain flag: off unless given
    if param.required:
        return None
    default = param.get_default(ctx, call=False)
    if default is getattr(click.core, "UNSET", None):
        return None
    if callable(default):
        return "computed when the command runs"
    if default is None or default == () or default == []:
        return None
    if isinstance(param, click.Option) and param.is_flag and param.secondary_opts:
        return param.opts[0] if default else param.secondary_opts[0]
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{item}`" for item in default)
    return f"`{default}`"


def _cell(notes: list[str]) -> str:
    """The notes of one option as sentences in one table cell."""
    sentences = [n.strip() if n.strip().endswith((".", "!", "?")) else n.strip() + "." for n in notes
                 if n.strip()]
    return _escape(" ".join(sentences))


def _escape(text: str) -> str:
    """Markdown-safe table cell text: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    rows = []
    help_option = command.get_help_option(ctx)
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or param.hidden or param is help_option:
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names = record[0]
        notes = [param.help or ""]
        default = _default(param, ctx)
        if default is not None:
            notes.append(f"Default: {default}.")
        if param.envvar:
            envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            notes.append("Environment: " + ", ".join(f"`{v}`" for v in envvars) + ".")
        if param.required:
            notes.append("Required.")
        if param.multiple:
            notes.append("May be repeated.")
        rows.append(f"| `{_escape(names)}` | {_cell(notes)} |")
    return rows


#: Options of the embedded server whose default is worked out from the machine it runs on.
MACHINE_DEFAULTS = {"threads"}


def _serve_options() -> list[str]:
    """``workbench serve`` hands its arguments to the embedded server's own parser: its options, as rows."""
    try:
        from workbench_local.server.serve import build_parser
    except ImportError:
        return ["| (the local extra is not installed: `pip install 'rl-workbench[local]'`) | |"]
    rows = []
    for action in build_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        names = ", ".join(action.option_strings)
        if action.nargs != 0:
            metavar = action.metavar or ("[" + "|".join(map(str, action.choices)) + "]" if action.choices
                                         else action.dest.upper())
            names += f" {metavar}"
        notes = [action.help or ""]
        if action.dest in MACHINE_DEFAULTS:
            notes.append("Default: worked out from this machine.")
        elif action.default not in (None, False, [], ()):
            notes.append(f"Default: `{action.default}`.")
        if action.required:
            notes.append("Required.")
        if isinstance(action, argparse._AppendAction):
            notes.append("May be repeated.")
        rows.append(f"| `{_escape(names)}` | {_cell(notes)} |")
    return rows


def render(root: click.Command, prog: str = "workbench") -> str:
    """The whole reference page for ``root`` and everything under it."""
    parts = [HEADER]
    for path, command, ctx in walk(root, (prog,)):
        name = " ".join(path)
        parts.append(f"## `{name}`\n")
        pieces = " ".join(command.collect_usage_pieces(ctx))
        parts.append(f"```text\n{name} {pieces}\n```\n")
        help_text = _help_text(command)
        if help_text:
            parts.append(help_text + "\n")
        rows = _serve_options() if path == (prog, "serve") else _options(command, ctx)
        if rows:
            parts.append("| option | what it does |\n|---|---|\n" + "\n".join(rows) + "\n")
        if isinstance(command, click.Group):
            subs = [f"[`{name} {sub}`](#{_anchor(f'{name} {sub}')})" for sub in sorted(command.commands)
                    if not command.commands[sub].hidden]
            parts.append("Commands: " + ", ".join(subs) + ".\n")
    return "\n".join(parts)


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading ``## `title` ``: lower case, spaces to dashes, punctuation dropped."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c in "-_")


def current() -> str:
    from workbench.cli import cli

    return render(cli)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    page = Path(args[args.index("--output") + 1]) if "--output" in args else PAGE
    text = current()
    if "--check" in args:
        if not page.exists() or page.read_text() != text:
            print(f"{page} is out of date; run `{REGENERATE}`", file=sys.stderr)
            return 1
        return 0
    from workbench.fsutil import atomic_write

    atomic_write(page, text)
    print(f"wrote {page} ({len(text):,} characters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
