"""The ``workbench`` command line. Heavy imports happen inside commands, so it starts fast."""

from __future__ import annotations

import asyncio
import sqlite3
import sys

import click

from workbench.cli.common import console_err, db_option
from workbench.errors import WorkbenchError


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@db_option
@click.version_option(package_name="rl-workbench", prog_name="workbench")
@click.pass_context
def cli(ctx: click.Context, db: str | None) -> None:
    """Workbench: author, debug, evaluate and train LLM RL environments.

    With no command, opens the terminal app.
    """
    ctx.ensure_object(dict)
    ctx.obj["db"] = db
    if ctx.invoked_subcommand is None:
        from workbench.cli.tui_cmd import open_tui

        open_tui(db)


def _register() -> None:
    from workbench.cli import (
        browse,
        compare_cmd,
        costs_cmd,
        debug_cmd,
        diff_cmd,
        distill_cmd,
        envs_cmd,
        eval_cmd,
        export_env_cmd,
        gateway_cmd,
        hub_cmd,
        import_cmd,
        import_eval_cmd,
        launch_cmd,
        login_cmd,
        mcp_cmd,
        models_cmd,
        new_cmd,
        optimize_cmd,
        package_cmd,
        play_cmd,
        prices_cmd,
        probe_cmd,
        rescore_cmd,
        sandbox_cmd,
        serve_cmd,
        tasks_cmd,
        train_cmd,
    )

    for mod in (eval_cmd, envs_cmd, browse, diff_cmd, prices_cmd, sandbox_cmd, serve_cmd, train_cmd, launch_cmd,
                package_cmd, login_cmd, costs_cmd, new_cmd, debug_cmd, rescore_cmd, import_cmd, import_eval_cmd,
                play_cmd, mcp_cmd, models_cmd, compare_cmd, optimize_cmd, distill_cmd, hub_cmd, probe_cmd,
                export_env_cmd, gateway_cmd, tasks_cmd):
        for command in mod.COMMANDS:
            cli.add_command(command)


_register()


def _terminate(signum: int, frame: object) -> None:
    """SIGTERM ends a command as Ctrl-C does: its clean-up runs, and it says so in one line."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    import signal

    try:
        signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread
        pass
    try:
        # Outside standalone mode click returns the code of ``ctx.exit(code)`` instead of exiting.
        rv = cli.main(args=argv, prog_name="workbench", standalone_mode=False)
    except WorkbenchError as e:
        from rich.markup import escape

        from workbench.cli.option_names import cli_message

        # Messages name config tables like [env]: printed as they are, never as markup.
        from workbench.config.redact import redact

        message = cli_message(e, cli, sys.argv[1:] if argv is None else list(argv))
        console_err.print(f"[bold red]error:[/] {escape(redact(message))}", highlight=False, soft_wrap=True)
        return e.exit_code
    except sqlite3.Error as e:  # the store failed under a command (a full disk, a lock held too long)
        console_err.print(f"error: the store failed ({type(e).__name__}: {e}); what was committed is kept",
                          highlight=False, soft_wrap=True, markup=False)
        return 1
    except click.exceptions.Abort:
        console_err.print("aborted")
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except (KeyboardInterrupt, asyncio.CancelledError):
        console_err.print("interrupted")
        return 130
    except BrokenPipeError:
        return 0
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
