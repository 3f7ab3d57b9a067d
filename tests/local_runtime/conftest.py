"""Fixtures for the embedded server: a fast tiny-model build shared by the session, and real server
subprocesses on 127.0.0.1 driven with the official ``openai`` client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import SERVED, run_server

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def server(tiny_dir: Path) -> Iterator[str]:
    # Served at 1,024 tokens of the build's 8,192: the context the over-the-context tests measure against.
    with run_server(tiny_dir, "--served-model-name", SERVED, "--max-batch", "32", "--max-model-len", "1024") as root:
        yield root


@pytest.fixture(scope="session")
def client(server: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture()
def aclient(server: str) -> Any:
    from openai import AsyncOpenAI

    return AsyncOpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=60)
