"""Listing environments: each discovered environment with its origin, its version and whether it loads.

``workbench envs``, the ``list_environments`` MCP tool and the app's Environments screen describe an
environment with :func:`describe`; :func:`list_environments` is every discovered one, as rows of
``workbench envs --json``.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

from workbench.authoring.discovery import EnvRef
from workbench.errors import WorkbenchError


@dataclass(slots=True)
class EnvListing:
    """One environment as a listing shows it.

    ``version`` is what a run of it with its default arguments stores; where it does not load, the hash
    of its files (``files``), and ``error`` says why (its first line; ``error_text`` in full).
    ``framework`` is the framework it was written for ("" for Workbench's own), ``override`` the system
    prompt kept by ``optimize --apply`` (or None), ``hub`` the record of a pulled environment, and
    ``forked_from`` what a fork was forked from. ``tasks`` and ``description`` are filled in when it loaded
    (``tasks`` only when asked for: counting may read a data set)."""

    ref: EnvRef
    version: str
    files: str
    error: str | None = None
    error_text: str = ""
    framework: str = ""
    override: Any = None
    hub: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None
    tasks: int | None = None
    description: str = ""
    #: the format it is written in (``Environment.dialect``); before it loads, what its files say
    dialect: str = ""

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def loaded(self) -> bool:
        return self.error is None

    def row(self) -> dict[str, Any]:
        """The row of ``workbench envs --json`` (and of the ``list_environments`` tool)."""
        ref = self.ref
        row: dict[str, Any] = {"name": ref.name, "origin": ref.origin, "dialect": self.dialect or "?",
                               "version": self.version,
                               "path": str(ref.path) if ref.path else (ref.module or str(ref.where or ""))}
        if self.framework:  # written for another framework, e.g. "verifiers 0.3.1"
            row["framework"] = self.framework
        if self.override is not None:  # a system prompt kept by `optimize --apply`
            row["override"] = {"system_prompt": self.override.system_prompt, "origin": self.override.origin}
        if self.hub is not None:
            row["hub"] = self.hub
        if self.forked_from:
            row["forked_from"] = self.forked_from
        if self.error is not None:
            row["error"] = self.error
        return row


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def _files_version(ref: EnvRef) -> tuple[str, str | None]:
    """The hash of the environment's files, or what stands for it and why it cannot be had."""
    try:
        return ref.version(), None
    except OSError as e:
        return f"unreadable ({e.strerror})", _first_line(e)
    except WorkbenchError as e:  # a file links outside its folder: never read
        return "unreadable", _first_line(e)


def describe(ref: EnvRef, *, reload: bool = False, count_tasks: bool = False,
             stdout_to_stderr: bool = True) -> EnvListing:
    """``ref`` described; never raises (an environment that does not load is a listing with its error).

    A pulled environment is never loaded here: its listing is its record's metadata and the hash of its
    files (its code runs when the user runs it). What loading prints goes to stderr, never to stdout
    (where ``--json`` and the MCP stdio transport write); a caller loading from several threads at once
    (the app, which captures output itself) passes ``stdout_to_stderr=False``, as swapping ``sys.stdout``
    is not thread-safe."""
    from workbench.authoring.discovery import load_ref
    from workbench.hub.publish import forked_from

    files, files_error = _files_version(ref)
    fork = forked_from(ref) or None
    if ref.origin == "hub":
        from workbench.hub.pull import record

        rec = record(ref.name) or {}
        framework = str(rec.get("framework") or "")
        tasks = rec.get("tasks") if isinstance(rec.get("tasks"), int) else None
        lines = str(rec.get("description") or "").strip().splitlines()
        hub = {k: rec.get(k) for k in ("version", "index", "hash", "error", "tasks", "harness", "framework")}
        return EnvListing(ref, "unreadable" if files_error else files, files, files_error, files_error or "",
                          "" if framework == "workbench" else framework, None, hub, fork, tasks,
                          lines[0] if lines else "", hub_dialect(framework))
    try:
        with contextlib.redirect_stdout(sys.stderr) if stdout_to_stderr else contextlib.nullcontext():
            env = load_ref(ref, reload=reload)
    except (Exception, SystemExit) as e:  # a broken environment is a row of the listing, not its end
        text = str(e) if isinstance(e, WorkbenchError) else f"{type(e).__name__}: {e}"
        # Files that cannot be read at all (one links outside the folder) say so rather than the load error.
        error = files_error if files == "unreadable" else _first_line(e)
        return EnvListing(ref, files, files, error, text, forked_from=fork, dialect=ref.format or "")
    tasks = None
    if count_tasks:
        try:
            tasks = len(env.tasks)
        except Exception:  # a task set that cannot say how long it is
            tasks = None
    desc = env.description.strip().splitlines()[0] if env.description.strip() else ""
    return EnvListing(ref, env.version or files, files, None, "", env.adapter, env.override, None, fork, tasks, desc,
                      env.dialect)


def hub_dialect(framework: str) -> str:
    """The dialect of a pulled environment, from the framework its record names (``verifiers 0.3.1``)."""
    if not framework or framework == "workbench":
        return "workbench"
    name, _, version = framework.partition(" ")
    if name == "verifiers":
        return "verifiers v1" if version and not version.startswith("0.3") else "verifiers legacy"
    return name


def list_environments() -> list[EnvListing]:
    """Every environment Workbench can run (bundled, user, pulled, installed), described."""
    from workbench.authoring.discovery import discover

    return [describe(ref) for ref in discover()]


__all__ = ["EnvListing", "describe", "list_environments"]
