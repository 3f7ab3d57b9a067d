"""``workbench export-env``: an environment as another framework's package (verifiers 0.4)."""

from __future__ import annotations

import click

from workbench.cli.common import console, emit_json, env_args_option, json_option


@click.command("export-env")
@click.argument("env")
@click.option("--format", "fmt", required=True, type=click.Choice(["verifiers"]),
              help="The package format: verifiers (a verifiers 0.4 environment package).")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="New or empty folder the package is written to.")
@click.option("--name", default=None, help="The package's name (default: the environment's name, with dashes).")
@env_args_option()
@json_option()
def export_env_command(env: str, fmt: str, out_dir: str, name: str | None, env_args: str | None,
                       as_json: bool) -> None:
    """Write ENV as a pip-installable verifiers 0.4 environment package that `vf-eval` scores as
    `workbench eval` does.

    The package carries the environment's own files, the tasks it lists (with -a's arguments), its
    harness (single turn, tool loop or multi-turn game, played in-process) and its rubric;
    --env.group-size N in verifiers plays N attempts per task together, the group its group rewards see.
    What verifiers cannot carry (a sandbox, MCP toolsets, a simulated user, an agent program) is
    refused in one line, and nothing is written.
    """
    from workbench.authoring.discovery import parse_env_args
    from workbench.usecases.formats import export_env_package, export_lines

    done = export_env_package(env, out_dir, parse_env_args(env_args), name)
    if as_json:
        emit_json(done.as_dict())
        return
    from rich.text import Text

    for line in export_lines(done):
        console.print(Text(line))


COMMANDS = [export_env_command]
