"""Every process verifiers' local runtime starts, confined as Workbench's local runtime confines its own
(standard library and verifiers only: this runs in a verifiers v1 worker).

Workbench gives the worker a command-line prefix (``wb.Local()``'s confinement: ``bwrap`` with read-only system
folders, the folders the agents need, a PID namespace of their own, no capabilities); :func:`install` makes
verifiers' ``SubprocessRuntime`` start every process through it: the setup commands and the agent programs
(``run``), the MCP tool servers (``run_background``) and any other process (``open_process``), each in the
runtime's own folder; ``program_runs.py`` starts its fork servers the same way. Their ``/tmp`` is one host
folder of this worker's, and the files the runtime reads and writes there (a tool server's port file) are read
and written in it. An empty prefix leaves everything as it is.
"""

import asyncio

_PREFIX: list = []


def confined():
    """Whether processes start confined."""
    return bool(_PREFIX)


def wrap(argv, cwd):
    """``argv`` as a confined command run in folder ``cwd`` (the same path inside), or as it is."""
    if not _PREFIX:
        return list(argv)
    return [*_PREFIX, "--chdir", str(cwd or "/tmp"), "--", *argv]


class _ConfinedAsyncio:
    """``asyncio`` as verifiers' local runtime sees it: its subprocesses start confined."""

    def __getattr__(self, name):
        return getattr(asyncio, name)

    @staticmethod
    async def create_subprocess_exec(*argv, cwd=None, **kw):
        return await asyncio.create_subprocess_exec(*wrap(argv, cwd), cwd=cwd, **kw)


def install(prefix, tmp):
    """Start the local runtime's processes through ``prefix``, whose ``/tmp`` is the host folder ``tmp``
    (idempotent; an empty prefix changes nothing)."""
    if not prefix or _PREFIX:
        return
    from verifiers.v1.runtimes import subprocess as local

    _PREFIX.extend(prefix)
    local.asyncio = _ConfinedAsyncio()
    runtime = local.SubprocessRuntime
    own_read, own_write = runtime._read, runtime.write

    def host_path(path):
        """Where the worker finds a file a confined process names (its ``/tmp`` is ``tmp`` here)."""
        path = str(path)
        if path == "/tmp" or path.startswith("/tmp/"):
            return tmp + path[len("/tmp"):]
        return path

    async def _read(self, path, max_bytes=None):
        return await own_read(self, host_path(path), max_bytes)

    async def write(self, path, data):
        return await own_write(self, host_path(path), data)

    runtime._read, runtime.write = _read, write
