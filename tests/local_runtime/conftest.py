"""Fixtures for the embedded server: a fast tiny-model build shared by the session, and real server
subprocesses on 127.0.0.1 driven with the official ``openai`` client."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import SERVED, run_server

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model built with the fast recipe (a few seconds of training), once per session.
    ``WORKBENCH_TEST_TINY_DIR`` points at an existing build instead (for quick reruns)."""
    given = os.environ.get("WORKBENCH_TEST_TINY_DIR")
    if given:
        return Path(given)
    from local_runtime.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("models") / "workbench-tiny-v1", seed=0, fast=True)


@pytest.fixture(scope="session")
def server(tiny_dir: Path) -> Iterator[str]:
    with run_server(tiny_dir, "--served-model-name", SERVED, "--max-batch", "32") as root:
        yield root


@pytest.fixture(scope="session")
def client(server: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture()
def aclient(server: str) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)
