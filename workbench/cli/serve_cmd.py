"""``workbench serve``: the embedded OpenAI-compatible model server (lives in ``local_runtime``)."""

from __future__ import annotations

import click

from workbench.errors import EndpointError


@click.command("serve", add_help_option=False,
               context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def serve_command(args: tuple[str, ...]) -> None:
    """Serve a model with an OpenAI-compatible API: workbench serve [--model tiny|HF_ID|PATH]
    [--adapter NAME=PATH] [--port P]. See `workbench serve --help` for every option."""
    try:
        from workbench_local.server.serve import run
    except ImportError as e:
        raise EndpointError(f"the embedded model server is not installed here ({e}); install the local stack with "
                            "`pip install 'rl-workbench[local]'`") from None
    try:
        run(list(args))
    except ImportError as e:
        raise EndpointError(f"the embedded model server needs torch, transformers and peft ({e}); install them with "
                            "`pip install 'rl-workbench[local]'`") from None


COMMANDS = [serve_command]
