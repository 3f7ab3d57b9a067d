"""Agent programs started from warm interpreters, in a verifiers v1 worker (standard library and verifiers only).

verifiers' local runtime (``SubprocessRuntime``) runs a harness's agent program, a PEP 723 script it prepared
with uv, as a new process per episode: an interpreter that starts and imports the script's dependencies
(openai, the MCP SDK, httpx) each time, which is nearly all of a short episode's cost. :func:`install` makes the
runtime hand such a run to a fork server of that script's interpreter (``program_zygote.py``), which imported
them once: the child runs the same script, with the same arguments, environment and working folder, in its
own process group, and its exit code, stdout and stderr are the runtime's result as before. Anything else the
runtime runs (setup commands, tools, other programs) goes the usual way, and so does every run if a fork server
cannot start.
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
from pathlib import Path

import confined_runs  # type: ignore[import-not-found,unused-ignore]  # beside this file
import shared_tls  # type: ignore[import-not-found,unused-ignore]  # beside this file

ZYGOTE = Path(__file__).with_name("program_zygote.py")
_PACKET = 65536
#: What verifiers' ``prepare_uv_script(activate=True)`` exports before it execs the interpreter.
_ACTIVATE_MARK = "uv-script"


class _Zygote:
    """One fork server and the runs it answers for."""

    def __init__(self, proc, sock):
        self.proc = proc
        self.sock = sock
        self.ids = iter(range(1, 1 << 62))
        self.waiting = {}  # id -> future of each answer, in order
        self.reader = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def start(cls, interpreter, script):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = confined_runs.wrap([interpreter, str(ZYGOTE), script, str(theirs.fileno())], os.path.dirname(script))
            proc = await asyncio.create_subprocess_exec(
                *argv, pass_fds=[theirs.fileno()], stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, start_new_session=True)
        finally:
            theirs.close()
        ours.setblocking(False)
        data = await asyncio.get_running_loop().sock_recv(ours, _PACKET)
        if not data or not json.loads(data).get("ready"):  # no data: it ended (its stderr is this worker's)
            ours.close()
            if data:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise OSError(f"the fork server of {script} did not start (exit {await proc.wait()})")
        return cls(proc, ours)

    async def _read(self):
        loop = asyncio.get_running_loop()
        while True:
            data = await loop.sock_recv(self.sock, _PACKET)
            if not data:
                break
            answer = json.loads(data)
            queue = self.waiting.get(answer["id"])
            if queue is not None:
                queue.put_nowait(answer)
        for queue in self.waiting.values():
            queue.put_nowait({"error": "the fork server ended"})

    async def close(self):
        """End the server (its runs go on): it ends when its socket closes."""
        self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.reader
        self.sock.close()
        await self.proc.wait()

    async def run(self, argv, env, cwd):
        rid = next(self.ids)
        answers = self.waiting[rid] = asyncio.Queue()
        pid = None
        with tempfile.TemporaryFile() as request, tempfile.TemporaryFile() as out, \
                tempfile.TemporaryFile() as err, open(os.devnull, "rb") as stdin:
            request.write(json.dumps({"argv": argv, "env": env, "cwd": str(cwd)}).encode())
            request.seek(0)
            try:
                await _send_fds(self.sock, json.dumps({"id": rid}).encode(),
                                [request.fileno(), stdin.fileno(), out.fileno(), err.fileno()])
                started = await answers.get()
                if "error" in started:
                    raise OSError(started["error"])
                pid = started["pid"]
                ended = await answers.get()
                if "error" in ended:
                    raise OSError(ended["error"])
                pid = None
            finally:
                del self.waiting[rid]
                if pid is not None:  # cancelled (a timeout) while it runs: its whole group goes, as the runtime does
                    self.kill(rid, pid)
            out.seek(0)
            err.seek(0)
            return ended["exit"], out.read().decode(errors="replace"), err.read().decode(errors="replace")


    def kill(self, rid, pid):
        """End run ``rid``'s process group: here, or by the server where it runs confined (its own PID
        namespace, where ``pid`` means another process)."""
        if not confined_runs.confined():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            return
        with contextlib.suppress(OSError):  # a full buffer or an ended server: its namespace ends with it
            self.sock.send(json.dumps({"kill": rid}).encode())


async def _send_fds(sock, data, fds):
    """One packet with descriptors on a non-blocking socket, waiting for room when its buffer is full."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(sock, [data], fds)
            return
        except BlockingIOError:
            room = loop.create_future()
            loop.add_writer(sock.fileno(), room.set_result, None)
            try:
                await room
            finally:
                loop.remove_writer(sock.fileno())


_ZYGOTES: dict = {}  # (interpreter, script) -> the future of its server
_BROKEN: set = set()  # the (interpreter, script) pairs whose server did not start


async def _zygote(interpreter, script):
    key = (interpreter, script)
    if key not in _ZYGOTES:
        _ZYGOTES[key] = asyncio.ensure_future(_Zygote.start(interpreter, script))
    try:
        return await asyncio.shield(_ZYGOTES[key])
    except OSError as e:
        if key not in _BROKEN:
            _BROKEN.add(key)
            print(f"agent programs of {script} start as new processes: {e}", file=sys.stderr)
        return None


def _program(runtime, argv):
    """(interpreter, script, arguments, variables to export) of a run of a script the runtime prepared, else None."""
    prepared = runtime._uv_interpreters
    if len(argv) >= 2 and prepared.get(argv[1]) == argv[0]:
        return argv[0], argv[1], argv[2:], {}
    if len(argv) >= 7 and argv[:2] == ["sh", "-c"] and argv[3] == _ACTIVATE_MARK and prepared.get(argv[6]) == argv[5]:
        venv, interpreter, script = argv[4], argv[5], argv[6]
        return interpreter, script, argv[7:], {"VIRTUAL_ENV": venv, "UV_RUN_RECURSION_DEPTH": "1"}
    return None


def _activated(env, venv_vars):
    """The variables ``prepare_uv_script``'s activation line exports, applied to ``env``."""
    if not venv_vars:
        return env
    home = env.get("HOME", "")
    local_bin = f"{home}/.local/bin"
    return {**env, **venv_vars, "PATH": f"{venv_vars['VIRTUAL_ENV']}/bin:{local_bin}:{env.get('PATH', '')}",
            "UV_INSTALL_DIR": local_bin}


def install():
    """Route the local runtime's runs of prepared scripts through fork servers (idempotent)."""
    from verifiers.v1.runtimes.base import ProgramResult
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    if getattr(SubprocessRuntime, "_workbench_forks", False):
        return
    shared_tls.share()  # verifiers starts httpx clients per episode too
    own_run_program = SubprocessRuntime.run_program

    async def run_program(self, argv, env):
        program = _program(self, list(argv))
        zygote = await _zygote(program[0], program[1]) if program is not None else None
        if zygote is None:
            return await own_run_program(self, argv, env)
        interpreter, script, args, venv_vars = program
        # the environment SubprocessRuntime.run gives a process: this one's, less any API key, and the run's own
        full_env = {k: v for k, v in os.environ.items() if "API_KEY" not in k.upper()}
        full_env.update(self.process_env(env))
        code, out, err = await zygote.run([script, *args], _activated(full_env, venv_vars), self.workdir)
        return ProgramResult(exit_code=code, stdout=out, stderr=err)

    SubprocessRuntime.run_program = run_program
    SubprocessRuntime._workbench_forks = True
