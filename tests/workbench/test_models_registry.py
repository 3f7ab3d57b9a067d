"""Models as named endpoints: `workbench models add|list|remove`, then `-m NAME` resolves to the endpoint,
its model id, its key (from the named variable, never stored) and its price. Real CLI processes, a real
mock endpoint, the registry file on disk."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, assert_user_error, last_json

# slow: several CLI processes per case against a mock endpoint
pytestmark = pytest.mark.slow


def _registry(cli_env: dict[str, str]) -> Path:
    return Path(cli_env["XDG_CONFIG_HOME"]) / "workbench" / "models.json"


def test_add_list_remove_and_no_key_is_ever_written(cli: Callable[..., CliResult], cli_env: dict[str, str]) -> None:
    res = cli("models", "add", "gpt-small", "--base-url", "https://api.openai.com/v1/", "--model-id", "gpt-4o-mini",
              "--api-key-env", "OPENAI_API_KEY", "--input-price", "0.15", "--output-price", "0.6", "--json",
              env={"OPENAI_API_KEY": "sk-test-never-stored"})
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["model"] == {
        "name": "gpt-small", "base_url": "https://api.openai.com/v1", "model_id": "gpt-4o-mini", "provider": "openai",
        "api_key_env": "OPENAI_API_KEY", "input_price": 0.15, "output_price": 0.6}
    assert cli("models", "add", "claude", "--base-url", "https://api.anthropic.com/v1", "--provider", "anthropic",
               "--model-id", "claude-sonnet-4-5").rc == 0
    listed = last_json(cli("models", "list", "--json").stdout)
    assert [m["name"] for m in listed["models"]] == ["claude", "gpt-small"]
    text = _registry(cli_env).read_text()
    assert "sk-test-never-stored" not in text and "OPENAI_API_KEY" in text
    table = cli("models", "list").stdout
    assert "gpt-4o-mini" in table and "$OPENAI_API_KEY" in table and "keyring" in table
    assert last_json(cli("models", "remove", "claude", "--json").stdout) == {"removed": "claude"}
    assert [m["name"] for m in last_json(cli("models", "list", "--json").stdout)["models"]] == ["gpt-small"]


def test_eval_with_a_registered_name_uses_its_endpoint_id_key_and_price(
        cli: Callable[..., CliResult], mock_server: Callable[..., Any]) -> None:
    mock = mock_server("arithmetic", "--require-key", "secret-123", "--models", "served-id")
    assert cli("models", "add", "house", "--base-url", mock.base_url, "--model-id", "served-id", "--api-key-env",
               "HOUSE_KEY", "--input-price", "1.0", "--output-price", "2.0").rc == 0
    res = cli("eval", "arithmetic", "-m", "house", "-n", "4", "--json", env={"HOUSE_KEY": "secret-123"})
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["model"] == "served-id" and out["rollouts"] == 4 and out["errors"] == 0
    tokens = out["prompt_tokens"] * 1.0 + out["completion_tokens"] * 2.0
    assert out["cost_usd"] == pytest.approx(tokens / 1e6), "the registered price costs the run"
    body = mock.bodies()[0]
    assert body["model"] == "served-id"
    missing = cli("eval", "arithmetic", "-m", "house", "-n", "1")
    assert_user_error(missing, "'house'", "$HOUSE_KEY", "not set")


BAD = [
    (["models", "add", "x", "--base-url", "ftp://host"], ["base_url", "http"]),
    (["models", "add", "x", "--base-url", "http://h/v1", "--provider", "gemini"], ["--provider", "openai", "anthropic"]),
    (["models", "add", "x", "--base-url", "http://h/v1", "--input-price", "1"], ["--input-price", "--output-price"]),
    (["models", "add", "x", "--base-url", "http://h/v1", "--input-price", "-1", "--output-price", "1"],
     ["input_price", "non-negative"]),
    (["models", "add", "x", "--base-url", "http://h/v1", "--api-key-env", "sk-abc"], ["api_key_env", "variable"]),
    (["models", "add", "bad name", "--base-url", "http://h/v1"], ["name", "letters"]),
    (["models", "add", "house", "--base-url", "http://other/v1"], ["'house'", "registered already", "--replace"]),
    (["models", "remove", "hose"], ["'hose'", "did you mean", "'house'"]),
    (["eval", "arithmetic", "-m", "housse", "-n", "1"], ["'housse'", "did you mean", "'house'"]),
]


@pytest.mark.parametrize(("args", "fragments"), BAD, ids=[" ".join(a[:3]) + f" {i}" for i, (a, _) in enumerate(BAD)])
def test_bad_input_is_one_line_and_the_registry_is_kept(cli: Callable[..., CliResult], cli_env: dict[str, str],
                                                        args: list[str], fragments: list[str]) -> None:
    assert cli("models", "add", "house", "--base-url", "http://127.0.0.1:9/v1", "--model-id", "m").rc == 0
    before = _registry(cli_env).read_text()
    assert_user_error(cli(*args), *fragments)
    assert _registry(cli_env).read_text() == before


def test_a_broken_registry_is_one_line(cli: Callable[..., CliResult], cli_env: dict[str, str]) -> None:
    path = _registry(cli_env)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"house": {"base_url": "http://h/v1"}}))
    assert_user_error(cli("models", "list"), "models.json", "'house'", "model_id")
    path.write_text("{not json")
    assert_user_error(cli("eval", "arithmetic", "-m", "house"), "models.json", "cannot be read")


ADD_ENV = """
import workbench as wb

def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b

def load_environment():
    rubric = wb.Rubric()

    @rubric.reward
    def correct(completion: str) -> float:
        return float(completion.strip().endswith("5"))

    return wb.Environment(name="adder", tasks=wb.TaskSet.from_records([{"prompt": "What is 2 + 3?"}]),
                          harness=wb.ToolLoop(tools=[add], system_prompt="Use the tool."), rubric=rubric)
"""


def test_a_registered_anthropic_model_speaks_the_messages_api_with_tools(
        cli: Callable[..., CliResult], write_env: Callable[..., Path], tmp_path: Path, store_path: Path) -> None:
    """provider anthropic: the Messages API natively (system prompt, tool_use, tool_result, stop reasons),
    against a mock that checks requests as the published API does; cache reads priced at their rate."""
    script = [{"tool_use": {"name": "add", "input": {"a": 2, "b": 3}}}, "The answer is 5"]
    mock = MockServer(["--script", json.dumps(script), "--require-key", "sk-ant-test", "--cache-read", "100",
                       "--models", "claude-mock"], tmp_path / "anthropic.log", module="workbench.testing.mock_anthropic")
    try:
        assert cli("models", "add", "claude", "--base-url", mock.base_url, "--provider", "anthropic", "--model-id",
                   "claude-mock", "--api-key-env", "ANTH_KEY", "--input-price", "3", "--output-price", "15").rc == 0
        res = cli("eval", write_env(ADD_ENV, "adder.py"), "-m", "claude", "--json", env={"ANTH_KEY": "sk-ant-test"})
        assert res.rc == 0, res.stderr
        out = last_json(res.stdout)
        assert out["errors"] == 0 and out["rewards"]["correct"] == 1.0 and out["model"] == "claude-mock"
        first, second = mock.bodies()[:2]
        assert first["system"] == "Use the tool." and first["tools"][0]["name"] == "add"
        assert first["tools"][0]["input_schema"]["properties"]["a"]["type"] == "integer"
        result = second["messages"][-1]["content"][0]
        assert result["type"] == "tool_result" and str(result["content"]) == "5"
        p, c = out["prompt_tokens"], out["completion_tokens"]
        assert out["cost_usd"] == pytest.approx(((p - 200) * 3 + 200 * 3 * 0.1 + c * 15) / 1e6), \
            "two calls, 100 cache-read tokens each, at a tenth of the input price"
        calls = sqlite3.connect(store_path).execute("SELECT finish_reason, extra FROM model_call ORDER BY idx").fetchall()
        assert [f for f, _ in calls] == ["tool_calls", "stop"]
        assert json.loads(calls[0][1])["api"] == "anthropic"
    finally:
        mock.stop()


def test_models_test_calls_the_model_once_and_says_why_not(cli: Callable[..., CliResult],
                                                           mock_server: Callable[..., Any], closed_port: int) -> None:
    mock = mock_server("instant", "--require-key", "secret-456", "--models", "served-id")
    assert cli("models", "add", "house", "--base-url", mock.base_url, "--model-id", "served-id", "--api-key-env",
               "HOUSE_KEY").rc == 0
    ok = cli("models", "test", "house", env={"HOUSE_KEY": "secret-456"})
    assert ok.rc == 0, ok.stderr
    assert ok.stdout.startswith("house: ok, served-id at ") and "secret-456" not in ok.stdout + ok.stderr
    check = last_json(cli("models", "test", "house", "--json", env={"HOUSE_KEY": "secret-456"}).stdout)["check"]
    assert check["ok"] is True and check["model_id"] == "served-id" and check["seconds"] >= 0

    wrong = cli("models", "test", "house", env={"HOUSE_KEY": "not-the-key"})
    assert "not-the-key" not in assert_user_error(wrong, "house: cannot be called")
    assert_user_error(cli("models", "test", "house"), "house: cannot be called", "$HOUSE_KEY", "not set")
    assert cli("models", "add", "gone", "--base-url", f"http://127.0.0.1:{closed_port}/v1").rc == 0
    assert_user_error(cli("models", "test", "gone"), "gone: cannot be called", "cannot connect")
    assert_user_error(cli("models", "test", "hous"), "no model named 'hous'", "did you mean 'house'")
