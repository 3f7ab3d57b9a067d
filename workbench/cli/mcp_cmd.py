"""``workbench mcp``: Workbench as an MCP server for coding agents (stdio, or streamable HTTP on 127.0.0.1)."""

from __future__ import annotations

import click

from workbench.cli.common import console_err, db_option
from workbench.errors import ConfigError

TOKEN_ENV = "WORKBENCH_MCP_TOKEN"
KEYRING_NAME = "mcp"  # the keyring entry (service "workbench") that may hold the HTTP token
MIN_TOKEN = 16


def _check_port(port: int) -> None:
    import socket

    if not 0 < port < 65536:
        raise ConfigError(f"--http needs a port from 1 to 65535, not {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise ConfigError(f"cannot serve on 127.0.0.1:{port} ({e.strerror}); pick another --http PORT") from None


def _http_token() -> tuple[str, str | None]:
    """The bearer token HTTP clients must send and where it came from: $WORKBENCH_MCP_TOKEN, else the
    keyring entry ``workbench``/``mcp``, else a fresh random one (source None: it is printed once)."""
    import os
    import secrets

    value, source = os.environ.get(TOKEN_ENV, "").strip(), f"${TOKEN_ENV}"
    if not value:
        try:
            import keyring

            value, source = (keyring.get_password("workbench", KEYRING_NAME) or "").strip(), "the keyring"
        except Exception:  # no backend or a locked keyring: a fresh token serves
            value = ""
    if not value:
        return secrets.token_urlsafe(32), None
    if len(value) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in value):
        raise ConfigError(f"the MCP token from {source} must be at least {MIN_TOKEN} printable characters "
                          "without spaces; e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    return value, source


@click.command("mcp")
@click.option("--http", "http_port", type=int, default=None, metavar="PORT",
              help="Serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio.")
@click.option("--max-rollouts", type=int, default=64, show_default=True,
              help="The most rollouts (n × r) one run_eval call may run.")
@db_option
@click.pass_context
def mcp_command(ctx: click.Context, http_port: int | None, max_rollouts: int, db: str | None) -> None:
    """Serve Workbench to a coding agent over MCP (stdio by default).

    Tools: list_environments, validate_environment, run_eval (small evals, at most --max-rollouts),
    list_runs, show_rollout, search_rollouts, diff_rollouts, rescore, plan_launch (plans only: it never
    launches). Resources: env://NAME/README.md and env://NAME/files/PATH. For example
    `claude mcp add workbench -- workbench mcp`.

    Over --http every request carries `Authorization: Bearer TOKEN`: the token is $WORKBENCH_MCP_TOKEN,
    else the keyring's entry `workbench`/`mcp`, else a new one printed once to stderr. Over HTTP the tools
    that load code take only a discovered environment's name, never a path.
    """
    import sys

    import anyio

    from workbench.cli.common import open_store
    from workbench.cli.mcp_server import build_server
    from workbench.config.paths import default_db

    if max_rollouts < 1:
        raise ConfigError("--max-rollouts must be at least 1")
    path = str(db or (ctx.find_root().obj or {}).get("db") or default_db())
    open_store(ctx, path, read_only_ok=True).close()  # a store that cannot be opened fails now, not at the first call
    server = build_server(lambda read_only_ok: open_store(ctx, path, read_only_ok=read_only_ok),
                          max_rollouts=max_rollouts, remote=http_port is not None)
    if http_port is not None:
        from workbench.cli.mcp_server import serve_http

        _check_port(http_port)
        token, source = _http_token()
        said = f"bearer token from {source}" if source else f"bearer token {token} (printed once; set ${TOKEN_ENV} " \
            "to choose it)"
        console_err.print(f"workbench mcp: streamable HTTP on http://127.0.0.1:{http_port}/mcp (store {path}); "
                          f"clients send the header Authorization: Bearer TOKEN, {said}", markup=False, highlight=False)
        anyio.run(serve_http, server, token, http_port)
        return
    # The SDK's stdio transport serves the protocol on private copies of stdin and stdout, and points file
    # descriptors 0 and 1 at the null device and stderr meanwhile: anything else that prints (an
    # environment's code, a subprocess, a progress bar) cannot corrupt the protocol, nor read from it.
    sys.stdout.flush()
    anyio.run(server.run_stdio_async)


COMMANDS = [mcp_command]
