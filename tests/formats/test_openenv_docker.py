"""An OpenEnv environment's Docker image (``openenv+docker:IMAGE``): its container is started with its port
published on 127.0.0.1 only, serves the run, and is removed after.

openenv-core's own images start from ``ghcr.io/meta-pytorch/openenv-base``, which cannot be pulled offline;
the test image is built from local files instead: Workbench's sandbox image (this machine's python3) with
the OpenEnv framework environment's packages and the echo environment's folder, served as openenv-core's
Dockerfile serves an environment (``uvicorn server.app:app`` on port 8000, from the environment's folder).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.formats.openenv_support import ENVS, openenv_python
from tests.helpers import CliResult, MockServer, assert_user_error, last_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DOCKERFILE = """\
FROM {base}
COPY site-packages /opt/openenv/site-packages
COPY env /app/env
ENV PYTHONPATH=/opt/openenv/site-packages
WORKDIR /app/env
EXPOSE 8000
CMD ["python3", "-m", "uvicorn", "server.app:app", "--host", "0.0.0.0", "--port", "8000"]
"""


def _docker(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


@pytest.fixture(scope="module")
def echo_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The echo environment's test image, built once per content (a rerun finds it)."""
    if not sys.platform.startswith("linux") or not shutil.which("docker"):
        pytest.skip("Docker images are tested on Linux hosts with the docker command, which this machine lacks")
    if _docker("info", timeout=60).returncode != 0:
        pytest.fail("the Docker engine is not running or not reachable")
    from workbench_local.sandbox.docker_pool import connect
    from workbench_local.sandbox.image import build_default_image

    from workbench.authoring.sandbox import DEFAULT_IMAGE

    build_default_image(connect())
    python = openenv_python()
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    tag = f"workbench-openenv-test:{_tree_hash(ENVS / 'echo_env')}-{python.parent.parent.name.rsplit('-', 1)[-1]}"
    if _docker("image", "inspect", tag, timeout=60).returncode == 0:
        return tag
    ctx = tmp_path_factory.mktemp("openenv-image")
    shutil.copytree(site, ctx / "site-packages", symlinks=True)
    shutil.copytree(ENVS / "echo_env", ctx / "env", ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "Dockerfile").write_text(DOCKERFILE.format(base=DEFAULT_IMAGE))
    built = _docker("build", "--quiet", "--tag", tag, str(ctx))
    assert built.returncode == 0, built.stderr[-2000:]
    listed = _docker("images", "--format", "{{.Repository}}:{{.Tag}}", "workbench-openenv-test", timeout=60)
    stale = [t for t in listed.stdout.split() if t != tag]
    if stale:  # the builds of earlier contents
        _docker("rmi", *stale, timeout=120)
    return tag


def test_an_image_serves_the_run_and_is_removed_after(
        echo_image: str, cli: Callable[..., CliResult], mock_server: Callable[..., MockServer]) -> None:
    mock = mock_server("instant", reply="ping")
    res = cli("eval", f"openenv+docker:{echo_image}", "-n", "4", "-a", '{"turns": 2}', "--base-url", mock.base_url,
              "-m", "mock-model", "--json", timeout=400.0)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["env"], out["rollouts"], out["errors"]) == ("workbench-openenv-test", 4, 0)
    assert out["mean_reward"] == 2.0
    assert out["metrics"] == {"openenv_done": 1.0, "openenv_steps": 2.0}
    leftover = _docker("ps", "--all", "--quiet", "--filter", "label=workbench.openenv=1", timeout=60).stdout.split()
    assert leftover == []


@pytest.mark.parametrize(("image", "fragments"), [
    ("{base}", ["exited", "before serving", "port 8000"]),
    ("workbench-openenv-test:no-such-tag", ["cannot start the Docker image workbench-openenv-test:no-such-tag"]),
])
def test_an_image_that_serves_no_environment_ends_in_one_clear_line(
        echo_image: str, image: str, fragments: list[str], cli: Callable[..., CliResult],
        mock_server: Callable[..., MockServer]) -> None:
    from workbench.authoring.sandbox import DEFAULT_IMAGE

    mock = mock_server("instant")
    res = cli("eval", f"openenv+docker:{image.format(base=DEFAULT_IMAGE)}", "-n", "1", "--base-url", mock.base_url,
              "-m", "mock-model", timeout=400.0)
    assert_user_error(res, *fragments)
