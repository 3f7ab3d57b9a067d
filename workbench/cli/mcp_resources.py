"""What ``workbench mcp`` serves besides its tools: an environment's README and files as MCP resources,
and the one-line error a failed tool call answers with.

URIs: ``env://NAME/README.md``, ``env://NAME/files`` (a JSON index of the files) and
``env://NAME/files/PATH`` (PATH relative to the environment's folder; a ``/`` in it may be sent as is or
as ``%2F``). Only discovered environments (bundled, user, installed) are served, and only the files
their version is hashed from (the README too); nothing is ever written. A file that links outside its
environment's folder is refused by name (``env_files.OutsideLinkError``), never read.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from workbench.errors import EnvLoadError, FieldError, NotFoundError, WorkbenchError, field_name

SCHEME = "env://"
README = "README.md"
MAX_LISTED = 500  # files listed per environment in resources/list (the index resource lists them all)
MAX_BYTES = 8 << 20  # a larger file is refused, not sent
_MIME = {".md": "text/markdown", ".py": "text/x-python", ".json": "application/json",
         ".jsonl": "application/jsonl", ".toml": "application/toml", ".txt": "text/plain"}
log = logging.getLogger("workbench.mcp")


def _ref(name: str) -> Any:
    """The discovered environment called ``name`` (never a path or an arbitrary module)."""
    from workbench.authoring.discovery import discover

    refs = discover()
    for r in refs:
        if r.name == name:
            if r.path is None:
                raise NotFoundError(f"environment {name!r} is an installed module without files on disk to serve")
            return r
    raise EnvLoadError(f"unknown environment {name!r}; known environments: {', '.join(r.name for r in refs) or 'none'}")


def env_files(ref: Any) -> list[tuple[str, Path]]:
    """(relative POSIX path, file) of every file of the environment, as its version hashes them."""
    from workbench.authoring.env_files import env_file_paths

    return env_file_paths(ref.path) if ref.path is not None else []


def _uri(name: str, rel: str | None = None) -> str:
    return f"{SCHEME}{name}/files" + ("" if rel is None else "/" + quote(rel, safe="/"))


def readme_uri(ref: Any) -> str | None:
    """The README resource of an environment that has one."""
    if ref.path is not None and ref.path.is_dir() and (ref.path / README).is_file():
        return f"{SCHEME}{ref.name}/{README}"
    return None


def _mime(path: str) -> str:
    return _MIME.get(Path(path).suffix.lower(), "text/plain")


def _read(path: Path, rel: str) -> tuple[str | bytes, str]:
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise WorkbenchError(f"{rel} is {size:,} bytes; resources serve files up to {MAX_BYTES:,} bytes")
    data = path.read_bytes()
    try:
        return data.decode("utf-8"), _mime(rel)
    except UnicodeDecodeError:
        return data, "application/octet-stream"


def read_env_uri(uri: str) -> tuple[str | bytes, str]:
    """The content and MIME type of an ``env://`` resource."""
    import orjson

    if not uri.startswith(SCHEME):
        raise NotFoundError(f"unknown resource {uri}; resources look like env://NAME/README.md")
    name, _, rest = uri[len(SCHEME):].partition("/")
    ref = _ref(unquote(name))
    if rest == README:
        found = dict(env_files(ref)).get(README) if readme_uri(ref) is not None else None
        if found is None:
            raise NotFoundError(f"environment {ref.name!r} has no {README}; env://{ref.name}/files lists its files")
        return _read(found, README)
    if rest in ("files", "files/"):
        files = [{"path": rel, "uri": _uri(ref.name, rel), "size": f.stat().st_size} for rel, f in env_files(ref)]
        return orjson.dumps({"env": ref.name, "files": files}).decode(), "application/json"
    if rest.startswith("files/"):
        rel = unquote(rest[len("files/"):])
        for r, f in env_files(ref):
            if r == rel:  # only a file of the environment: no "..", no file outside its folder
                return _read(f, rel)
        raise NotFoundError(f"environment {ref.name!r} has no file {rel!r}; env://{ref.name}/files lists its files")
    raise NotFoundError(f"unknown resource {uri}; an environment has env://{ref.name}/{README} and "
                        f"env://{ref.name}/files/PATH")


def list_env_resources() -> list[Any]:
    """Every environment's README, file index and files (up to MAX_LISTED each) as MCP resources."""
    from mcp import types

    from workbench.authoring.discovery import discover

    out = []
    for ref in discover():
        if ref.path is None:
            continue
        readme = readme_uri(ref)
        if readme:
            out.append(types.Resource(uri=readme, name=f"{ref.name} README", mime_type="text/markdown",
                                      description=f"The README of the {ref.origin} environment {ref.name}"))
        out.append(types.Resource(uri=_uri(ref.name), name=f"{ref.name} files", mime_type="application/json",
                                  description=f"The files of environment {ref.name} (path, uri, size)"))
        try:
            files = env_files(ref)
        except (OSError, WorkbenchError):  # unreadable, or a link out of its folder: none of its files
            continue
        for rel, _ in files[:MAX_LISTED]:
            out.append(types.Resource(uri=_uri(ref.name, rel), name=f"{ref.name}/{rel}", mime_type=_mime(rel)))
    return out


#: Where a tool's argument is named otherwise than the field it fills (any other field is its own argument);
#: every tool that loads an environment takes its keyword arguments as ``args``.
TOOL_ARGUMENTS: dict[str, dict[str, str]] = {
    "run_eval": {"EvalOptions.rollouts_per_task": "r", "EvalOptions.timeout_s": "timeout"},
}
ANY_TOOL_ARGUMENTS = {"EvalOptions.env_args": "args"}


def argument_of(tool: str | None, field: str) -> str:
    """The argument of ``tool`` that fills ``field`` (``"EvalOptions.rollouts_per_task"`` → ``r``)."""
    return TOOL_ARGUMENTS.get(tool or "", {}).get(field) or ANY_TOOL_ARGUMENTS.get(field) or field_name(field)


def error_line(e: BaseException, tool: str | None = None) -> str:
    """What a failed tool call answers: one line, the user-facing message where the error carries one; the
    fields an option error names are said as ``tool``'s arguments."""
    import pydantic
    from mcp.server.mcpserver.exceptions import ToolError

    from workbench.config.redact import redact

    cause: BaseException = e
    while isinstance(cause, ToolError) and cause.__cause__ is not None:
        cause = cause.__cause__
    if isinstance(cause, pydantic.ValidationError):
        errs = cause.errors()
        first = errs[0] if errs else {"loc": (), "msg": str(cause)}
        where = ".".join(str(x) for x in first["loc"]) or "arguments"
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        msg = f"bad argument {where}: {first['msg']}{more}"
    elif isinstance(cause, FieldError):
        msg = cause.render(lambda field: argument_of(tool, field))
    elif isinstance(cause, WorkbenchError | ToolError):
        msg = str(cause)
    elif isinstance(cause, sqlite3.Error):
        msg = f"the store failed ({type(cause).__name__}: {cause}); what was committed is kept"
    elif isinstance(cause, ValueError):
        msg = str(cause) or type(cause).__name__
    else:
        log.error("tool call failed", exc_info=cause)  # unexpected: the traceback goes to stderr
        msg = f"{type(cause).__name__}: {cause}"
    return " ".join(redact(msg).split()) or type(cause).__name__
