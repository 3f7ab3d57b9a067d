"""The gateway's fixtures: two registered models (scripted mock servers that insist on the provider's key), a
gateway key for the app ``shop``, and gateways started as real processes on 127.0.0.1. A test module changes what
the upstreams answer by defining ``upstream_modes``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import PROVIDER_KEY, PROVIDER_VAR, Running
from tests.helpers import MockServer, _readline, last_json, mock_args, stop_process, workbench_argv


@pytest.fixture
def upstream_modes() -> dict[str, list[str]]:
    """Each registered model's mock arguments: both repeat the last user message."""
    return {"good": mock_args("echo"), "cand": mock_args("echo")}


@pytest.fixture
def upstreams(tmp_path: Path, upstream_modes: dict[str, list[str]]) -> Iterator[dict[str, MockServer]]:
    servers = {name: MockServer([*args, "--require-key", PROVIDER_KEY], tmp_path / f"{name}.log")
               for name, args in upstream_modes.items()}
    yield servers
    for s in servers.values():
        s.stop()


@pytest.fixture
def env(cli_env: dict[str, str]) -> dict[str, str]:
    return {**cli_env, PROVIDER_VAR: PROVIDER_KEY}


@pytest.fixture
def registered(cli: Callable[..., Any], env: dict[str, str], upstreams: dict[str, MockServer]) -> str:
    """Both models registered; a gateway key for the app ``shop``."""
    for name, server in upstreams.items():
        r = cli("models", "add", name, "--base-url", server.base_url, "--model-id", "mock-model",
                "--api-key-env", PROVIDER_VAR, env=env)
        assert r.rc == 0, r.stderr
    made = cli("gateway", "keys", "add", "shop", "--json", env=env)
    assert made.rc == 0, made.stderr
    return str(last_json(made.stdout)["key"])


@pytest.fixture
def gateway(env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def start(*args: str) -> Running:
        proc = subprocess.Popen([*workbench_argv(), "gateway", "--port", "0", "--json", *args], env=env,
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = _readline(proc.stdout, 120)
        if not line.strip():
            stop_process(proc)
            raise AssertionError(f"the gateway did not start: {proc.stderr.read() if proc.stderr else ''}")
        running = Running(proc, json.loads(line))
        started.append(running)
        return running

    yield start
    for r in started:
        r.stop()
