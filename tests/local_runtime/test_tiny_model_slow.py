"""The real default build of the embedded model (about a minute on two cores): its accuracy on the
bundled arithmetic env is clearly above 0 and clearly below 1, through the server too, and it
writes tool calls the server parses."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import run_server

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def default_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from local_runtime.models.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("default") / "workbench-tiny-v1", seed=0)


@pytest.fixture(scope="module")
def default_server(default_build: Path) -> Iterator[str]:
    with run_server(default_build, "--served-model-name", "workbench-tiny") as root:
        yield root


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_default_build_record(default_build: Path) -> None:
    rec = json.loads((default_build / "workbench_build.json").read_text())
    assert rec["seed"] == 0 and rec["fast"] is False
    assert rec["build_s"] < 400  # about a minute on two idle cores; generous here for busy CI machines
    t1, greedy = rec["arithmetic_accuracy_t1"]["acc"], rec["arithmetic_accuracy_greedy"]["acc"]
    assert 0.15 <= t1 <= 0.6, rec  # room for RL to show learning, and a signal to learn from
    assert t1 < greedy < 0.95
    assert rec["tool_calls_greedy"]["parsed"] >= 0.5
    assert rec["parameters"] < 5_000_000


@pytest.mark.slow
@pytest.mark.timeout(600)
async def test_arithmetic_accuracy_through_the_server(default_server: str) -> None:
    import asyncio

    import openai

    from envs.arithmetic import SYSTEM_PROMPT, make_rows

    client = openai.AsyncOpenAI(base_url=default_server + "/v1", api_key="x", max_retries=0)
    rows = make_rows(120, seed=random.Random(5).randint(0, 1000))

    async def one(i: int, row: dict[str, Any]) -> bool:
        r = await client.chat.completions.create(
            model="workbench-tiny", seed=i, temperature=1.0, max_tokens=16,
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": row["prompt"]}])
        return (r.choices[0].message.content or "").strip() == row["answer"]

    right = await asyncio.gather(*(one(i, row) for i, row in enumerate(rows)))
    acc = sum(right) / len(right)
    assert 0.08 <= acc <= 0.65, acc


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_trained_tool_call_is_parsed(default_server: str) -> None:
    import openai

    client = openai.OpenAI(base_url=default_server + "/v1", api_key="x", max_retries=0)
    r = client.chat.completions.create(model="workbench-tiny", temperature=0, max_tokens=40, tools=[WEATHER],
                                       messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    c = r.choices[0]
    assert c.finish_reason == "tool_calls", c
    assert c.message.tool_calls[0].function.name == "get_weather"
    assert "city" in json.loads(c.message.tool_calls[0].function.arguments)
