"""The real Claude Code and Codex CLIs, installed from the npm registry, run headless and unchanged as
``wb.Program`` harnesses against a scripted upstream: Claude Code on the Anthropic Messages API, Codex on
the Responses API, both through the interception proxy. Each is scripted to run one shell command with its
own tool and then answer; the command really runs inside the rollout's sandbox, and every call is in the
store. Claude Code also uses `workbench mcp` as its MCP server, as a coding agent beside Workbench would."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CliResult, MockServer, last_json

# slow: installs Claude Code and Codex from npm and runs them
pytestmark = pytest.mark.slow

CLAUDE_CODE = "@anthropic-ai/claude-code@2.1.332"
CODEX = "@openai/codex@0.171.0"


@pytest.fixture(scope="session")
def agent_clis() -> Path:
    """The two CLIs, installed once into a cache folder (mounted read-only into each rollout's sandbox)."""
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        pytest.skip("node and npm are not installed on this machine, so the Claude Code and Codex CLIs cannot be")
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench-tests" / "agent-clis-1"
    bins = root / "node_modules" / ".bin"
    if not ((bins / "claude").exists() and (bins / "codex").exists()):
        root.mkdir(parents=True, exist_ok=True)
        r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(root), CLAUDE_CODE, CODEX],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0 and ("ENOTFOUND" in r.stderr or "EAI_AGAIN" in r.stderr or "ETIMEDOUT" in r.stderr):
            pytest.skip("the npm registry is not reachable from this machine, so the Claude Code and Codex CLIs "
                        "cannot be installed")
        assert r.returncode == 0, r.stderr[-2000:]
    return root


def _calls(store: Path) -> list[tuple[int, str | None]]:
    db = sqlite3.connect(store)
    return db.execute("SELECT n_messages, finish_reason FROM model_call ORDER BY id").fetchall()


def _run(cli: Callable[..., CliResult], write_env: Callable[..., Path], mock: MockServer, argv: list[str],
         root: Path, home_env: dict[str, str]) -> dict:
    env = write_env(f'''
        import workbench as wb
        def load_environment():
            rubric = wb.Rubric()
            @rubric.reward
            def answered(state: dict) -> float:
                return float("all done" in state.get("stdout", ""))
            return wb.Environment(
                name="cli-agent", tasks=wb.TaskSet.from_records([{{"prompt": "write the marker file"}}]),
                harness=wb.Program({argv!r}, env={home_env!r}, binds=[{str(root)!r}], timeout=240),
                rubric=rubric, runtime=wb.Local(timeout=300))
        ''')
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json", timeout=400)
    assert res.rc == 0, res.stderr[-3000:]
    return last_json(res.stdout)


def test_claude_code_runs_headless_on_the_messages_api(agent_clis: Path, cli: Callable[..., CliResult],
                                                      mock_server: Callable[..., MockServer], store_path: Path,
                                                      write_env: Callable[..., Path]) -> None:
    bash = {"id": "toolu_1", "type": "function", "function": {"name": "Bash", "arguments": json.dumps(
        {"command": "echo made-by-claude > marker.txt && cat marker.txt", "description": "write the marker"})}}
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [bash]}, "all done"])
    claude = str(agent_clis / "node_modules" / ".bin" / "claude")
    home = {"HOME": "/tmp/home", "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1"}
    s = _run(cli, write_env, mock, [claude, "-p", "{prompt}", "--output-format", "json", "--allowedTools", "Bash"],
             agent_clis, home)
    assert s["errors"] == 0 and s["rewards"]["answered"] == 1.0, s
    calls = _calls(store_path)
    assert [c[1] for c in calls] == ["tool_calls", "stop"], calls
    second = mock.bodies()[1]["messages"]
    tool = [m for m in second if m["role"] == "tool"]
    assert tool and "made-by-claude" in tool[0]["content"], second[-2:]  # the command ran, in the sandbox
    assert second[-2]["tool_calls"][0]["function"]["name"] == "Bash"


def test_codex_runs_headless_on_the_responses_api(agent_clis: Path, cli: Callable[..., CliResult],
                                                 mock_server: Callable[..., MockServer], store_path: Path,
                                                 write_env: Callable[..., Path]) -> None:
    run = {"id": "call_1", "type": "function", "function": {"name": "exec_command", "arguments": json.dumps(
        {"cmd": "echo made-by-codex > marker.txt && cat marker.txt"})}}
    mock = mock_server("script", "--tokens", script=[{"tool_calls": [run]}, "all done"])
    codex = str(agent_clis / "node_modules" / ".bin" / "codex")
    # Codex takes its endpoint from a model provider in its configuration, not from OPENAI_BASE_URL.
    script = (f'mkdir -p "$CODEX_HOME" && exec {codex} exec --skip-git-repo-check -s danger-full-access -m mock-model '
              '-c model_provider=\'"workbench"\' -c model_providers.workbench.name=\'"workbench"\' '
              '-c model_providers.workbench.base_url="\\"$OPENAI_BASE_URL\\"" '
              '-c model_providers.workbench.env_key=\'"OPENAI_API_KEY"\' '
              '-c model_providers.workbench.wire_api=\'"responses"\' "$WORKBENCH_PROMPT" </dev/null')
    s = _run(cli, write_env, mock, ["sh", "-c", script], agent_clis, {"HOME": "/tmp/home", "CODEX_HOME": "/tmp/home/.codex"})
    assert s["errors"] == 0 and s["rewards"]["answered"] == 1.0, s
    calls = _calls(store_path)
    assert [c[1] for c in calls] == ["tool_calls", "stop"], calls
    second = mock.bodies()[1]["messages"]
    tool = [m for m in second if m["role"] == "tool"]
    assert tool and "made-by-codex" in tool[0]["content"], second[-2:]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "exec_command"


def test_claude_code_uses_workbench_mcp(agent_clis: Path, cli: Callable[..., CliResult], cli_env: dict[str, str],
                                        mock_server: Callable[..., MockServer], store_path: Path,
                                        write_env: Callable[..., Path], tmp_path: Path) -> None:
    """A coding agent pointed at `workbench mcp`: the real Claude Code, configured with the server's URL
    (`--mcp-config`), calls its `list_environments` tool and gets Workbench's answer."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_urlsafe(24)
    server = subprocess.Popen([sys.executable, "-m", "workbench.cli", "mcp", "--http", str(port)],
                              env={**cli_env, "WORKBENCH_DB": str(tmp_path / "mcp-store.db"),
                                   "WORKBENCH_MCP_TOKEN": token},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        tool = "mcp__workbench__list_environments"
        call = {"id": "toolu_1", "type": "function", "function": {"name": tool, "arguments": "{}"}}
        mock = mock_server("script", "--tokens", script=[{"tool_calls": [call]}, "all done"])
        claude = str(agent_clis / "node_modules" / ".bin" / "claude")
        config = json.dumps({"mcpServers": {"workbench": {"type": "http", "url": f"http://127.0.0.1:{port}/mcp",
                                                            "headers": {"Authorization": f"Bearer {token}"}}}})
        home = {"HOME": "/tmp/home", "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                "DISABLE_AUTOUPDATER": "1"}
        env = write_env(f'''
            import workbench as wb
            def load_environment():
                rubric = wb.Rubric()
                @rubric.reward
                def answered(state: dict) -> float:
                    return float("all done" in state.get("stdout", ""))
                return wb.Environment(
                    name="cli-agent-mcp", tasks=wb.TaskSet.from_records([{{"prompt": "which environments are there?"}}]),
                    harness=wb.Program({[claude, "-p", "{prompt}", "--output-format", "json", "--allowedTools", tool,
                                         "--mcp-config", config, "--strict-mcp-config"]!r},
                                       env={home!r}, binds=[{str(agent_clis)!r}], timeout=240),
                    rubric=rubric, runtime=wb.Local(timeout=300, network=True))
            ''')
        res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json", timeout=400)
        assert res.rc == 0, res.stderr[-3000:]
        s = last_json(res.stdout)
        assert s["errors"] == 0 and s["rewards"]["answered"] == 1.0, s
        first, second = mock.bodies()[:2]
        # Claude Code offers MCP tools through its ToolSearch (deferred), and runs a call to one by name.
        assert "ToolSearch" in [t["function"]["name"] for t in first["tools"]]
        result = next(m for m in second["messages"] if m["role"] == "tool")
        envs = {e["name"]: e for e in json.loads(result["content"])["envs"]}
        assert {"arithmetic", "support_desk"} <= set(envs), result
        assert envs["support_desk"]["readme"] == "env://support_desk/README.md"
    finally:
        server.terminate()
        server.wait(timeout=30)
