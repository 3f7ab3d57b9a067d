"""``workbench login`` and ``workbench logout``: provider tokens in the OS keyring."""

from __future__ import annotations

import sys

import click

from workbench.cli.common import console

PROVIDER_NAMES = ["modal", "openai", "anthropic", "hf", "index"]


def _provider_key(provider_name: str, index_name: str | None) -> str:
    """The credentials' key: the provider's name, or ``index:NAME`` for a package index named in the settings."""
    if provider_name != "index":
        if index_name is not None:
            raise click.UsageError(f"`workbench login {provider_name}` takes no NAME (only `login index NAME` does)")
        return provider_name
    if not index_name:
        raise click.UsageError("`workbench login index NAME` needs the index's name from the settings ([hub.indexes.NAME])")
    from workbench.packaging.indexes import resolve_index

    resolve_index(index_name)  # an unknown name is refused, with the configured ones
    return f"index:{index_name}"


def _read_token(name: str, token: str | None, from_stdin: bool) -> str:
    from workbench.config.credentials import provider

    p = provider(name)
    if token is not None:
        return token
    if from_stdin or not sys.stdin.isatty():
        # One line (Modal: ``ID:SECRET``, or the id and the secret on two lines).
        lines = [ln.strip() for ln in sys.stdin.read().splitlines() if ln.strip()]
        return ":".join(lines[:2]) if p.parts == 2 and len(lines) >= 2 and ":" not in lines[0] else (lines[0] if lines else "")
    hint = f" (from {p.url})" if p.url else ""
    values = [click.prompt(f"{p.label} {what}{hint if i == 0 else ''}", hide_input=True, default="",
                           show_default=False) for i, what in enumerate(p.prompts)]
    return ":".join(values)


@click.command("login")
@click.argument("provider_name", metavar="PROVIDER", type=click.Choice(PROVIDER_NAMES))
@click.argument("index_name", metavar="[NAME]", required=False)
@click.option("--token", default=None,
              help="The token (Modal: TOKEN_ID:TOKEN_SECRET; an index: USERNAME:PASSWORD). Visible in shell history: "
                   "prefer the prompt or --stdin.")
@click.option("--stdin", "from_stdin", is_flag=True, help="Read the token from standard input.")
def login_command(provider_name: str, index_name: str | None, token: str | None, from_stdin: bool) -> None:
    """Store a PROVIDER token (modal, openai, anthropic, hf) or a package index's credentials (`login index
    NAME`: username and password) in the OS keyring.

    With no --token it is asked for without echo (or read from stdin when piped). Reading a token
    tries keyring first, then MODAL_TOKEN_ID/MODAL_TOKEN_SECRET, OPENAI_API_KEY, ANTHROPIC_API_KEY
    or HF_TOKEN. Tokens are never written to the store, logs or bundles.
    """
    from workbench.config.credentials import provider, store_token

    key = _provider_key(provider_name, index_name)
    p = provider(key)
    backend = store_token(key, _read_token(key, token, from_stdin))
    console.print(f"stored the {p.label} {'credentials' if provider_name == 'index' else 'token'} in keyring ({backend})")


@click.command("logout")
@click.argument("provider_name", metavar="PROVIDER", type=click.Choice(PROVIDER_NAMES))
@click.argument("index_name", metavar="[NAME]", required=False)
def logout_command(provider_name: str, index_name: str | None) -> None:
    """Remove a PROVIDER token (or `logout index NAME`: an index's credentials) from the OS keyring."""
    import os

    from workbench.config.credentials import delete_token, provider

    key = _provider_key(provider_name, index_name)
    p = provider(key)
    removed = delete_token(key)
    console.print(f"removed the {p.label} token from keyring" if removed
                  else f"no {p.label} token was stored in keyring")
    still = [v for v in p.env if os.environ.get(v)]
    if still:
        console.print(f"note: {', '.join(still)} is still set in this environment and will still be used")


COMMANDS = [login_command, logout_command]
