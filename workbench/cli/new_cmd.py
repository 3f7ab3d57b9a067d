"""``workbench new``: a new environment from a template (single-turn, tools, multi-turn, sandboxed)."""

from __future__ import annotations

import click

from workbench.authoring.templates import TEMPLATES
from workbench.cli.common import console, emit_json, json_option

_HELP = """Create the environment NAME from a template, ready to validate, eval and edit.

By default it goes where `workbench envs` finds user environments, so `workbench eval NAME`
works at once. Nothing existing is overwritten.

\b
Templates:
""" + "\n".join(f"  {t.name:<12} {t.summary}" for t in TEMPLATES.values())


@click.command("new", help=_HELP)
@click.argument("name")
@click.option("-t", "--template", "template", type=click.Choice(list(TEMPLATES)), default="single-turn",
              show_default=True, help="What to start from (the templates are listed above).")
@click.option("--dir", "directory", type=click.Path(), default=None,
              help="Create it in this folder instead of the user environment directory (then use it by path).")
@json_option()
def new_command(name: str, template: str, directory: str | None, as_json: bool) -> None:
    """``workbench new NAME --template T [--dir DIR]`` (the help text is ``_HELP``)."""
    from workbench.authoring.templates import create_env

    path = create_env(name, template, directory)
    ref = str(path) if directory is not None else path.name
    if as_json:
        emit_json({"name": path.name, "template": template, "path": str(path), "env": ref})
        return
    console.print(f"created [bold]{path.name}[/] from the {template} template: {path}", highlight=False)
    console.print(f"  workbench validate {ref}\n  workbench eval {ref} -n 4\n  $EDITOR {path / '__init__.py'}",
                  markup=False, highlight=False)


COMMANDS = [new_command]
