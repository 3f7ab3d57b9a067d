"""Sandbox fixtures: both runtimes, for real.

Docker tests need a running engine, ``wb.Local`` tests bubblewrap with user namespaces. Where the machine
lacks one they skip, saying so (``tests/conftest.py``); where the README's setup installs and starts them
(as root with apt, as in CI) a missing one is a failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import workbench as wb

#: Both runtimes; the Docker one is slow (an engine and its image): the fast lane runs ``wb.Local()`` only.
RUNTIMES = ["local", pytest.param("docker", marks=pytest.mark.slow)]


def make_runtime(kind: str, **limits: Any) -> Any:
    return wb.Local(**limits) if kind == "local" else wb.Docker(**limits)


@pytest.fixture(params=RUNTIMES)
def runtime_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_client")
    return str(request.param)


@pytest.fixture
async def sandbox(runtime_kind: str) -> AsyncIterator[wb.Sandbox]:
    """One fresh sandbox of each runtime (small limits so bombs end fast)."""
    rt = make_runtime(runtime_kind, pids=64, memory="256m", timeout=20)
    async with rt.sandbox() as sb:
        yield sb


async def hand_back(sb: wb.Sandbox, pool: Any) -> None:
    """Release ``sb`` and wait until the pool has reset it and has it idle again (the next acquire reuses it)."""
    await sb.close()
    for _ in range(200):
        if pool.idle:
            return
        await asyncio.sleep(0.02)
