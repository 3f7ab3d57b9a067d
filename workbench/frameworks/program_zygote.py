"""A fork server for one agent program: the interpreter a harness prepared for a PEP 723 script imports the
script's dependencies once, then forks a child per run that executes the script itself as ``__main__``.
Standard library only: it runs in that script's own interpreter, never Workbench's.

    INTERPRETER program_zygote.py SCRIPT FD

``FD`` is one end of a ``SOCK_SEQPACKET`` socket pair. Each request is one packet, ``{"id": N}``, carrying four
file descriptors: a file holding ``{"argv", "env", "cwd"}`` and the run's stdin, stdout and stderr. The child
starts its own session (its process group is its pid), takes the three streams, the folder, exactly that
environment and ``sys.argv = argv``, and runs the script. Answers are packets too: ``{"id", "pid"}`` once it
runs, ``{"id", "exit": CODE}`` when it ended (a negative code is the signal that ended it), ``{"id", "error"}``
when it could not start. ``{"kill": N}`` (no descriptors) ends run ``N``'s process group, for a caller
that cannot (the server runs in a PID namespace of its own). ``{"ready": true}`` is the first packet, after
the dependencies are imported; the server ends when the socket closes.

What a run sees is what a fresh ``INTERPRETER SCRIPT ARGS`` sees, except that the script is compiled once, its
httpx clients that verify with the defaults share one TLS context (``shared_tls.py``), and
the library modules it imports were imported before the fork (with the server's environment, not the run's):
those of its top level at the start, and those a run imported later (the installed packages' and the standard
library's, never the script's folder's), which each ended run reports back, for the runs after it.
"""

import importlib
import json
import os
import select
import signal
import socket
import sys
import sysconfig
import tempfile
import traceback

_PACKET = 65536
#: Where the library modules a run may report live (the interpreter's standard library and packages).
_LIBRARY = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib",
                                                                                "platlib")})


def _send(sock, message):
    sock.send(json.dumps(message).encode())


def _run_script(code, script):
    """Execute the compiled script as ``python SCRIPT`` would, as ``__main__``."""
    main = type(sys)("__main__")
    main.__file__ = script
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _library_modules(names):
    """Those of the modules ``names`` that are the interpreter's own or its installed packages'."""
    found = []
    for name in names:
        path = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(path, str) and os.path.realpath(path).startswith(_LIBRARY):
            found.append(name)
    return found


def _child(sock, script, code_obj, report, fds):
    """The forked run: never returns."""
    code = 1
    known = set(sys.modules)
    try:
        sock.close()
        os.setsid()
        request_fd, streams = fds[0], fds[1:]
        with os.fdopen(request_fd, "rb") as f:
            request = json.loads(f.read())
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        code = 0
        _run_script(code_obj, script)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - a run ends as the interpreter would end it
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream has nothing left to write
                pass
        try:
            learned = _library_modules(set(sys.modules) - known)
            with open(os.path.join(report, f"{os.getpid()}.json"), "w") as f:
                json.dump(learned, f)
        except Exception:  # noqa: BLE001 - what a run imported is a hint; its result does not depend on it
            pass
        os._exit(code)


def _learn(report, pid):
    """Import, here, the library modules the ended run ``pid`` imported, so later runs start with them."""
    path = os.path.join(report, f"{pid}.json")
    try:
        with open(path) as f:
            names = json.load(f)
        os.unlink(path)
    except (OSError, ValueError):
        return
    for name in names:
        if name not in sys.modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module that needs the run's state stays the run's to import
                pass


def serve(sock, script, code_obj, report):
    runs: dict = {}  # pidfd -> (request id, pid)
    while True:
        readable, _, _ = select.select([sock, *runs], [], [])
        for pidfd in [r for r in readable if r is not sock]:
            rid, pid = runs.pop(pidfd)
            os.close(pidfd)
            _, status = os.waitpid(pid, 0)
            _send(sock, {"id": rid, "exit": os.waitstatus_to_exitcode(status)})
            _learn(report, pid)
        if sock not in readable:
            continue
        data, fds, _, _ = socket.recv_fds(sock, _PACKET, 4)
        if not data:
            return
        message = json.loads(data)
        if "kill" in message and not fds:  # a run given up: its whole group goes (its pid is this namespace's)
            for rid, pid in list(runs.values()):
                if rid == message["kill"]:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            continue
        rid = message["id"]
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            _send(sock, {"id": rid, "error": f"a request carries 4 descriptors, not {len(fds)}"})
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as e:
            _send(sock, {"id": rid, "error": f"fork: {e}"})
            pid = -1
        if pid == 0:
            _child(sock, script, code_obj, report, fds)
        for fd in fds:
            os.close(fd)
        if pid > 0:
            runs[os.pidfd_open(pid)] = (rid, pid)
            _send(sock, {"id": rid, "pid": pid})


def main():
    script, fd = sys.argv[1], int(sys.argv[2])
    sock = socket.socket(fileno=fd)
    import shared_tls  # type: ignore[import-not-found,unused-ignore]  # beside this file

    shared_tls.share()
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` has it, not this file's folder
    with open(script, "rb") as f:
        code_obj = compile(f.read(), script, "exec")
    # the script's top level (its imports and definitions) runs once here; its `__main__` block does not
    exec(code_obj, {"__name__": "__program_zygote__", "__file__": script, "__builtins__": __builtins__})
    with tempfile.TemporaryDirectory(prefix="wb-zygote-") as report:
        _send(sock, {"ready": True})
        serve(sock, script, code_obj, report)


if __name__ == "__main__":
    main()
