"""Shared fixtures: a real mock model server, a throwaway store, the ``workbench`` CLI as a subprocess.

Nothing of Workbench's own code is mocked: servers are real processes on 127.0.0.1, stores are real
SQLite files under ``tmp_path``, and the CLI runs as the installed console script.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CliResult,
    MockServer,
    cli_environment,
    mock_args,
    run_workbench,
    write_file,
)


@pytest.fixture
def mock_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., MockServer]]:
    """A factory: ``mock_server("script", script=[...], fail_first=3)`` starts a fresh mock server.

    Every server started through it is stopped when the test ends.
    """
    started: list[MockServer] = []
    logs = tmp_path_factory.mktemp("mock-logs")

    def start(mode: str = "instant", *flags: str, script: list[Any] | None = None, **opts: Any) -> MockServer:
        server = MockServer(mock_args(mode, *flags, script=script, **opts), logs / f"mock-{len(started)}.log")
        started.append(server)
        return server

    yield start
    for s in started:
        s.stop()


@pytest.fixture
def mock_url(request: pytest.FixtureRequest, mock_server: Callable[..., MockServer]) -> str:
    """The base URL (``http://127.0.0.1:PORT/v1``) of a fresh mock server.

    Parametrise indirectly with a mode (``"echo"``) or a dict of ``mock_server`` arguments
    (``{"mode": "script", "script": [...], "fail_first": 2}``); the default is ``instant``.
    """
    param = getattr(request, "param", "instant")
    kwargs = {"mode": param} if isinstance(param, str) else dict(param)
    return mock_server(**kwargs).base_url


@pytest.fixture(scope="session")
def arith_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    """One shared arithmetic-mode server (stateless, so tests may share it)."""
    server = MockServer(mock_args("arithmetic"), tmp_path_factory.mktemp("mock-logs") / "arith.log")
    yield server
    server.stop()


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """Where this test's store lives (not created until something opens it)."""
    return tmp_path / "store" / "workbench.db"


@pytest.fixture
def cli_env(tmp_path: Path, store_path: Path) -> dict[str, str]:
    """The environment CLI subprocesses run with: private XDG dirs, ``WORKBENCH_DB`` = ``store_path``."""
    return cli_environment(tmp_path, store_path)


@pytest.fixture
def cli(cli_env: dict[str, str], tmp_path: Path) -> Callable[..., CliResult]:
    """``cli("eval", path, "--json")`` runs the ``workbench`` command; returns ``(rc, stdout, stderr)``."""

    def run(*args: Any, env: dict[str, str] | None = None, timeout: float = 120.0,
            cwd: Path | None = None) -> CliResult:
        return run_workbench(args, {**cli_env, **(env or {})}, timeout=timeout, cwd=cwd or tmp_path)

    return run


@pytest.fixture
def write_env(tmp_path: Path) -> Callable[..., Path]:
    """``write_env(source, "name.py")`` writes a (dedented) environment file under ``tmp_path/src``."""

    def write(source: str, name: str = "myenv.py") -> Path:
        return write_file(tmp_path / "src" / name, source)

    return write


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model built with the fast recipe (a few seconds of training), once per session, for
    tests/local_runtime and tests/cloud. ``WORKBENCH_TEST_TINY_DIR`` points at an existing build
    instead (for quick reruns)."""
    given = os.environ.get("WORKBENCH_TEST_TINY_DIR")
    if given:
        return Path(given)
    from workbench_local.models.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "workbench-tiny-v1", seed=0, fast=True)


@pytest.fixture(scope="session")
def default_tiny_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real default build of the embedded model (about a minute and a half on two cores), once per
    session, for the tests of what the full recipe learns. ``WORKBENCH_TEST_DEFAULT_TINY_DIR`` points
    at an existing default build instead (for quick reruns)."""
    given = os.environ.get("WORKBENCH_TEST_DEFAULT_TINY_DIR")
    if given:
        return Path(given)
    from workbench_local.models.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("default-model") / "workbench-tiny-v1", seed=0)


# -- the fast lane ------------------------------------------------------------------------------
#: Fixtures whose cost makes every test that uses them (directly or through another fixture) slow:
#: the tiny model's build and the servers on it, the default build, a Docker engine with its image.
#: Such a test is marked ``slow`` here, so ``./scripts/test -m "not slow"`` leaves it out
#: (docs/testing.md); a module or test that is slow for another reason carries the mark itself.
SLOW_FIXTURES = frozenset({"tiny_dir", "default_tiny_build", "docker_client"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# -- components the machine may lack -------------------------------------------------------------
#: What a test's failure says when a system component it needs cannot run on this machine, and the
#: skip reason it becomes. Where the README's setup installs and starts them (as root with apt, as CI
#: runs), ``scripts/test`` sets WORKBENCH_TEST_STRICT_SYSTEM=1 and such a failure stays a failure.
MISSING_COMPONENTS = {
    "wb.Local() cannot isolate commands on this machine":
        "needs bubblewrap with user namespaces, which this machine lacks (apt-get install bubblewrap)",
    "the Docker engine is not running or not reachable":
        "needs a running Docker engine, which this machine lacks (start dockerd)",
}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if not report.failed or os.environ.get("WORKBENCH_TEST_STRICT_SYSTEM") == "1":
        return
    text = report.longreprtext
    for phrase, reason in MISSING_COMPONENTS.items():
        if phrase in text:
            path, lineno, _ = item.location
            report.outcome = "skipped"
            report.longrepr = (str(path), (lineno or 0) + 1, f"Skipped: {reason}")
            return


@pytest.fixture
def package_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """A factory: ``package_index(private=True)`` starts a real pypiserver (tests/package_index.py) with
    authentication on 127.0.0.1; every index started through it is stopped when the test ends."""
    from tests.package_index import start_index

    started: list[Any] = []

    def start(private: bool = True) -> Any:
        index = start_index(tmp_path_factory.mktemp("index"), private=private)
        started.append(index)
        return index

    yield start
    for index in started:
        index.stop()


# -- the Docker engine ---------------------------------------------------------------------------
def docker_skip_reason() -> str | None:
    if not sys.platform.startswith("linux") and not os.environ.get("DOCKER_HOST"):
        return f"Docker sandboxes are tested on Linux hosts (this is {sys.platform})"
    if not shutil.which("dockerd") and not os.path.exists("/var/run/docker.sock") and not os.environ.get("DOCKER_HOST"):
        return "Docker cannot run on this machine: no dockerd binary, no engine socket, no DOCKER_HOST"
    return None


@pytest.fixture(scope="session")
def docker_client() -> Any:
    reason = docker_skip_reason()
    if reason:
        pytest.skip(reason)
    from workbench_local.sandbox.docker_pool import connect

    from workbench.authoring.sandbox import SandboxError

    try:
        client = connect()
    except SandboxError as e:
        pytest.fail(f"Docker is installed but unusable: {e}. Start it (`./scripts/setup.sh` as root does).")
    from workbench_local.sandbox.image import build_default_image

    build_default_image(client)
    return client
