"""Plain helpers shared by the test suite (fixtures live in ``conftest.py``).

Everything here drives the real product: the ``workbench`` console script as a subprocess, the mock
OpenAI server as a subprocess on 127.0.0.1, and the SQLite store file read back with ``sqlite3``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIR = REPO / "envs"

#: Generous: the suite must pass on a loaded 2-core machine.
CLI_TIMEOUT = 120.0
MOCK_START_TIMEOUT = 60.0


# -- the CLI ------------------------------------------------------------------------------------
def workbench_argv() -> list[str]:
    """How to start the ``workbench`` command from this interpreter's environment."""
    exe = Path(sys.executable).with_name("workbench")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("workbench")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from workbench.cli import main; sys.exit(main())"]


def cli_environment(home: Path, db: Path | None = None, **extra: str) -> dict[str, str]:
    """A clean environment for a CLI subprocess: its own XDG dirs and store, no keys, no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKBENCH_", "OPENAI_"))}
    env.update(
        XDG_DATA_HOME=str(home / "xdg-data"),
        XDG_CONFIG_HOME=str(home / "xdg-config"),
        XDG_CACHE_HOME=str(home / "xdg-cache"),
        PYTHON_KEYRING_BACKEND="keyring.backends.null.Keyring",
        NO_COLOR="1",
        TERM="dumb",
        COLUMNS="200",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if db is not None:
        env["WORKBENCH_DB"] = str(db)
    env.update(extra)
    return env


class CliResult(NamedTuple):
    rc: int
    stdout: str
    stderr: str


def run_workbench(args: Any, env: dict[str, str], *, timeout: float = CLI_TIMEOUT,
                  cwd: Path | None = None) -> CliResult:
    p = subprocess.run([*workbench_argv(), *(str(a) for a in args)], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=timeout)
    return CliResult(p.returncode, p.stdout, p.stderr)


def last_json(stdout: str) -> Any:
    """The JSON object on the last non-empty line of stdout (the ``--json`` contract)."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines, "stdout is empty; expected a JSON line"
    return json.loads(lines[-1])


def stderr_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip()]


def assert_user_error(res: CliResult, *fragments: str) -> str:
    """Non-zero exit, exactly one clear line on stderr, no traceback; returns that line."""
    lines = stderr_lines(res.stderr)
    assert res.rc != 0, f"expected a non-zero exit; stdout={res.stdout!r} stderr={res.stderr!r}"
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout, res.stderr
    assert len(lines) == 1, f"expected exactly one line on stderr, got {len(lines)}:\n{res.stderr}"
    line = lines[0]
    for frag in fragments:
        assert frag.lower() in line.lower(), f"{frag!r} not in the error line {line!r}"
    return line


# -- the mock model server ----------------------------------------------------------------------
def _readline(stream: Any, timeout: float) -> str:
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    t.start()
    t.join(timeout)
    return box[0].decode() if box and isinstance(box[0], bytes) else (box[0] if box else "")


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """End a server the test started: SIGTERM, then SIGKILL if it has not exited 15 s later."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)


class MockServer:
    """``python -m workbench.testing.mock_openai`` (or another mock ``module``, e.g. ``mock_anthropic``) as a
    subprocess on a free port of 127.0.0.1."""

    def __init__(self, args: list[str], log_path: Path, module: str = "workbench.testing.mock_openai") -> None:
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", "0", *args],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, cwd=REPO)
        line = _readline(self.proc.stdout, MOCK_START_TIMEOUT)
        if not line.startswith("READY"):
            self.stop()
            raise RuntimeError(f"mock server {args} did not start: {line!r}; log: {log_path.read_text()[-2000:]}")
        self.port = int(line.split()[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.root}/v1"

    def requests(self) -> int:
        """How many chat requests the server has received."""
        with urllib.request.urlopen(f"{self.root}/stats", timeout=30) as resp:
            return int(json.loads(resp.read())["requests"])

    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies of the chat requests the server received, oldest first (not in ``instant`` mode)."""
        with urllib.request.urlopen(f"{self.root}/requests", timeout=30) as resp:
            return list(json.loads(resp.read())["requests"])

    def release(self) -> None:
        """Let the requests a ``--hold`` server keeps waiting (and every later one) through."""
        req = urllib.request.Request(f"{self.root}/release", data=b"", method="POST")
        with urllib.request.urlopen(req, timeout=30) as resp:
            resp.read()

    def stop(self) -> None:
        stop_process(self.proc)
        if self.proc.stdout:
            self.proc.stdout.close()
        self._log.close()


def mock_args(mode: str = "instant", *flags: str, script: list[Any] | None = None, **opts: Any) -> list[str]:
    """``mock_args("script", script=[...], fail_first=3)`` -> the mock's command-line arguments."""
    args = ["--mode", mode]
    if script is not None:
        args += ["--script", json.dumps(script)]
    for k, v in opts.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return [*args, *flags]


# -- environment files --------------------------------------------------------------------------
#: A multi-turn environment whose user says "go on" (two turns; reward: the answer "on" in the completion),
#: for the checks that every turn's prompt tokens extend the last (validate's token check).
CHAT_ENV = '''
    import workbench as wb
    class Chat(wb.MultiTurn):
        async def respond(self, messages, state):
            return [{"role": "user", "content": "go on"}]
    def load_environment():
        rubric = wb.Rubric()
        @rubric.reward
        def replied(completion: str, answer: str) -> float:
            return float(answer in completion)
        rows = [{"prompt": f"story {i}", "answer": "on"} for i in range(3)]
        return wb.Environment(name="chat", tasks=wb.TaskSet.from_records(rows), harness=Chat(max_turns=2),
                              rubric=rubric)
    '''

def write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def agent_script(tmp_path: Path, name: str, code: str) -> Path:
    """An agent program's file (for ``wb.Program``), dedented, in a project folder others may read, as usual
    (pytest's own folders are 0700)."""
    folder = tmp_path / "agents"
    folder.mkdir(mode=0o755, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(code).lstrip("\n"))
    return path


#: A small single-turn environment the arithmetic mock answers (correctly about 70% of the time).
#: Rewards: ``correct`` (weight 1), group reward ``bonus`` (weight 0.5, 1.0 for sample 0 only);
#: metric ``words``.
ADDER_ENV = '''
import re

import workbench as wb


def load_environment(n: int = 20, group_bonus: bool = True) -> wb.Environment:
    rows = [{"prompt": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1), "info": {"i": i}} for i in range(n)]
    rubric = wb.Rubric()

    @rubric.reward(weight=1.0)
    def correct(completion: str, answer: str) -> float:
        nums = re.findall(r"-?[0-9]+", completion)
        return float(bool(nums) and nums[-1] == answer)

    @rubric.metric
    def words(completion: str) -> float:
        return float(len(completion.split()))

    if group_bonus:
        @rubric.group_reward(weight=0.5)
        def bonus(completions: list[str]) -> list[float]:
            return [1.0 if i == 0 else 0.0 for i in range(len(completions))]

    return wb.Environment(
        name="adder",
        tasks=wb.TaskSet.from_records(rows, name="adder"),
        harness=wb.SingleTurn(system_prompt="Answer with a number."),
        rubric=rubric,
        sampling=wb.Sampling(max_tokens=16, temperature=0.0),
    )
'''


def adder_correct(completion: str, answer: str) -> float:
    """The ``correct`` reward of ADDER_ENV, recomputed independently from a stored completion."""
    import re

    nums = re.findall(r"-?[0-9]+", completion)
    return float(bool(nums) and nums[-1] == answer)


# -- the store ----------------------------------------------------------------------------------
def ro_connect(path: Path) -> sqlite3.Connection:
    """A read-only connection (never changes the file, safe while a writer is running)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


def query(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    conn = ro_connect(path)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def count_rollouts(path: Path) -> int:
    """Committed rollouts in the store, or 0 while the file or its tables do not exist yet."""
    if not path.exists():
        return 0
    try:
        return int(query(path, "SELECT COUNT(*) FROM rollout")[0][0])
    except sqlite3.OperationalError:  # no such table yet, or the file is still being created
        return 0


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.05,
             proc: subprocess.Popen[Any] | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail clearly on timeout or early exit."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process exited (rc {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def copy_store(src: Path, dst: Path) -> Path:
    """Copy a store file with its WAL sidecars (if any)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        s = Path(str(src) + suffix)
        if s.exists():
            shutil.copyfile(s, Path(str(dst) + suffix))
    return dst


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """``chattr +i`` on a store and its WAL files for the block (needs root and a file system with the
    flag; the test skips, saying so, where the machine has neither)."""
    import pytest

    if os.geteuid() != 0 or not shutil.which("chattr"):
        pytest.skip("the immutable flag needs root and chattr, which this machine lacks")
    sqlite3.connect(path).execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    files = [path, *path.parent.glob(path.name + "-*")]
    for f in files:
        p = subprocess.run(["chattr", "+i", str(f)], capture_output=True, text=True)
        if p.returncode != 0 and f == path:
            pytest.skip(f"this file system does not take the immutable flag ({p.stderr.strip()})")
    try:
        yield
    finally:
        for f in files:
            subprocess.run(["chattr", "-i", str(f)], capture_output=True)
