"""Fixtures of the format tests."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def docker() -> Any:
    """A Docker client with Workbench's default sandbox image built (the base of the Harbor fixture tasks)."""
    if not shutil.which("dockerd") and not Path("/var/run/docker.sock").exists():
        pytest.skip("Docker cannot run on this machine: no dockerd binary and no engine socket")
    from workbench_local.sandbox.docker_api import connect
    from workbench_local.sandbox.image import build_default_image

    from workbench.authoring.sandbox import SandboxError

    try:
        client = connect()
    except SandboxError as e:
        pytest.fail(f"Docker is installed but unusable: {e}. Start it (`./scripts/setup.sh` as root does).")
    build_default_image(client)
    return client
