"""Gemini's and OpenRouter's OpenAI-compatible endpoints, registered like any model: their base paths
(Gemini's ends in ``/v1beta/openai/``, with the slash its docs give), Gemini's ``models/<id>`` listing,
OpenRouter's provider-prefixed ids and the extra fields of its responses. Real CLI processes against a
real mock that follows each one's published shape (never a real provider)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, assert_user_error, last_json

# slow: CLI processes against a mock per provider
pytestmark = pytest.mark.slow

PROVIDERS = [
    # (flavor, API path, model id, the base URL as a user copies it from the provider's docs)
    ("gemini", "/v1beta/openai", "gemini-2.5-flash", "{root}/v1beta/openai/"),
    ("openrouter", "/api/v1", "openai/gpt-4o-mini", "{root}/api/v1"),
]


@pytest.mark.parametrize(("flavor", "prefix", "model_id", "url"), PROVIDERS, ids=[p[0] for p in PROVIDERS])
def test_an_openai_compatible_provider_runs_an_eval_priced(cli: Callable[..., CliResult], store_path: Path,
                                                           mock_server: Callable[..., Any], flavor: str, prefix: str,
                                                           model_id: str, url: str) -> None:
    mock = mock_server("arithmetic", "--accuracy", "1.0", "--prefix", prefix, "--flavor", flavor, "--models", model_id)
    base_url = url.format(root=mock.root)
    assert cli("models", "add", flavor, "--base-url", base_url, "--model-id", model_id,
               "--input-price", "0.3", "--output-price", "2.5").rc == 0
    res = cli("eval", "arithmetic", "-m", flavor, "-n", "6", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["rollouts"] == 6 and out["errors"] == 0 and out["rewards"]["correct"] == 1.0
    assert out["model"] == model_id and out["cost_usd"] > 0
    assert {b["model"] for b in mock.bodies()} == {model_id}, "the id as the provider serves it"
    db = sqlite3.connect(store_path)
    (priced,) = db.execute("SELECT SUM(cost_usd) FROM rollout").fetchone()
    tokens = db.execute("SELECT SUM(prompt_tokens), SUM(completion_tokens) FROM rollout").fetchone()
    assert priced == pytest.approx((tokens[0] * 0.3 + tokens[1] * 2.5) / 1e6), "the registered price, not the mock's"


def test_a_model_the_provider_does_not_list_is_refused_with_its_names(cli: Callable[..., CliResult],
                                                                      mock_server: Callable[..., Any]) -> None:
    mock = mock_server("arithmetic", "--prefix", "/v1beta/openai", "--flavor", "gemini", "--models", "gemini-2.5-flash")
    assert cli("models", "add", "typo", "--base-url", f"{mock.root}/v1beta/openai/",
               "--model-id", "gemini-2.5-flsh").rc == 0
    assert_user_error(cli("eval", "arithmetic", "-m", "typo", "-n", "2"), "does not serve model 'gemini-2.5-flsh'",
                      "models/gemini-2.5-flash")
    assert mock.requests() == 0
