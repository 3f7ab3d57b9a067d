"""A route served by a model registered with the Anthropic API: each call, in any of the gateway's APIs and
streamed or not, goes upstream as one Messages request (a real mock of the Messages API that validates it as the
published API does and insists on the provider's key) and comes back in the API it was asked in; recorded like
any other, shadows too."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import PROVIDER_KEY, PROVIDER_VAR, Running, rows_of, store_bytes
from tests.helpers import MockServer, count_rollouts, wait_for

SCRIPT = ["Hello from Claude.", {"tool_use": {"name": "lookup", "input": {"order": 1042}}}]


@pytest.fixture
def claude(tmp_path: Path) -> Iterator[MockServer]:
    server = MockServer(["--script", json.dumps(SCRIPT), "--require-key", PROVIDER_KEY, "--models", "claude-mock"],
                        tmp_path / "anthropic.log", module="workbench.testing.mock_anthropic")
    yield server
    server.stop()


@pytest.fixture
def claude_registered(registered: str, cli: Callable[..., Any], env: dict[str, str], claude: MockServer) -> str:
    r = cli("models", "add", "claude", "--provider", "anthropic", "--base-url", claude.base_url, "--model-id",
            "claude-mock", "--api-key-env", PROVIDER_VAR, env=env)
    assert r.rc == 0, r.stderr
    return registered


def test_an_anthropic_model_serves_every_api_through_the_gateway(
        claude_registered: str, gateway: Callable[..., Running], claude: MockServer, store_path: Path) -> None:
    import anthropic
    import openai

    key = claude_registered
    gw = gateway("--route", "support=claude", "--route", "mirror=good", "--shadow", "mirror=claude")
    oa = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
    tools = [{"type": "function", "function": {"name": "lookup", "description": "an order",
                                               "parameters": {"type": "object", "properties": {}}}}]
    ask = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    raw = oa.chat.completions.with_raw_response.create(model="support", messages=ask, max_tokens=50)  # type: ignore[arg-type]
    assert raw.headers["X-Workbench-Arm"] == "claude"
    assert raw.parse().choices[0].message.content == "Hello from Claude."
    called = oa.chat.completions.create(model="support", messages=ask, tools=tools)  # type: ignore[arg-type]
    [call] = called.choices[0].message.tool_calls or []
    assert call.function.name == "lookup" and json.loads(call.function.arguments) == {"order": 1042}
    assert called.choices[0].finish_reason == "tool_calls"
    streamed = "".join(c.choices[0].delta.content or "" for c in oa.chat.completions.create(  # type: ignore[call-overload]
        model="support", messages=ask, stream=True) if c.choices)
    assert streamed == "Hello from Claude."
    resp = oa.responses.create(model="support", input="hello again")
    assert resp.output_text == "Hello from Claude." or resp.output[0].type == "function_call"

    an = anthropic.Anthropic(base_url=gw.root, api_key=key, max_retries=0)
    msg = an.messages.create(model="support", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].type in ("text", "tool_use")
    with an.messages.stream(model="support", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        final = s.get_final_message()
    assert final.content and final.usage.output_tokens >= 0
    oa.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "shadowed"}])
    wait_for(lambda: count_rollouts(store_path) == 8, 60, "six calls, a mirror and its Anthropic shadow recorded")
    gw.stop()

    bodies = claude.bodies()
    assert len(bodies) == 7 and all(b["model"] == "claude-mock" for b in bodies)  # six calls and the shadow
    assert bodies[0]["system"] == "be brief" and bodies[0]["max_tokens"] == 50 and "stream" not in bodies[0]
    assert bodies[1]["tools"][0]["name"] == "lookup"
    rows = rows_of(store_path)
    arms = [json.loads(r["state"])["arm"] for r in rows]
    assert arms.count("claude") == 7 and arms.count("good") == 1
    shadow = next(r for r in rows if "shadow_of" in json.loads(r["state"]))
    assert json.loads(shadow["state"])["arm"] == "claude" and shadow["completion"]
    assert PROVIDER_KEY.encode() not in store_bytes(store_path)


def test_an_anthropic_upstreams_error_reaches_the_product_in_its_own_apis_shape(
        registered: str, cli: Callable[..., Any], env: dict[str, str], gateway: Callable[..., Running],
        tmp_path: Path) -> None:
    import anthropic
    import openai

    wrong = MockServer(["--require-key", "sk-another-key-entirely"], tmp_path / "wrong.log",
                       module="workbench.testing.mock_anthropic")
    try:
        assert cli("models", "add", "claude", "--provider", "anthropic", "--base-url", wrong.base_url,
                   "--model-id", "claude-mock", "--api-key-env", PROVIDER_VAR, env=env).rc == 0
        gw = gateway("--route", "support=claude")
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=gw.base_url, api_key=registered, max_retries=0).chat.completions.create(
                model="support", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(anthropic.AuthenticationError) as caught:
            anthropic.Anthropic(base_url=gw.root, api_key=registered, max_retries=0).messages.create(
                model="support", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert PROVIDER_KEY not in str(caught.value) and registered not in str(caught.value)
    finally:
        wrong.stop()
