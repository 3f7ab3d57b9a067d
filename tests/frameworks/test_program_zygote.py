"""The fork server that starts agent programs from a warm interpreter (workbench/frameworks/program_zygote.py and
program_runs.py, which run in a framework's interpreter): a run of a script through it gives what a fresh
``python SCRIPT ARGS`` gives, with the same folder and environment. Real processes: the server is this
interpreter running the file, as a framework worker starts it."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers import REPO

FRAMEWORKS = REPO / "workbench" / "frameworks"

#: A script that reports what it sees; its first argument picks how it ends.
SCRIPT = textwrap.dedent("""
    import json, os, signal, sys
    seen = {"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "name": __name__, "file": __file__,
            "path0": sys.path[0], "csv_loaded": "csv" in sys.modules, "pgid_is_pid": os.getpgid(0) == os.getpid()}
    how = sys.argv[1]
    print(json.dumps(seen), flush=True)
    print("to stderr", file=sys.stderr)
    if how == "import":
        import csv  # a library module the server has not imported
    elif how == "raise":
        raise ValueError("the program failed")
    elif how == "exit-text":
        sys.exit("a message to stderr")
    elif how == "exit-3":
        sys.exit(3)
    elif how == "signal":
        os.kill(os.getpid(), signal.SIGTERM)
    elif how == "hang":
        open(sys.argv[2], "w").close()
        signal.pause()
    if __name__ == "__main__":
        print("main ran")
""")


def _load_runs() -> ModuleType:
    sys.path.insert(0, str(FRAMEWORKS))  # program_runs imports shared_tls beside it, as in a worker
    try:
        spec = importlib.util.spec_from_file_location("program_runs_under_test", FRAMEWORKS / "program_runs.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(FRAMEWORKS))


@pytest.fixture(scope="module")
def runs() -> ModuleType:
    return _load_runs()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "scripts" / "program.py"
    path.parent.mkdir()
    path.write_text(SCRIPT)
    (tmp_path / "work").mkdir()
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    # LC_ALL set: a fresh interpreter adds nothing to it (no locale coercion), so the two compare exactly
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "ONLY_HERE": "yes", "PYTHONDONTWRITEBYTECODE": "1",
            "LC_ALL": "C.UTF-8"}


def _fresh(script: Path, args: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, str(script), *args], env=env, cwd=cwd, capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


async def _forked(runs: ModuleType, script: Path, batches: list[list[str]], env: dict[str, str],
                  cwd: Path) -> list[list[tuple[int, str, str]]]:
    zygote = await runs._Zygote.start(sys.executable, str(script))
    try:
        return [await asyncio.gather(*(zygote.run([str(script), *args], env, cwd) for args in batch))
                for batch in batches]
    finally:
        await zygote.close()


def _seen(stdout: str) -> dict[str, Any]:
    return json.loads(stdout.splitlines()[0])


#: how the script ends -> (exit code, what stderr ends with)
ENDINGS = {
    "ok": (0, "to stderr\n"),
    "raise": (1, "ValueError: the program failed\n"),
    "exit-text": (1, "a message to stderr\n"),
    "exit-3": (3, "to stderr\n"),
    "signal": (-15, "to stderr\n"),
}


def test_a_forked_run_sees_and_ends_as_a_fresh_process_does(runs: ModuleType, script: Path, tmp_path: Path) -> None:
    env, cwd = _env(tmp_path), tmp_path / "work"
    (forked,) = asyncio.run(_forked(runs, script, [[[how, "x"] for how in ENDINGS]], env, cwd))
    for how, (code, out, err) in zip(ENDINGS, forked, strict=True):
        fresh_code, fresh_out, fresh_err = _fresh(script, [how, "x"], env, cwd)
        assert (code, fresh_code) == (ENDINGS[how][0], ENDINGS[how][0]), how
        assert err.endswith(ENDINGS[how][1]) and fresh_err.endswith(ENDINGS[how][1]), (how, err)
        mine, theirs = _seen(out), _seen(fresh_out)
        assert mine["pgid_is_pid"], how  # its own process group, which the runtime kills whole
        for key in ("argv", "cwd", "env", "name", "file", "path0"):
            assert mine[key] == theirs[key], (how, key)
        assert out.endswith("main ran\n") == fresh_out.endswith("main ran\n")


def test_modules_a_run_imported_are_loaded_for_the_runs_after_it(runs: ModuleType, script: Path,
                                                                 tmp_path: Path) -> None:
    env, cwd = _env(tmp_path), tmp_path / "work"
    (first,), (second,) = asyncio.run(_forked(runs, script, [[["import"]], [["ok"]]], env, cwd))
    assert not _seen(first[1])["csv_loaded"]
    assert _seen(second[1])["csv_loaded"]
    assert not _seen(_fresh(script, ["ok"], env, cwd)[1])["csv_loaded"]


@pytest.fixture(params=["here", "confined"])
def where(request: pytest.FixtureRequest, runs: ModuleType, tmp_path: Path) -> Iterator[str]:
    """Where the fork server runs: as a process of this machine, or confined as ``wb.Local()`` confines (its
    own PID namespace, where the pid it reports means another process than here: it kills the run itself)."""
    if request.param == "confined":
        import workbench as wb

        venv = Path(sys.executable).parent.parent
        prefix = wb.Local().confinement(read_only=[venv, Path(sys.base_prefix), FRAMEWORKS, tmp_path / "scripts"],
                                        writable=[tmp_path / "work"], tmp=tmp_path)
        runs.confined_runs._PREFIX[:] = prefix
    yield request.param
    runs.confined_runs._PREFIX.clear()


def test_a_cancelled_run_is_killed_with_its_process_group(runs: ModuleType, script: Path, tmp_path: Path,
                                                          where: str) -> None:
    env, cwd, started = _env(tmp_path), tmp_path / "work", tmp_path / "work" / "started"

    async def cancel_when_started() -> int:
        zygote = await runs._Zygote.start(sys.executable, str(script))
        task = asyncio.ensure_future(zygote.run([str(script), "hang", str(started)], env, cwd))
        while not started.exists():
            await asyncio.sleep(0.01)
        (pid,) = [int(p) for p in os.listdir("/proc") if p.isdigit() and _runs_script(int(p), script)]
        assert runs.confined_runs.confined() == (where == "confined")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await zygote.close()
        return pid

    pid = asyncio.run(cancel_when_started())
    assert not Path(f"/proc/{pid}").exists() or _zombie_or_gone(pid)


def _runs_script(pid: int, script: Path) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return b"program_zygote.py" in cmd[1] and Path(os.readlink(f"/proc/{pid}/cwd")).name == "work" \
            and os.getpgid(pid) == pid
    except (OSError, IndexError):
        return False


def _zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_server_that_cannot_start_is_one_clear_error(runs: ModuleType, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import a_module_that_is_not_there\n")

    async def start() -> None:
        await runs._Zygote.start(sys.executable, str(broken))

    with pytest.raises(OSError, match=r"the fork server of .*broken.py did not start \(exit 1\)"):
        asyncio.run(start())


SHARE_CHECK = textwrap.dedent("""
    import os, ssl, sys
    sys.path.insert(0, sys.argv[1])
    import httpx, shared_tls
    shared_tls.share()
    shared_tls.share()  # idempotent
    ctx = lambda client: client._transport._pool._ssl_context
    a, b = httpx.AsyncClient(), httpx.Client()
    own = httpx.AsyncClient(verify=False)
    mine = ssl.create_default_context()
    given = httpx.AsyncClient(verify=mine)
    os.environ["SSL_CERT_FILE"] = __import__("certifi").where()
    other = httpx.AsyncClient()
    print(ctx(a) is ctx(b), ctx(own) is not ctx(a), ctx(given) is mine, ctx(other) is not ctx(a),
          ctx(a).verify_mode == ssl.CERT_REQUIRED and ctx(a).check_hostname)
""")


def test_clients_asking_for_the_default_tls_context_share_one_and_others_keep_theirs() -> None:
    p = subprocess.run([sys.executable, "-c", SHARE_CHECK, str(FRAMEWORKS)], capture_output=True, text=True,
                       timeout=60)
    assert p.stdout.split() == ["True"] * 5, p.stderr
