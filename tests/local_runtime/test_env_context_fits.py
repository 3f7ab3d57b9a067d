"""The embedded default model serves every bundled environment: each environment's longest first prompt
(its system prompt, the task's messages and every tool schema the model is given, MCP tools included),
rendered through the model's own chat template and counted in its own tokens, plus the environment's
``max_tokens``, fits the model's context."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, last_json, query
from workbench.authoring import discovery

from .helpers import SERVED

BUNDLED = sorted(p.name for p in discovery.bundled_dir().iterdir()
                 if p.is_dir() and (p / "__init__.py").is_file())
#: What an environment needs to list its tools here: support_desk's CRM server runs on the host (in a run it
#: runs in each rollout's sandbox; its tools are the same).
ARGS: dict[str, dict[str, Any]] = {"support_desk": {"sandboxed": False}}


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from workbench_local.models.tiny_model import build_tokenizer

    return build_tokenizer()


async def _tool_schemas(env: Any) -> list[dict[str, Any]]:
    """Every tool schema the model sees on its first call: the plain tools' and the MCP servers' own."""
    from workbench.rollouts.mcp_sessions import RunToolsets

    box = getattr(env.harness, "toolbox", None)
    plain = list(box.schemas) if box is not None else []
    if not getattr(env.harness, "toolsets", None):
        return plain
    toolsets = await RunToolsets.for_env(env, None, 1, prepare=False)
    try:
        return [*plain, *toolsets.schemas]
    finally:
        await toolsets.close()


def longest_first_prompt(tokenizer: Any, name: str) -> int:
    env = discovery.load(name, ARGS.get(name, {}))
    tools = asyncio.run(_tool_schemas(env)) or None
    longest = 0
    for task in env.tasks:
        text = tokenizer.apply_chat_template(task.messages(env.harness.system_prompt), tools=tools,
                                             add_generation_prompt=True, tokenize=False)
        longest = max(longest, len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return longest


def test_every_bundled_environment_is_measured() -> None:
    assert set(BUNDLED) >= {"arithmetic", "coding", "doc_search", "next_number", "support_desk", "wordle"}


@pytest.mark.parametrize("name", BUNDLED)
def test_the_longest_first_prompt_and_max_tokens_fit_the_context(tokenizer: Any, name: str) -> None:
    from workbench_local.models.tiny_model import BuildConfig

    context = BuildConfig().context
    assert tokenizer.model_max_length == context
    longest = longest_first_prompt(tokenizer, name)
    max_tokens = discovery.load(name, ARGS.get(name, {})).sampling.max_tokens or 0
    assert longest > 10, f"{name}: a first prompt of {longest} tokens; is the rendering right?"
    assert longest + max_tokens <= context, (
        f"{name}: the longest first prompt is {longest} tokens and max_tokens {max_tokens}: {longest + max_tokens} "
        f"> the embedded model's context of {context}")


def test_the_measure_counts_tool_schemas_and_mcp_tools(tokenizer: Any) -> None:
    """coding's three tool schemas and support_desk's CRM tools are in the count: both are long prompts."""
    assert longest_first_prompt(tokenizer, "coding") > 1024  # more than the context the model once had
    assert longest_first_prompt(tokenizer, "support_desk") > 500


# -- a model too small for an environment: said once, before any rollout ---------------------------
@pytest.mark.parametrize("command", [("eval", "coding", "-n", "3"), ("debug", "coding", "--task", "1", "--json")],
                         ids=["eval", "debug"])
def test_a_model_too_small_for_every_first_prompt_is_refused_once(
        command: tuple[str, ...], server: str, cli: Callable[..., CliResult], store_path: Path) -> None:
    """The session server holds 1,024 tokens (tests/local_runtime/conftest.py); coding's first prompts are
    longer: one sentence with both numbers, naming the flag, and no run stored."""
    from workbench_local.models.tiny_model import build_tokenizer

    res = cli(*command, "--base-url", server + "/v1", "-m", SERVED, "--db", store_path, timeout=300)
    assert res.rc == 2, res.stdout
    said = re.findall(rf"model '{SERVED}' holds 1024 tokens; environment coding's longest first prompt is "
                      r"(\d+) tokens", res.stdout + res.stderr)
    assert len(said) == 1, res.stderr
    assert 1024 < int(said[0]) <= longest_first_prompt(build_tokenizer(), "coding"), res.stderr
    assert "-m/--model" in res.stderr and "context_length" not in res.stderr
    assert not store_path.exists() or query(store_path, "SELECT count(*) FROM rollout") == [(0,)]


# -- the examples that once outgrew the context, on the embedded model at its own context --------------
@pytest.mark.parametrize("command", [("eval", "wordle", "-n", "12", "--json"), ("debug", "coding", "--task", "1", "--json")],
                         ids=["eval-wordle", "debug-coding"])
def test_the_bundled_examples_run_within_the_context(command: tuple[str, ...], tiny_dir: Path, tmp_path: Path,
                                                     cli: Callable[..., CliResult]) -> None:
    """No ``--base-url``: the embedded server, started on demand on the session's build at its own 8,192 tokens."""
    from workbench_local.models.tiny_model import MODEL_ID

    (tmp_path / "xdg-cache" / "workbench" / "models").mkdir(parents=True)
    (tmp_path / "xdg-cache" / "workbench" / "models" / MODEL_ID).symlink_to(tiny_dir, target_is_directory=True)
    try:
        res = cli(*command, timeout=600)
    finally:
        for state in (tmp_path / "xdg-data").glob("workbench/embedded/*.json"):
            os.kill(int(json.loads(state.read_text())["pid"]), signal.SIGTERM)
    assert res.rc == 0, res.stderr[-3000:]
    out = last_json(res.stdout)
    assert "context_length" not in json.dumps(out), out
    if command[0] == "eval":
        assert out["rollouts"] == 12 and out["failed"] == 0 and not out["error_kinds"], out
    else:
        assert out["status"] == "ok" and not out["errors"], out
