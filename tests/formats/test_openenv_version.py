"""An OpenEnv environment named by a URL is versioned by what its server publishes (``/schema`` and
``/metadata``, openenv-core 0.3.0), not by the URL alone: a server behind the same URL that changes its action
schema is a new version, and the same server again is the same version. Real servers (uvicorn) on one port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.formats.openenv_support import ENVS, openenv_python
from workbench.authoring import discovery

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """``uvicorn server.app:app`` of a folder on a given port of 127.0.0.1 (the same URL across restarts)."""

    def __init__(self, python: Path, folder: Path, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([str(python), "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1",
                                      "--port", str(port)], cwd=folder, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        for _ in range(600):  # until it answers /health (or exits)
            if self.proc.poll() is not None:
                raise RuntimeError(f"the OpenEnv test server in {folder} exited {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the OpenEnv test server in {folder} did not answer")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    dest = tmp_path / "guess_env"
    shutil.copytree(ENVS / "guess_env", dest, ignore=shutil.ignore_patterns("__pycache__"))
    yield dest


def version_served(folder: Path, port: int) -> str:
    server = Served(openenv_python(), folder, port)
    try:
        return discovery.load(f"openenv+{server.url}").version
    finally:
        server.stop()


def test_a_changed_action_schema_behind_the_same_url_is_a_new_version(folder: Path) -> None:
    port = free_port()
    first = version_served(folder, port)
    assert version_served(folder, port) == first  # the same server again: the same version
    assert version_served(folder, free_port()) != first  # what names it counts too
    models = folder / "models.py"
    models.write_text(models.read_text().replace(
        'reason: str | None = Field(default=None, description="Why you guess it")',
        'reason: str | None = Field(default=None, description="Why you guess it")\n'
        '    confidence: float = Field(default=0.5, description="How sure you are")'))
    changed = version_served(folder, port)
    assert changed != first
    assert len(changed) == 12 and all(c in "0123456789abcdef" for c in changed)


def test_a_format_without_a_version_or_with_an_empty_one_gives_none() -> None:
    from workbench.authoring import env_formats
    from workbench.formats.harbor import FORMAT as HARBOR
    from workbench.formats.openenv import FORMAT as OPENENV

    env = discovery.load(str(Path(__file__).with_name("harbor_tasks") / "hello"))
    assert env_formats.version_of(HARBOR, Path("."), env) is None  # Harbor gives none: its folder's files
    assert env_formats.version_of(OPENENV, ENVS / "guess_env", env) is None  # a folder: its files
