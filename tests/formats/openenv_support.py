"""What the OpenEnv tests share: the OpenEnv framework environment (openenv-core 0.3.0, built once under
this machine's cache), the test environments' folders, and one of them served by openenv-core's own
server (``uvicorn server.app:app``) in a real subprocess on 127.0.0.1."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import stop_process
from workbench.errors import EnvLoadError

ENVS = Path(__file__).resolve().parent / "openenv_envs"
OPENENV_CORE = "openenv-core==0.3.0"
START_TIMEOUT_S = 180.0
_RUNNING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")


def openenv_python() -> Path:
    """The framework environment's interpreter; the test skips, saying why, when it cannot be built here
    (its first build downloads openenv-core and its dependencies)."""
    from workbench.frameworks.venvs import FrameworkEnv

    try:
        return FrameworkEnv("openenv", (OPENENV_CORE,)).ensure()
    except EnvLoadError as e:
        pytest.skip(f"the OpenEnv framework environment cannot be built on this machine: {e}")


class EnvServer:
    """``uvicorn server.app:app`` of a test environment's folder, on a free port of 127.0.0.1."""

    def __init__(self, python: Path, folder: Path, log: Path, **env: str) -> None:
        self.log_path = log
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        self.proc = subprocess.Popen(
            [str(python), "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", "0"],
            cwd=folder, env={**clean, **env}, stdout=self._log, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL)
        port = self._wait_for_port()
        self.url = f"http://127.0.0.1:{port}"
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for_port(self) -> int:
        box: list[int] = []
        seen: list[str] = []

        def read() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                seen.append(line)
                m = _RUNNING.search(line)
                if m:
                    box.append(int(m.group(1)))
                    return

        t = threading.Thread(target=read, daemon=True)
        t.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while t.is_alive() and time.monotonic() < deadline:
            t.join(0.2)
        if not box:
            self.stop()
            raise RuntimeError(f"the OpenEnv test server did not start: {''.join(seen)[-2000:]}")
        return box[0]

    def _drain(self) -> None:
        if self.proc.stderr is not None:
            for line in self.proc.stderr:
                self._log.write(line)

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()


def serve_processes(folder: Path) -> list[int]:
    """The pids of the servers Workbench started for ``folder`` (serve.py with ``--app-dir folder``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"serve.py") for a in argv) and str(folder).encode() in argv:
            found.append(int(entry.name))
    return found


def uv_cache_dir() -> str:
    """This machine's uv cache (a CLI run with a private cache would download every package again)."""
    from workbench.packaging.uv import uv_command

    return subprocess.run([*uv_command(), "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()


def echo_wheel(folder: Path) -> Path:
    """The echo environment as an installable package (``openenv-echo_env`` 0.1.0, its ``openenv.yaml``
    inside), written into ``folder`` as a wheel by hand (no build backend, no network)."""
    import base64
    import hashlib
    import zipfile

    src = ENVS / "echo_env"
    files = {f"echo_env/{p.relative_to(src).as_posix()}": p.read_bytes() for p in sorted(src.rglob("*"))
             if p.is_file() and p.suffix in (".py", ".yaml")}
    info = "openenv_echo_env-0.1.0.dist-info"
    files[f"{info}/METADATA"] = (b"Metadata-Version: 2.1\nName: openenv-echo_env\nVersion: 0.1.0\n"
                                 b"Requires-Dist: openenv-core[core]>=0.3.0\n")
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: workbench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    wheel = folder / "openenv_echo_env-0.1.0-py3-none-any.whl"
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
              f"{len(data)}" for name, data in files.items()]
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel
