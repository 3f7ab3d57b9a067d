"""Each embedded server holds its own ``ServerState``: two servers built in one process, each serving on
127.0.0.1, answer with their own model name, keep their own responses and count their own batches."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web


@pytest.fixture()
async def two_servers(tiny_dir: Path) -> AsyncIterator[dict[str, str]]:
    from workbench_local.server import serve

    runners, urls = [], {}
    try:
        for name in ("alpha", "beta"):
            args = serve.build_parser().parse_args(["--model", str(tiny_dir), "--served-model-name", name,
                                                    "--threads", "1", "--port", "0"])
            runner = web.AppRunner(serve.build(args))
            runners.append(runner)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            urls[name] = f"http://127.0.0.1:{runner.addresses[0][1]}"
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


async def _get(http: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with http.get(url) as r:
        return r.status, await r.json()


async def test_two_servers_in_one_process_share_no_state(two_servers: dict[str, str]) -> None:
    alpha, beta = two_servers["alpha"], two_servers["beta"]
    async with aiohttp.ClientSession() as http:
        for name, url in two_servers.items():
            _, models = await _get(http, url + "/v1/models")
            assert [m["id"] for m in models["data"]] == [name]
        async with http.post(alpha + "/v1/responses", json={"model": "alpha", "input": "Say a number.",
                                                            "temperature": 0, "max_output_tokens": 4}) as r:
            assert r.status == 200, await r.text()
            rid = (await r.json())["id"]
        assert (await _get(http, f"{alpha}/v1/responses/{rid}"))[0] == 200
        status, body = await _get(http, f"{beta}/v1/responses/{rid}")
        assert status == 404 and rid in body["error"]["message"], body
        async with http.post(beta + "/v1/responses", json={"model": "alpha", "input": "x"}) as r:
            assert r.status == 404, await r.text()  # beta serves beta only
        _, health_alpha = await _get(http, alpha + "/health")
        _, health_beta = await _get(http, beta + "/health")
        assert health_alpha["model"] == "alpha" and health_alpha["sequences"] == 1
        assert health_beta["model"] == "beta" and health_beta["sequences"] == 0
