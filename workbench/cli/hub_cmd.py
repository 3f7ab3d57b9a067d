"""``workbench hub``: share environments through a Python package index (workbench/hub/)."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import console, console_err, db_option, emit_json, json_option, open_store

INDEX_HELP = "A package index named in the settings ([hub.indexes.NAME]) or its simple-API URL (default: [hub] default)."


def index_option(f: Any) -> Any:
    return click.option("--index", default=None, metavar="NAME|URL", help=INDEX_HELP)(f)


@click.group("hub")
def hub_group() -> None:
    """Push, pull, search and fork environments on a package index (pypiserver, devpi, Artifactory, ...)."""


@hub_group.command("push")
@click.argument("env")
@index_option
@click.option("--version", default=None, help="The version to publish (default: the next patch of the newest).")
@db_option
@json_option()
@click.pass_context
def push_command(ctx: click.Context, env: str, index: str | None, version: str | None, db: str | None,
                 as_json: bool) -> None:
    """Publish ENV: its reproducible bundle (secrets refused), a version, and an eval card with the latest
    results per model from the store. A version that exists is never overwritten."""
    from workbench.hub.publish import push

    with open_store(ctx, db, read_only_ok=True) as store:
        pushed = push(env, store.conn, index=index, version=version)
    if as_json:
        emit_json(pushed.as_dict())
        return
    console.print(f"pushed [bold]{pushed.name} {pushed.version}[/] to index {pushed.index} ({pushed.filename}); "
                  f"hash {pushed.hash[:12]}", highlight=False)
    if pushed.same_as:
        console.print(f"note: the content is the same as {pushed.same_as} (hash {pushed.hash[:12]}); pushed as a new "
                      "version anyway", highlight=False)


@hub_group.command("search")
@click.argument("text", required=False)
@index_option
@json_option()
def search_command(text: str | None, index: str | None, as_json: bool) -> None:
    """The environments on the index (whose name, description or README holds TEXT)."""
    from rich.table import Table

    from workbench.hub.browse import search

    out = search(text, index)
    for skip in out["skipped"]:
        version = f" {skip['version']}" if skip["version"] else ""
        console_err.print(f"warning: skipped {skip['name']}{version}: {skip['reason']}", highlight=False,
                          markup=False)
    if as_json:
        emit_json(out)
        return
    if not out["environments"]:
        console.print(f"no environment{f' matching {text!r}' if text else ''} on index {out['index']}", highlight=False)
        return
    t = Table(box=None, show_edge=False, header_style="bold")
    for col in ("name", "latest", "versions", "results", "summary"):
        t.add_column(col, overflow="fold")
    for r in out["environments"]:
        t.add_row(r["name"], r["latest"], str(r["versions"]), str(r["results"]), r["summary"])
    console.print(t)


@hub_group.command("versions")
@click.argument("name")
@index_option
@json_option()
def versions_command(name: str, index: str | None, as_json: bool) -> None:
    """The published versions of NAME, oldest first, with their content hashes."""
    from workbench.hub.browse import versions

    out = versions(name, index)
    if as_json:
        emit_json(out)
        return
    for v in out["versions"]:
        if v.get("error"):
            console.print(f"{v['version']:<12} unusable: {v['error']}", highlight=False, markup=False)
            continue
        console.print(f"{v['version']:<12} hash {str(v['hash'])[:12]}  env version {v['env_version']}  "
                      f"{v['results']} results  {v['file']}", highlight=False)


@hub_group.command("show")
@click.argument("spec", metavar="NAME[==VERSION]")
@index_option
@json_option()
def show_command(spec: str, index: str | None, as_json: bool) -> None:
    """The eval card of NAME (its newest version, or ==VERSION)."""
    from workbench.hub.browse import show

    card = show(spec, index)
    if as_json:
        emit_json(card)
        return
    print_card(card)


def print_card(card: dict[str, Any]) -> None:
    from workbench.hub.card_view import card_renderable

    console.print(card_renderable(card), highlight=False)


@hub_group.command("pull")
@click.argument("spec", metavar="NAME[==VERSION]")
@index_option
@click.option("--as", "local_name", default=None, metavar="NAME", help="The name it takes here (default: its own).")
@json_option()
def pull_command(spec: str, index: str | None, local_name: str | None, as_json: bool) -> None:
    """Install NAME (its newest version, or ==VERSION) into Workbench's own env folder, its dependencies beside
    it: its hash is checked first; then `envs`, `eval`, the app and `launch` find it by name."""
    from workbench.hub.pull import pull

    rec = pull(spec, index, local_name=local_name)
    if as_json:
        emit_json(rec)
        return
    console.print(f"pulled [bold]{rec['name']} {rec['version']}[/] from index {rec['index']} (hash {rec['hash'][:12]}) "
                  f"into {rec['path']}", highlight=False)
    if rec["lock"]:
        console.print(f"dependencies: {', '.join(rec['lock'])} in {rec['deps']}", highlight=False)
    console.print("nothing of it has run: its code runs when you run it (`workbench validate "
                  f"{rec['name']}` loads and checks it)", highlight=False)


@hub_group.command("fork")
@click.argument("spec", metavar="NAME[==VERSION]")
@click.argument("new")
@index_option
@json_option()
def fork_command(spec: str, new: str, index: str | None, as_json: bool) -> None:
    """Copy NAME's sources into your env folder as NEW, recording what it was forked from."""
    from workbench.hub.pull import fork

    out = fork(spec, new, index)
    if as_json:
        emit_json(out)
        return
    f = out["forked_from"]
    console.print(f"forked {f['name']} {f['version']} (hash {f['hash'][:12]}) into {out['path']} as "
                  f"[bold]{out['name']}[/]", highlight=False)


@hub_group.command("remove")
@click.argument("name")
@json_option()
def remove_command(name: str, as_json: bool) -> None:
    """Remove the pulled environment NAME from this machine (the index keeps it)."""
    from workbench.hub.pull import remove

    out = remove(name)
    if as_json:
        emit_json(out)
        return
    console.print(f"removed {name} {out['version']} (pulled from index {out['index']})", highlight=False)


COMMANDS = [hub_group]
