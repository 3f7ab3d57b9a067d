"""Warm Python (``warm_python=True``, ``local_runtime/sandbox/warm.py``) on both runtimes, for real.

A warm command must be indistinguishable from a fresh ``python3`` in everything a program can observe
(arguments, paths, flags, environment, stdio, signals, limits, exit codes, tracebacks, shutdown), except
that the zygote's modules are already imported: each test compares a warm sandbox with a cold one.
Whatever the zygote cannot run the same way runs for real. And a command finds nothing of any other
command in its memory.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from workbench_local.sandbox.warm import os_threads, plan, sh_words

import workbench as wb
from tests.sandbox.conftest import hand_back, make_runtime

PROBE = r'''
import json, os, resource, signal, sys
state = {
    "argv": sys.argv, "orig_argv": getattr(sys, "orig_argv", None), "path": sys.path,
    "executable": sys.executable, "env": dict(os.environ), "cwd": os.getcwd(), "name": __name__,
    "file": globals().get("__file__"),
    "flags": {k: getattr(sys.flags, k) for k in ("isolated", "ignore_environment", "no_user_site", "no_site",
                                                  "dont_write_bytecode", "safe_path", "quiet", "optimize")},
    "dont_write_bytecode": sys.dont_write_bytecode,
    "stdio": [[s.encoding, s.errors, s.line_buffering, s.write_through, s.mode, getattr(s.buffer, "raw", s.buffer).name]
              for s in (sys.stdin, sys.stdout, sys.stderr)],
    "stdout_unbuffered": not hasattr(sys.stdout.buffer, "raw"),
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM,
                                                   signal.SIGCHLD, signal.SIGHUP)],
    "uid": [os.getuid(), os.geteuid(), os.getgid()], "session_leader": os.getsid(0) == os.getpid(),
    "limits": [resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_NPROC, resource.RLIMIT_CPU,
                                               resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE)],
    "site_builtins": hasattr(__import__("builtins"), "exit"),
    "main": sorted(k for k in vars(sys.modules["__main__"]) if k.startswith("__")),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "comm": open("/proc/self/comm").read().strip(),
    "dumpable": [l for l in open("/proc/self/status") if l.startswith(("TracerPid", "NoNewPrivs"))],
}
state["warm"] = "unittest" in sys.modules
print(json.dumps(state))
'''

INVOCATIONS: list[str | list[str]] = [
    "python3 probe.py a 'b c'",
    "python3 -m probe x",
    "python3 -c \"exec(open('probe.py').read())\" y",
    "python3 -I probe.py",
    "python3 -S -B -u probe.py",
    "python3 -E -s -m probe",
    "python3 -IS -c \"exec(open('probe.py').read())\"",
    ["python3", "probe.py", "argv", "list"],
]

ENDINGS = [
    "python3 -c 'import sys; sys.exit(3)'",
    "python3 -c 'import sys; sys.exit(\"bye\")'",
    "python3 -c 'raise ValueError(\"x\")'",
    "python3 -c 'x = ('",
    "python3 broken.py",
    "python3 -c 'def f(): raise KeyError(1)' -c 'f()'",
    "python3 -c 'import os; os.kill(os.getpid(), 2)'",
    "python3 -c 'import sys; print(sys.stdin.read().upper())'",
    "python3 -m no_such_module",
    "python3 missing.py",
    "python3 -m unittest discover -s tests",
    "python3 shutdown.py",
]

SHUTDOWN = '''
import atexit, threading, time
class Noisy:
    def __del__(self):
        print("finalized", flush=True)
noisy = Noisy()
left_open = open("left-open.txt", "w")
left_open.write("kept")
atexit.register(lambda: print("atexit", flush=True))
def late():
    time.sleep(0.2)
    print("thread", flush=True)
threading.Thread(target=late).start()
print("main", flush=True)
'''

TESTS = {"tests/__init__.py": "", "tests/test_x.py": "import unittest\nclass T(unittest.TestCase):\n"
         "    def test_ok(self):\n        self.assertEqual(1, 1)\n    def test_bad(self):\n        self.assertEqual(1, 2)\n"}


async def _warm_up(sb: wb.Sandbox) -> None:
    """Until the zygote is ready (it starts with the sandbox's agent, in the background)."""
    await sb.exec("true")
    for _ in range(100):
        r = await sb.exec(["python3", "-c", "import sys; print('unittest' in sys.modules)"])
        if r.stdout.strip() == "True":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the warm-Python zygote never became ready")


@pytest.fixture
async def pair(runtime_kind: str) -> AsyncIterator[tuple[wb.Sandbox, wb.Sandbox]]:
    """A warm and a cold sandbox of the same runtime, with the same files."""
    files = {"probe.py": PROBE, "shutdown.py": SHUTDOWN, "broken.py": "import os\nprint(\n", **TESTS}
    async with make_runtime(runtime_kind, warm_python=True).sandbox() as warm, \
            make_runtime(runtime_kind).sandbox() as cold:
        for sb in (warm, cold):
            for path, text in files.items():
                await sb.write_file(path, text)
        await _warm_up(warm)
        yield warm, cold


def _probe(text: str) -> dict[str, Any]:
    assert text.strip(), "the probe printed nothing"
    return dict(json.loads(text))


async def test_a_warm_command_sees_what_a_fresh_interpreter_sees(pair: tuple[wb.Sandbox, wb.Sandbox]) -> None:
    warm, cold = pair
    for cmd in INVOCATIONS:
        w, c = await warm.exec(cmd), await cold.exec(cmd)
        assert w.ok and c.ok, (cmd, w, c)
        ws, cs = _probe(w.stdout), _probe(c.stdout)
        assert ws.pop("warm") is True and cs.pop("warm") is False, cmd
        assert ws == cs, (cmd, {k: (ws[k], cs.get(k)) for k in ws if ws[k] != cs.get(k)})


async def test_exit_codes_output_tracebacks_and_shutdown_match(pair: tuple[wb.Sandbox, wb.Sandbox]) -> None:
    warm, cold = pair
    for cmd in ENDINGS:
        w = await warm.exec(cmd, stdin="some input\n")
        c = await cold.exec(cmd, stdin="some input\n")
        norm = [(r.exit_code, r.stdout, r.stderr.replace("0.00", "0.0")) for r in (w, c)]
        if "unittest" in cmd:  # "Ran 2 tests in 0.001s": the time differs
            norm = [(code, out, "\n".join(x for x in err.splitlines() if not x.startswith("Ran ")))
                    for code, out, err in norm]
        assert norm[0] == norm[1], (cmd, w, c)
    r = await warm.exec("python3 shutdown.py; cat left-open.txt")
    assert r.stdout == "main\nthread\natexit\nfinalized\nkept", r
    assert (await warm.exec("python3 -c 'import sys; sys.exit(3)'")).exit_code == 3


async def test_what_it_cannot_run_the_same_runs_for_real(pair: tuple[wb.Sandbox, wb.Sandbox]) -> None:
    warm, _ = pair
    await warm.write_file("difflib.py", "print('the repository difflib')\n")  # unittest imports difflib
    cases: list[tuple[Any, dict[str, str] | None, str]] = [
        ("python3 probe.py && echo done", None, "done"),
        ("python3 probe.py", {"PYTHONPATH": "/tmp"}, ""),
        ("python3 -X dev probe.py", None, ""),
        ("FOO=1 python3 probe.py", None, ""),
        ("python3 probe.py $HOME", None, ""),
    ]
    for cmd, env, tail in cases:
        r = await warm.exec(cmd, env=env)
        assert r.ok, (cmd, r)
        first, _, rest = r.stdout.partition("\n")
        assert _probe(first)["warm"] is False, cmd
        assert rest.strip() == tail, (cmd, r)
    r = await warm.exec("python3 -c 'import difflib'")
    assert r.ok and r.stdout == "the repository difflib\n", r  # sys.path[0] shadows it, as it would
    assert (await warm.exec("python3 -m probe")).ok  # a module run from the same directory: real, and fine
    r = await warm.exec("python3 -I -c 'import difflib, sys; print(difflib.__file__, \"unittest\" in sys.modules)'")
    assert r.ok and r.stdout.endswith("/difflib.py True\n") and "/work" not in r.stdout, r  # -I: not shadowed


async def test_no_command_finds_another_commands_data_in_its_memory(runtime_kind: str) -> None:
    """What earlier commands received (stdin, environment, arguments) passed through the agent, never the
    zygote: a warm command that reads all of its own memory finds none of it."""
    marks = ["WB" + "SECRET" + secrets.token_hex(12) for _ in range(4)]
    scan = r'''
import re, sys
pat = re.compile(("WB" + "SECRET").encode() + rb"[0-9a-f]{24}")
control = ("WB" + "SECRET").encode() + b"ab" * 12
found = set()
for line in open("/proc/self/maps"):
    addr, perms = line.split()[:2]
    if "r" not in perms or "[v" in line:
        continue
    lo, hi = (int(x, 16) for x in addr.split("-"))
    try:
        with open("/proc/self/mem", "rb", 0) as mem:
            mem.seek(lo)
            found.update(pat.findall(mem.read(hi - lo)))
    except (OSError, OverflowError, ValueError):
        continue
print(control in found, sorted(m.decode() for m in found if m != control))
'''
    async with make_runtime(runtime_kind, warm_python=True).sandbox() as sb:
        await _warm_up(sb)
        assert (await sb.exec("cat > /dev/null", stdin=marks[0])).ok
        assert (await sb.exec(["python3", "-c", "import sys; sys.stdin.read()"], stdin=marks[1])).ok
        assert (await sb.exec(["python3", "-c", "pass"], env={"WB_TOKEN": marks[2]})).ok
        assert (await sb.exec(["python3", "-c", "pass", marks[3]])).ok
        r = await sb.exec(["python3", "-c", scan])
        assert r.ok and r.stdout == "True []\n", r  # the scanner works (it finds its own control) and nothing else


async def test_the_zygote_survives_rollouts_or_comes_back(runtime_kind: str) -> None:
    """Across a pool's reset the next rollout's commands are warm again, and nothing is left behind."""
    async with make_runtime(runtime_kind, pool_size=1, warm_python=True).pool(run_id="warmtest", size=1) as pool:
        for i in range(2):
            sb = await pool.acquire(f"warmtest.{i}.0")
            await _warm_up(sb)
            r = await sb.exec("python3 -c 'import time; time.sleep(30)' > /dev/null 2>&1 & echo started")
            assert r.ok, r
            await hand_back(sb, pool)
        sb = await pool.acquire("warmtest.2.0")
        r = await sb.exec("ps -eo args | grep -c '[t]ime.sleep' || true")
        assert r.stdout.strip() == "0", r
        await sb.close()


async def test_a_zygote_killed_from_inside_only_costs_speed(runtime_kind: str) -> None:
    async with make_runtime(runtime_kind, warm_python=True).sandbox() as sb:
        await _warm_up(sb)
        r = await sb.exec("for p in /proc/[0-9]*; do grep -q 'wb-w[a]rm' $p/cmdline 2>/dev/null && kill -9 ${p#/proc/} "
                          "&& echo killed; done; true")
        assert r.ok, r
        if runtime_kind == "docker":
            assert "killed" not in r.stdout, r  # the zygote runs as root there: out of the commands' reach
        else:
            assert r.stdout == "killed\n", r  # the sandbox user's own process under bubblewrap: killed
        for _ in range(3):
            r = await sb.exec(["python3", "-c", "print(6 * 7)"])
            assert r.ok and r.stdout == "42\n", r


async def test_a_warm_infinite_loop_is_killed_at_its_timeout_with_its_output(runtime_kind: str) -> None:
    async with make_runtime(runtime_kind, warm_python=True).sandbox() as sb:
        await _warm_up(sb)
        r = await sb.exec(["python3", "-c", "print('so far', flush=True)\nwhile True: pass"], timeout=1.0)
        assert r.timed_out and r.exit_code == 124 and r.stdout == "so far\n", r


def test_sh_words_take_only_a_simple_command() -> None:
    assert sh_words("python3 -m unittest discover -s tests") == ["python3", "-m", "unittest", "discover", "-s", "tests"]
    assert sh_words("python3 -c 'print(\"a; b\")'  x") == ["python3", "-c", 'print("a; b")', "x"]
    assert sh_words('python3 -c "x = [1]"') == ["python3", "-c", "x = [1]"]
    assert sh_words("python3 ''") == ["python3", ""]
    for line in ("python3 a.py | cat", "python3 a.py > out", "python3 $X", 'python3 "$X"', "python3 `x`", "python3 *.py",
                 "python3 a.py; ls", "python3 a.py &", "python3 'unclosed", "python3 a\\ b", "python3 ~/x.py",
                 "python3 a.py\nls", "(python3 a.py)", "python3 a.py # c"):
        assert sh_words(line) is None, line


def test_plan_falls_back_on_what_it_cannot_honour(tmp_path: Any) -> None:
    exe = os.path.realpath(sys.executable)
    zyg = {"exe": exe, "locale": "C.UTF-8", "tops": {"unittest", "difflib"}, "shell": "dash"}
    env = {"PATH": os.path.dirname(exe), "LC_ALL": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    name = os.path.basename(exe)
    (tmp_path / "a.py").write_text("")
    ok = plan([name, "-u", "a.py", "x"], env, str(tmp_path), zyg)
    assert ok is not None and ok["mode"] == "s" and ok["rest"] == ["x"] and ok["path0"] == str(tmp_path)
    assert plan(["/bin/sh", "-c", f"{name} -Im unittest -v"], env, str(tmp_path), zyg)["path0"] is None
    for argv, e in (([name, "-X", "dev", "a.py"], env), ([name, "-W", "error", "a.py"], env), ([name], env),
                    ([name, "-"], env), ([name, "missing.py"], env), ([name, "-c"], env),
                    ([name, "a.py"], {**env, "PYTHONPATH": "/x"}), ([name, "a.py"], {**env, "LC_ALL": "C"}),
                    (["sh", "-c", "A=1 " + name + " a.py"], env), (["/bin/false", "a.py"], env)):
        assert plan(argv, e, str(tmp_path), zyg) is None, (argv, e)
    assert plan(["/bin/sh", "-c", f"{name} a.py"], env, str(tmp_path), {**zyg, "shell": "zsh"}) is None
    assert plan([name, "-I", "a.py"], {**env, "PYTHONPATH": "/x"}, str(tmp_path), zyg) is not None  # -I ignores it
    (tmp_path / "difflib.py").write_text("")
    assert plan([name, "a.py"], env, str(tmp_path), zyg) is None  # would shadow a module the zygote imported
    assert plan([name, "-I", "a.py"], env, str(tmp_path), zyg) is not None  # -I: the script's folder is not searched


ZYGOTE_PID = "for p in /proc/[0-9]*; do grep -q 'wb-w[a]rm' $p/cmdline 2>/dev/null && echo ${p#/proc/}; done; true"


async def test_a_zygote_changed_from_inside_is_replaced_before_the_next_rollout(runtime_kind: str) -> None:
    """A same-uid command can renice or stop the zygote (under bubblewrap; under Docker it runs as root,
    out of reach): the reset finds it changed and the next rollout's commands fork from a fresh one."""
    async with make_runtime(runtime_kind, pool_size=1, warm_python=True).pool(run_id="tamper", size=1) as pool:
        pids, nices = [], []
        for i, tamper in enumerate(("", "renice -n 7 -p {pid} >/dev/null 2>&1; true", "")):
            sb = await pool.acquire(f"tamper.{i}.0")
            await _warm_up(sb)
            pid = (await sb.exec(ZYGOTE_PID)).stdout.split()
            assert len(pid) == 1, pid
            pids.append(pid[0])
            r = await sb.exec(["python3", "-c", "import os, sys; print(os.nice(0), 'unittest' in sys.modules)"])
            nices.append(r.stdout.strip())
            if tamper:
                assert (await sb.exec(tamper.format(pid=pid[0]))).ok
            await hand_back(sb, pool)
        assert pids[0] == pids[1], pids  # kept across a clean reset
        assert (pids[1] != pids[2]) == (runtime_kind == "local"), pids
        assert nices == ["0 True"] * 3, nices


def test_warm_python_settings_are_checked_and_carried_by_runtime_swaps() -> None:
    from workbench.authoring.runtimes import swap_runtime
    from workbench.errors import ConfigError

    for bad in ("unittest", ["unit test"], [""], [3], {"unittest": 1}):
        with pytest.raises(ConfigError, match="warm_python"):
            wb.Local(warm_python=bad)  # type: ignore[arg-type]
    assert wb.Docker(warm_python=["json", "xml.etree.ElementTree"]).warm_python == ["json", "xml.etree.ElementTree"]
    assert swap_runtime("docker", wb.Local(warm_python=True)).warm_python is True  # --runtime keeps it
    assert swap_runtime("local", wb.Docker(warm_python=["json"])).warm_python == ["json"]


def test_the_thread_count_is_the_kernels() -> None:
    """The zygote's thread check counts the kernel's threads, so threads started outside Python count too."""
    import threading

    before = os_threads()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert os_threads() == before + 1
    finally:
        stop.set()
        t.join()


# Modules for the zygote to preload: one starts a thread on import (as a BLAS pool would), one does not.
THREADED_MODULE = ("import threading\n"
                   "_stop = threading.Event()\n"
                   "threading.Thread(target=_stop.wait, name='wb-preloaded', daemon=True).start()\n")
QUIET_MODULE = "VALUE = 42\n"


def _zygote_reports(tmp_path: Any, module: str) -> tuple[int, int]:
    """Start ``warm.py`` as the agent does (its program, then its configuration, on stdin; the socket on
    fd 3), but on an interpreter that finds ``module`` in ``tmp_path``; its ``R`` report: (ready, imported)."""
    import marshal
    import socket
    import subprocess

    from workbench_local.sandbox.channel import agent_source, warm_source
    from workbench_local.sandbox.warm import HEAD

    program = warm_source().encode()
    boot = (f"import os\nb=b''\nwhile len(b)<{len(program)}:\n c=os.read(0,{len(program)}-len(b))\n"
            " if not c:raise SystemExit(3)\n b+=c\nexec(compile(b,'wb-warm','exec'))")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    on_fd3 = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.execv(sys.executable, [sys.executable, '-S', '-c', sys.argv[2]])"
    proc = subprocess.Popen([sys.executable, "-c", on_fd3, str(theirs.fileno()), boot],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=[theirs.fileno()],
                            env={"PYTHONPATH": str(tmp_path), "LC_ALL": "C.UTF-8", "PATH": os.environ["PATH"]})
    theirs.close()
    try:
        assert proc.stdin is not None
        proc.stdin.write(program + marshal.dumps({"modules": [module], "agent": agent_source().decode()}, 2))
        proc.stdin.close()
        ours.settimeout(30)
        reports = [HEAD.unpack(ours.recv(HEAD.size)) for _ in range(2)]
        assert [kind for kind, _, _ in reports] == [b"A", b"R"], reports
        return reports[1][1], reports[1][2]
    finally:
        proc.kill()
        proc.wait()
        ours.close()


def test_a_zygote_whose_modules_started_threads_never_reports_ready(tmp_path: Any) -> None:
    (tmp_path / "wb_threaded_mod.py").write_text(THREADED_MODULE)
    (tmp_path / "wb_quiet_mod.py").write_text(QUIET_MODULE)
    assert _zygote_reports(tmp_path, "wb_quiet_mod") == (1, 7)  # its six own modules and ours: forkable
    assert _zygote_reports(tmp_path, "wb_threaded_mod") == (0, 7)  # imported, but a thread runs: not ready


FORK_PROBE = r'''
import json, os, sys
parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read()
print(json.dumps({"from_zygote": b"wb-warm" in parent, "preloaded": sorted(m for m in sys.modules if m.startswith("wb_")),
                  "argv": sys.argv[1:], "input": sys.stdin.read()}))
'''
# The zygote's pid, its thread count and its (main thread's) state; the grep finds its forked children too.
ZYGOTE_STATE = ("for p in /proc/[0-9]*; do grep -q 'wb-w[a]rm' $p/cmdline 2>/dev/null && "
                "echo ${p#/proc/} $(ls $p/task | wc -l) $(cut -d' ' -f3 $p/stat); done; true")


async def test_commands_start_the_usual_way_beside_a_zygote_with_threads(docker_client: Any, tmp_path: Any) -> None:
    """End to end: a preloaded module that starts a thread leaves the zygote unforkable, and every command
    runs as usual, from the agent (its parent is not the zygote, the module is not in it). The control: the
    same image and probe with a module that starts no thread are forked from the zygote.

    Docker only: the zygote runs ``python3 -I -S``, whose path under bubblewrap is the host's read-only
    ``/usr``, where a test cannot add a module; an image can have one (the host-side check of the zygote's
    refusal is the test above)."""
    (tmp_path / "wb_threaded_mod.py").write_text(THREADED_MODULE)
    (tmp_path / "wb_quiet_mod.py").write_text(QUIET_MODULE)
    (tmp_path / "Dockerfile").write_text(
        "FROM workbench-sandbox:2\nCOPY wb_threaded_mod.py wb_quiet_mod.py /opt/wbmods/\n"
        "RUN python3 -I -S -c \"import os, shutil; [shutil.copy('/opt/wbmods/' + n, os.path.dirname(os.__file__)) "
        "for n in os.listdir('/opt/wbmods')]\"\n")
    seen = {}
    for module in ("wb_quiet_mod", "wb_threaded_mod"):
        rt = wb.Docker(dockerfile="Dockerfile", warm_python=[module])
        async with rt.sandbox(env_dir=tmp_path) as sb:
            await sb.write_file("probe.py", FORK_PROBE)
            for _ in range(200):  # until the zygote has imported the module and waits on its socket
                state = (await sb.exec(ZYGOTE_STATE)).stdout.split()
                if state[:1] and state[1] == ("2" if module == "wb_threaded_mod" else "1") and state[2] == "S":
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"the zygote never settled: {state}")
            await sb.exec("true")  # one more round trip: the agent has read the zygote's report by now
            results = []
            for cmd in (["python3", "probe.py", "a b", "c"], "python3 probe.py a"):
                r = await sb.exec(cmd, stdin="in put")
                assert r.ok and r.stderr == "", (module, cmd, r)
                results.append(_probe(r.stdout))
            r = await sb.exec(["python3", "-c", "import sys; print('out'); sys.exit(3)"])
            assert (r.exit_code, r.stdout) == (3, "out\n"), (module, r)
            r = await sb.exec(["python3", "-c", "raise KeyError('boom')"])
            assert r.exit_code == 1 and r.stderr.rstrip().endswith("KeyError: 'boom'"), (module, r)
            seen[module] = results
    assert [x["argv"] for x in seen["wb_threaded_mod"]] == [["a b", "c"], ["a"]]
    assert all(x["input"] == "in put" for x in seen["wb_threaded_mod"])
    assert [(x["from_zygote"], x["preloaded"]) for x in seen["wb_quiet_mod"]] == [(True, ["wb_quiet_mod"])] * 2
    assert [(x["from_zygote"], x["preloaded"]) for x in seen["wb_threaded_mod"]] == [(False, [])] * 2
