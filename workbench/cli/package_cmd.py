"""``workbench package``: a reproducible bundle of an environment (wheel, dependency lock, content hash)."""

from __future__ import annotations

import click

from workbench.cli.common import console, emit_json, json_option


@click.command("package")
@click.argument("env")
@click.option("-o", "--out", "out_dir", default="dist", show_default=True, type=click.Path(file_okay=False),
              help="Directory the bundle folder (<env>-<hash12>/) is written under.")
@json_option()
def package_command(env: str, out_dir: str, as_json: bool) -> None:
    """Package ENV into a reproducible bundle and print its content hash.

    The bundle holds a wheel of the environment's files, requirements.lock (its declared
    requirements pinned to the versions installed here) and bundle.json (the manifest). The same
    files always give the same bytes and the same hash; the cloud side refuses to run a bundle whose
    hash differs from the one launched. Anything shaped like a secret (API keys, tokens, private
    keys, .env files) is refused with its file and line.
    """
    from workbench.bundles.bundle import build_bundle

    b = build_bundle(env, out_dir)
    summary = {
        "env": b.env, "hash": b.hash, "env_version": b.env_version, "path": str(b.path),
        "wheel": str(b.wheel), "lock": b.lock, "lock_file": str(b.lock_file), "manifest": str(b.manifest),
        "files": len(b.files), "bytes": sum(int(f["size"]) for f in b.files), "import_name": b.import_name,
    }
    if as_json:
        emit_json(summary)
        return
    from rich.markup import escape

    console.print(f"[bold]{escape(b.env)}[/] packaged into {escape(str(b.path))}")
    console.print(f"  wheel     {escape(b.wheel.name)} ({summary['files']} files, {summary['bytes']:,} bytes)")
    pins = ", ".join(b.lock) if b.lock else "no declared requirements"
    console.print(f"  lock      {b.lock_file.name} ({escape(pins)})")
    console.print(f"  manifest  {b.manifest.name}")
    console.print(f"  hash      [bold]{b.hash}[/]")


COMMANDS = [package_command]
