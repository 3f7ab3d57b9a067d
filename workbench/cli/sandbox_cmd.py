"""``workbench sandbox ...``: build the default image, clean up after crashes, check isolation, try a command."""

from __future__ import annotations

from typing import Any

import click

from workbench.cli.common import console, console_err, emit_json, json_option


@click.group("sandbox")
def sandbox_group() -> None:
    """Local sandboxes (wb.Local, wb.Docker): image, gc, status, exec."""


def _docker_client() -> Any:
    from workbench_local.sandbox.docker_pool import connect

    return connect()


@sandbox_group.command("image")
@click.option("--rebuild", is_flag=True, help="Build again even if the image exists.")
@json_option()
def image_command(rebuild: bool, as_json: bool) -> None:
    """Build the default Docker sandbox image (workbench-sandbox:2) from this machine's files; no registry."""
    from workbench_local.sandbox.image import build_default_image

    client = _docker_client()
    info = build_default_image(client, rebuild=rebuild, log=lambda s: console_err.print(s, highlight=False))
    if as_json:
        emit_json(info)
    else:
        state = "built" if info["built"] else "already there"
        console.print(f"{info['image']} {state} ({info['size_mb']} MB, {info['id'][:19]})")


@sandbox_group.command("gc")
@click.option("--all", "everything", is_flag=True,
              help="Remove every Workbench sandbox container, also those of runs still going.")
@json_option()
def gc_command(everything: bool, as_json: bool) -> None:
    """Remove sandboxes left behind by a crashed or killed run (containers by label, host folders)."""
    from workbench_local.sandbox.fs import rmtree, stale_pool_dirs

    from workbench.authoring.sandbox import SandboxError

    out: dict[str, Any] = {"containers_removed": 0, "containers_kept": 0, "dirs_removed": 0, "networks_removed": 0,
                           "docker": True}
    try:
        from workbench_local.sandbox.docker_pool import gc

        out.update(gc(_docker_client(), everything))
    except SandboxError as e:
        out["docker"] = False
        out["docker_error"] = str(e)
        for d in stale_pool_dirs():
            rmtree(d)
            out["dirs_removed"] += 1
    if as_json:
        emit_json(out)
        return
    line = (f"removed {out['containers_removed']} containers, {out['dirs_removed']} folders"
            + (f", {out['networks_removed']} networks" if out["networks_removed"] else ""))
    if out["containers_kept"]:
        line += f"; kept {out['containers_kept']} of live runs (--all removes them too)"
    console.print(line)
    if not out["docker"]:
        console_err.print(f"note: Docker skipped: {out['docker_error']}")


@sandbox_group.command("status")
@json_option()
def status_command(as_json: bool) -> None:
    """How sandboxes would run here: bubblewrap isolation and the memory limit for wb.Local, the Docker engine
    and image."""
    from workbench_local.sandbox.cgroup import Hierarchy
    from workbench_local.sandbox.cgroup import detect as detect_cgroup
    from workbench_local.sandbox.process_pool import detect

    from workbench.authoring.sandbox import DEFAULT_IMAGE, SandboxError

    iso = detect("auto")
    found = detect_cgroup()
    memory = {"cgroup": True, "version": found.version, "parent": str(found.parent)} \
        if isinstance(found, Hierarchy) else {"cgroup": False, "reason": found}
    out: dict[str, Any] = {"local": {"isolated": iso.mode != "none", "mode": iso.mode, "reason": iso.reason,
                                     "bwrap": iso.bwrap, "memory": memory}}
    try:
        from workbench_local.sandbox.docker_pool import LABEL
        from workbench_local.sandbox.image import image_exists

        client = _docker_client()
        out["docker"] = {"running": True, "version": client.version().get("Version", ""),
                         "default_image": image_exists(client, DEFAULT_IMAGE),
                         "containers": len(client.containers.list(all=True, filters={"label": f"{LABEL}=1"}))}
    except SandboxError as e:
        out["docker"] = {"running": False, "error": str(e)}
    if as_json:
        emit_json(out)
        return
    loc = out["local"]
    console.print("local:  " + (f"isolated with bubblewrap ({loc['mode']})" if loc["isolated"]
                                else f"NOT isolated: {loc['reason']}"))
    mem = loc["memory"]
    console.print("        memory: " + (f"a cgroup (v{mem['version']}) per sandbox bounds its resident memory"
                                        if mem["cgroup"] else
                                        f"RLIMIT_DATA per process (no memory cgroup: {mem['reason']})"), markup=False)
    d = out["docker"]
    if d["running"]:
        img = "present" if d["default_image"] else "missing (`workbench sandbox image` builds it)"
        console.print(f"docker: engine {d['version']}, image {DEFAULT_IMAGE} {img}, {d['containers']} sandbox containers")
    else:
        console.print(f"docker: {d['error']}")


@sandbox_group.command("exec", context_settings={"ignore_unknown_options": True})
@click.option("--runtime", default="local", show_default=True, help="local | docker[:IMAGE]")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds before the command is killed.")
@json_option("Print the ExecResult as one JSON object.")
@click.argument("command", nargs=-1, required=True)
@click.pass_context
def exec_command(ctx: click.Context, runtime: str, timeout: float, as_json: bool, command: tuple[str, ...]) -> None:
    """Run COMMAND in a fresh sandbox (a shell string if one argument, else an argv) and show what it did."""
    import asyncio
    import sys
    from dataclasses import asdict

    from workbench.authoring.runtimes import swap_runtime

    rt = swap_runtime(runtime)

    async def run() -> Any:
        async with rt.sandbox() as sb:
            return await sb.exec(command[0] if len(command) == 1 else list(command), timeout=timeout)

    r = asyncio.run(run())
    if as_json:
        emit_json(asdict(r))
    else:
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.timed_out:
            console_err.print(f"timed out after {timeout:g}s")
        if r.truncated:
            console_err.print("output truncated")
    ctx.exit(r.exit_code if 0 <= r.exit_code < 256 else 1)


COMMANDS = [sandbox_group]
