"""OpenEnv environments (openenv-core 0.3.0) run as Workbench environments: ``workbench eval`` on a running
server (``openenv+http://``) and on an environment folder whose server Workbench starts (``openenv:DIR``),
against the mock OpenAI server; the environment's rewards are the rollouts' rewards."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.formats.openenv_support import (
    ENVS,
    EnvServer,
    echo_wheel,
    openenv_python,
    serve_processes,
    uv_cache_dir,
)
from tests.helpers import CliResult, MockServer, last_json
from workbench.frameworks.venvs import frameworks_dir

#: Slow: the OpenEnv framework environment (a pip install, once) and the environments' servers it starts.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def guess(n: int, call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "step", "arguments": json.dumps({"guess": n})}}]}


#: The model guesses 5, then 3, then stops acting.
GUESS_5_THEN_3 = [guess(5, "c1"), guess(3, "c2"), "I am done."]


@pytest.fixture(scope="module")
def python() -> Path:
    return openenv_python()


@pytest.fixture(scope="module")
def guess_server(python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EnvServer]:
    server = EnvServer(python, ENVS / "guess_env", tmp_path_factory.mktemp("openenv") / "guess.log")
    yield server
    server.stop()


@pytest.fixture
def openenv_cli(cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    """The CLI with this machine's framework environments (a private cache would build them again)."""

    def run(*args: Any, **env: str) -> CliResult:
        return cli(*args, env={"WORKBENCH_FRAMEWORKS_DIR": str(frameworks_dir()), **env}, timeout=400.0)

    return run


@pytest.mark.parametrize(("target", "reward", "done", "hint"), [(3, 1.0, 1.0, "lower"), (9, 0.0, 0.0, "higher")])
def test_eval_on_a_running_server_gives_the_environments_rewards(
        guess_server: EnvServer, mock_server: Callable[..., MockServer], openenv_cli: Callable[..., CliResult],
        target: int, reward: float, done: float, hint: str) -> None:
    mock = mock_server("script", "--by-turn", script=GUESS_5_THEN_3)
    res = openenv_cli("eval", f"openenv+{guess_server.url}", "-n", "4", "-a", json.dumps({"target": target}),
                      "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["rollouts"], out["errors"]) == (4, 0)
    assert out["mean_reward"] == reward
    assert out["metrics"] == {"openenv_done": done, "openenv_steps": 2.0}
    # The model acted with the step tool, whose parameters are the action's schema (metadata left out).
    body = mock.bodies()[0]
    (tool,) = body["tools"]
    assert tool["function"]["name"] == "step"
    assert set(tool["function"]["parameters"]["properties"]) == {"guess", "reason"}
    assert body["messages"][-1] == {"role": "user", "content": '{"hint": "Guess a number from 0 to 9.", "attempts": 0}'}
    follow_up = next(b for b in mock.bodies() if len(b["messages"]) > 2)
    assert follow_up["messages"][-1]["role"] == "tool"
    assert json.loads(follow_up["messages"][-1]["content"])["hint"] == hint


def test_a_full_server_makes_rollouts_wait_for_a_session(
        python: Path, tmp_path: Path, mock_server: Callable[..., MockServer],
        openenv_cli: Callable[..., CliResult]) -> None:
    server = EnvServer(python, ENVS / "guess_env", tmp_path / "one.log", GUESS_MAX_SESSIONS="1")
    try:
        mock = mock_server("script", "--by-turn", script=GUESS_5_THEN_3)
        res = openenv_cli("eval", f"openenv+{server.url}", "-n", "4", "-c", "4", "-a", '{"target": 5}',
                          "--base-url", mock.base_url, "-m", "mock-model", "--json")
    finally:
        server.stop()
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["rollouts"], out["errors"], out["mean_reward"]) == (4, 0, 1.0)
    assert out["metrics"]["openenv_steps"] == 1.0


def test_an_environment_folder_is_served_for_the_run_and_stopped_after(
        python: Path, mock_server: Callable[..., MockServer], openenv_cli: Callable[..., CliResult]) -> None:
    folder = ENVS / "echo_env"
    mock = mock_server("rules", rules=json.dumps([{"reply": "ping"}]))
    res = openenv_cli("eval", f"openenv:{folder}", "-n", "6", "-c", "6", "-a", '{"turns": 3}',
                      "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    # The text action: the assistant's text is the message; the episode's id is the rollout's.
    firsts = sorted(b["messages"][1]["content"] for b in mock.bodies() if len(b["messages"]) == 2)
    assert firsts == [f"Episode {out['run_id']}.{i}.0: say something (3 turns)." for i in range(6)]
    assert "tools" not in mock.bodies()[0]
    assert (out["env"], out["rollouts"], out["errors"]) == ("echo_env", 6, 0)
    # Each rollout has its own session: three steps each (reset's turns), one reward per "ping".
    assert out["mean_reward"] == 3.0
    assert out["metrics"] == {"openenv_done": 1.0, "openenv_steps": 3.0}
    assert serve_processes(folder) == []


def test_an_environment_package_is_installed_and_served_for_the_run(
        python: Path, tmp_path: Path, mock_server: Callable[..., MockServer], cli: Callable[..., CliResult]) -> None:
    wheel = echo_wheel(tmp_path)
    mock = mock_server("instant", reply="ping")
    # Its framework environment is built under the test's folder (from this machine's package cache) and
    # goes with it.
    res = cli("eval", f"openenv:{wheel}", "-n", "2", "--base-url", mock.base_url, "-m", "mock-model", "--json",
              env={"WORKBENCH_FRAMEWORKS_DIR": str(tmp_path / "frameworks"), "UV_CACHE_DIR": uv_cache_dir()},
              timeout=400.0)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["env"], out["rollouts"], out["errors"], out["mean_reward"]) == ("openenv-echo-env", 2, 0, 2.0)


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}


@pytest.mark.parametrize(("reset", "reward"), [({"a": 4, "b": 1}, 1.0), ({"a": 4, "b": 2}, 0.0)])
def test_an_mcp_environments_tools_are_the_models_tools(
        python: Path, mock_server: Callable[..., MockServer], openenv_cli: Callable[..., CliResult],
        reset: dict[str, int], reward: float) -> None:
    script = [tool_call("multiply", {"a": 1}, "c0"), tool_call("add", {"a": 4, "b": 1}, "c1"),
              tool_call("submit", {"answer": 5}, "c2"), "Done."]
    mock = mock_server("script", "--by-turn", script=script)
    res = openenv_cli("eval", f"openenv:{ENVS / 'sum_env'}", "-n", "2", "-a", json.dumps(reset),
                      "--base-url", mock.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["rollouts"], out["errors"], out["mean_reward"]) == (2, 0, reward)
    assert out["metrics"] == {"openenv_done": 1.0, "openenv_steps": 2.0}
    last = max(mock.bodies(), key=lambda b: len(b["messages"]))
    assert sorted(t["function"]["name"] for t in last["tools"]) == ["add", "submit"]
    first_user = next(m for m in last["messages"] if m["role"] == "user")
    assert first_user["content"] == f"What is {reset['a']} + {reset['b']}? Submit the answer."
    tool_replies = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert tool_replies == ["Invalid action: unknown tool 'multiply'; the tools are add, submit", "5"]


def test_a_server_left_without_sessions_is_stopped(python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a long-lived process (the app), a started server that no rollout uses does not stay."""
    from workbench.authoring import discovery
    from workbench.formats.openenv import servers
    from workbench.formats.openenv.harness import OpenEnvHarness

    folder = ENVS / "guess_env"
    env = discovery.load(f"openenv:{folder}")  # starts the server: the load reads the schema from it
    assert (env.name, env.dialect) == ("guess_env", "openenv")
    assert serve_processes(folder) != []
    assert isinstance(env.harness, OpenEnvHarness)
    monkeypatch.setattr(servers, "IDLE_STOP_S", 0.2)

    async def one_session() -> None:
        session, first, release = await env.harness.servers.open({"target": 1})
        assert first.observation["hint"] == "Guess a number from 0 to 9."
        await session.close()
        release()

    asyncio.run(one_session())
    deadline = time.monotonic() + 120
    while serve_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert serve_processes(folder) == []


def test_a_started_server_that_is_full_gets_a_second_one(
        python: Path, mock_server: Callable[..., MockServer], openenv_cli: Callable[..., CliResult]) -> None:
    mock = mock_server("script", "--by-turn", script=GUESS_5_THEN_3)
    res = openenv_cli("eval", f"openenv:{ENVS / 'guess_env'}", "-n", "3", "-c", "3", "-a", '{"target": 3}',
                      "--base-url", mock.base_url, "-m", "mock-model", "--json", GUESS_MAX_SESSIONS="1")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["rollouts"], out["errors"], out["mean_reward"]) == (3, 0, 1.0)
    assert serve_processes(ENVS / "guess_env") == []


def test_an_edited_folder_is_served_anew(python: Path, tmp_path: Path) -> None:
    """A reload after an edit (the app's hot reload) plays the edited environment, not the server of the old one."""
    from workbench.authoring import discovery
    from workbench.formats.openenv.harness import OpenEnvHarness

    folder = tmp_path / "guess_env"
    shutil.copytree(ENVS / "guess_env", folder, ignore=shutil.ignore_patterns("__pycache__"))

    started = []

    def first_hint() -> str:
        env = discovery.load(f"openenv:{folder}")
        assert isinstance(env.harness, OpenEnvHarness)
        started.append(env.harness.servers)

        async def one_session() -> str:
            session, first, release = await env.harness.servers.open({})
            await session.close()
            release()
            return str(first.observation["hint"])

        return asyncio.run(one_session())

    try:
        assert first_hint() == "Guess a number from 0 to 9."
        code = folder / "server" / "guess_environment.py"
        code.write_text(code.read_text().replace("Guess a number from 0 to 9.", "Pick a digit."))
        assert first_hint() == "Pick a digit."
    finally:
        for servers in started:
            servers.stop()
