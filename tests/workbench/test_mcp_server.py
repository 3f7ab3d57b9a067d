"""``workbench mcp`` as a coding agent meets it: the real command as a subprocess, driven by the ``mcp``
SDK's own client over stdio (and once over streamable HTTP), against the mock model server."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sqlite3
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from tests.helpers import ADDER_ENV, REPO, MockServer, stop_process, workbench_argv, write_file

TOOLS = {"list_environments", "validate_environment", "run_eval", "list_runs", "show_rollout", "search_rollouts",
         "diff_rollouts", "rescore", "plan_launch"}
CAP = 16  # the --max-rollouts these servers run with
CONFIG_28 = REPO / "cloud_runtime" / "configs" / "long-context-28node.toml"


@contextlib.asynccontextmanager
async def serve(cli_env: dict[str, str], tmp_path: Path, *extra: str) -> AsyncIterator[ClientSession]:
    argv = workbench_argv()
    params = StdioServerParameters(command=argv[0], args=[*argv[1:], "mcp", "--max-rollouts", str(CAP), *extra],
                                   env=cli_env, cwd=str(tmp_path))
    stray: list[Exception] = []  # what the client could not read as a message (e.g. a print on stdout)

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            stray.append(message)

    with open(tmp_path / "mcp-server.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, message_handler=on_message) as session:
            await session.initialize()
            yield session
    assert not stray, f"the server wrote something other than MCP messages on stdout: {stray}"


async def call(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    res = await session.call_tool(tool, args)
    assert not res.is_error, f"{tool} failed: {res.content}"
    assert isinstance(res.structured_content, dict)
    return res.structured_content


def eval_args(server: MockServer, n: int = 3, r: int = 2) -> dict[str, Any]:
    return {"env": "arithmetic", "base_url": server.base_url, "model": "mock-model", "n": n, "r": r}


async def test_tools_and_environments(cli_env: dict[str, str], tmp_path: Path) -> None:
    async with serve(cli_env, tmp_path) as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert set(tools) == TOOLS
        assert all(t.description for t in tools.values())
        envs = {e["name"]: e for e in (await call(s, "list_environments"))["envs"]}
        assert envs["arithmetic"]["origin"] == "bundled" and envs["arithmetic"]["version"]
        assert envs["arithmetic"]["readme"] == "env://arithmetic/README.md"
        report = await call(s, "validate_environment", env="arithmetic", sample=5)
        assert report["ok"] is True and report["tasks_checked"] == 5 and report["env"] == "arithmetic"


async def test_eval_then_browse_diff_and_rescore(cli_env: dict[str, str], tmp_path: Path, store_path: Path,
                                                 arith_server: MockServer) -> None:
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    async with serve(cli_env, tmp_path) as s:
        res = await s.call_tool("run_eval", eval_args(arith_server), progress_callback=on_progress)
        assert not res.is_error, res.content
        summary = res.structured_content
        assert summary is not None
        run_id = summary["run_id"]
        assert summary["env"] == "arithmetic" and summary["model"] == "mock-model"
        assert summary["rollouts"] == 6 and summary["errors"] == 0 and summary["status"] == "completed"
        assert {"mean_reward", "pass_at_k", "rewards", "cost_usd"} <= set(summary)
        assert progress and progress[-1] == (6, 6), progress

        runs = (await call(s, "list_runs"))["runs"]
        assert [r["id"] for r in runs] == [run_id] and runs[0]["rollouts"] == 6
        one = await call(s, "list_runs", run=run_id)
        assert one["run"]["id"] == run_id and one["steps"] == []

        found = await call(s, "search_rollouts", run=run_id, sort="-reward", limit=4)
        assert found["count"] == 6 and len(found["rollouts"]) == 4
        assert all(r["run_id"] == run_id for r in found["rollouts"])
        rewards = [r["reward"] for r in found["rollouts"]]
        assert rewards == sorted(rewards, reverse=True)
        rollout_id = found["rollouts"][0]["id"]
        word = (await call(s, "search_rollouts", text="What is", run=run_id))
        assert word["count"] == 6

        rollout = await call(s, "show_rollout", rollout=rollout_id)
        assert rollout["id"] == rollout_id and rollout["run_id"] == run_id
        assert [m["role"] for m in rollout["messages"]][-1] == "assistant"
        assert set(rollout["rewards"]) >= {"correct"}

        d = await call(s, "diff_rollouts", a=f"{run_id}.0.0", b=f"{run_id}.0.1")
        assert d["a"] == f"{run_id}.0.0" and d["b"] == f"{run_id}.0.1" and d["same_task"] is True
        assert "messages" in d and "scores" in d

        dry = await call(s, "rescore", env="arithmetic", run=run_id)
        assert dry["rescored"] == 6 and dry["changed"] == 0 and dry["applied"] is False
        assert dry["before"]["mean"] == pytest.approx(summary["mean_reward"])
        applied = await call(s, "rescore", env="arithmetic", run=run_id, apply=True)
        assert applied["applied"] is True and applied["record_id"] is not None
    with sqlite3.connect(store_path) as db:
        assert db.execute("SELECT COUNT(*) FROM rollout WHERE run_id=?", (run_id,)).fetchone()[0] == 6


async def test_an_environment_that_prints_does_not_break_the_protocol(cli_env: dict[str, str], tmp_path: Path,
                                                                     arith_server: MockServer) -> None:
    """stdout is the stdio transport's: what an environment prints goes to the server's stderr."""
    noisy = ADDER_ENV.replace("    rows = [", "    print('hello from load_environment')\n    rows = [", 1)
    env_file = write_file(tmp_path / "envs" / "noisy_env.py", noisy)
    async with serve(cli_env, tmp_path) as s:
        assert (await call(s, "validate_environment", env=str(env_file), sample=3))["ok"] is True
        summary = await call(s, "run_eval", **{**eval_args(arith_server, n=2, r=1), "env": str(env_file)})
        assert summary["rollouts"] == 2 and summary["env"] == "adder"
    assert "hello from load_environment" in (tmp_path / "mcp-server.log").read_text()


MODAL_ENV = ADDER_ENV.replace("    if group_bonus:", """    @rubric.reward(weight=0.0)
    def in_a_box(completion: str, sandbox) -> float:
        return 0.0

    if group_bonus:""", 1).replace("        rubric=rubric,", "        rubric=rubric,\n        runtime=wb.ModalSandbox(),", 1)


async def test_run_eval_opens_no_modal_sandbox(cli_env: dict[str, str], tmp_path: Path,
                                               arith_server: MockServer) -> None:
    env_file = write_file(tmp_path / "envs" / "boxed_env.py", MODAL_ENV)
    before = arith_server.requests()
    async with serve(cli_env, tmp_path) as s:
        res = await s.call_tool("run_eval", {**eval_args(arith_server, n=1, r=1), "env": str(env_file)})
        assert res.is_error and "Modal (a paid cloud)" in res.content[0].text  # type: ignore[union-attr]
        assert (await call(s, "list_runs"))["runs"] == []
    assert arith_server.requests() == before


async def test_plan_launch_plans_and_launches_nothing(cli_env: dict[str, str], tmp_path: Path,
                                                      store_path: Path) -> None:
    async with serve(cli_env, tmp_path) as s:
        plan = await call(s, "plan_launch", env="arithmetic", config=str(CONFIG_28))
        assert plan["launched"] is False and plan["nodes"] == 28 and plan["gpus_per_node"] == 8
        assert plan["total_usd"] > 0 and plan["fits"] is True and plan["derivation"]
        assert plan["within_budget"] is True and plan["budget_problem"] is None
        tight = await call(s, "plan_launch", env="arithmetic", config=str(CONFIG_28), budget=10,
                           overrides={"cloud.nodes": 28})
        assert tight["launched"] is False and tight["within_budget"] is False
        assert "exceeds the budget" in tight["budget_problem"]
        assert (await call(s, "list_runs"))["runs"] == []
    with sqlite3.connect(store_path) as db:
        assert db.execute("SELECT COUNT(*) FROM run").fetchone()[0] == 0
        assert db.execute("SELECT COUNT(*) FROM cost_event").fetchone()[0] == 0


async def test_environment_resources(cli_env: dict[str, str], tmp_path: Path) -> None:
    async with serve(cli_env, tmp_path) as s:
        uris = {str(r.uri) for r in (await s.list_resources()).resources}
        assert {"env://arithmetic/README.md", "env://arithmetic/files", "env://arithmetic/files/__init__.py"} <= uris
        templates = {t.uri_template for t in (await s.list_resource_templates()).resource_templates}
        assert templates == {"env://{name}/README.md", "env://{name}/files/{path}"}
        readme = (await s.read_resource("env://arithmetic/README.md")).contents[0]
        assert readme.text == (REPO / "envs" / "arithmetic" / "README.md").read_text()
        index = (await s.read_resource("env://arithmetic/files")).contents[0]
        assert '"path":"__init__.py"' in index.text
        code = (await s.read_resource("env://arithmetic/files/__init__.py")).contents[0]
        assert "def load_environment" in code.text
        for bad in ("env://nope/README.md", "env://arithmetic/files/../../pyproject.toml",
                    "env://arithmetic/files/missing.txt"):
            with pytest.raises(MCPError):
                await s.read_resource(bad)
        assert (await call(s, "list_environments"))["envs"], "the server still serves after a bad read"


BAD_CALLS = [
    ("unknown env", "run_eval", {"env": "no_such_env", "n": 1}, "unknown environment 'no_such_env'"),
    ("unknown env to validate", "validate_environment", {"env": "no_such_env"}, "unknown environment"),
    ("unknown env to rescore", "rescore", {"env": "no_such_env"}, "unknown environment"),
    ("unknown run", "list_runs", {"run": "0000-nope"}, "no run '0000-nope'"),
    ("unknown run to search", "search_rollouts", {"run": "0000-nope"}, "no run '0000-nope'"),
    ("unknown rollout", "show_rollout", {"rollout": "0000-nope.0.0"}, "no rollout '0000-nope.0.0'"),
    ("unknown rollout to diff", "diff_rollouts", {"a": "0000-nope.0.0", "b": "0000-nope.0.1"}, "no rollout"),
    ("over the cap", "run_eval", {"env": "arithmetic", "n": CAP + 1, "r": 1}, f"at most {CAP} rollouts"),
    ("over the cap with r", "run_eval", {"env": "arithmetic", "n": 4, "r": 5}, "4 × 5 = 20"),
    ("a base_url without a model", "run_eval", {"env": "arithmetic", "base_url": "http://127.0.0.1:9/v1"},
     "needs the model name"),
    ("a bad argument type", "run_eval", {"env": "arithmetic", "n": "many"}, "bad argument n"),
    ("a missing argument", "show_rollout", {}, "bad argument rollout: field required"),
    ("a bad sort", "search_rollouts", {"sort": "sideways"}, "unknown sort 'sideways'"),
    ("a bad override", "plan_launch", {"env": "arithmetic", "overrides": {"nodes": 4}}, "dotted key"),
    ("no cloud table", "plan_launch", {"env": "arithmetic"}, "the plan needs cloud."),
    ("an unknown tool", "launch", {"env": "arithmetic"}, "unknown tool"),
]


async def test_bad_input_is_a_one_line_tool_error(cli_env: dict[str, str], tmp_path: Path,
                                                  arith_server: MockServer) -> None:
    before = arith_server.requests()
    async with serve(cli_env, tmp_path) as s:
        for what, tool, args, fragment in BAD_CALLS:
            res = await s.call_tool(tool, args)
            assert res.is_error, f"{what}: {tool}({args}) did not fail: {res.content}"
            assert len(res.content) == 1, what
            text = res.content[0].text  # type: ignore[union-attr]
            assert "\n" not in text and "Traceback" not in text and text.strip() == text, f"{what}: {text!r}"
            assert fragment.lower() in text.lower(), f"{what}: {fragment!r} not in {text!r}"
            assert (await call(s, "list_runs"))["runs"] == [], f"the server stopped serving after {what}"
    assert arith_server.requests() == before, "a refused run_eval called the model"


async def test_streamable_http(cli_env: dict[str, str], tmp_path: Path, closed_port: int) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    log = open(tmp_path / "mcp-http.log", "w")  # noqa: SIM115 - closed below
    token = "the-token-this-test-chose-0123456789"
    proc = subprocess.Popen([*workbench_argv(), "mcp", "--http", str(closed_port)], cwd=tmp_path,
                            env={**cli_env, "WORKBENCH_MCP_TOKEN": token},
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{closed_port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:  # until it listens
            assert proc.poll() is None, (tmp_path / "mcp-http.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", closed_port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "mcp-http.log").read_text()
                await asyncio.sleep(0.2)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            assert {t.name for t in (await s.list_tools()).tools} == TOOLS
            envs = (await call(s, "list_environments"))["envs"]
            assert "arithmetic" in {e["name"] for e in envs}
            res = await s.call_tool("show_rollout", {"rollout": "0000-nope.0.0"})
            assert res.is_error and "no rollout" in res.content[0].text  # type: ignore[union-attr]
            readme = (await s.read_resource("env://arithmetic/README.md")).contents[0]
            assert readme.text.startswith("# arithmetic")  # type: ignore[union-attr]
    finally:
        stop_process(proc)
        log.close()


# (case, the environment's arguments): run_eval of one task reads one task of the set, however large
TASK_SETS = [("the default set", None), ("a billion tasks", {"n": 1_000_000_000})]
PEAK_RSS_LIMIT = 1 << 30  # a billion tasks built would take hundreds of GiB; one task set read lazily, far less


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory in bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


@pytest.mark.parametrize(("case", "env_args"), TASK_SETS, ids=[c for c, _ in TASK_SETS])
async def test_run_eval_of_one_task_of_a_huge_task_set_answers_in_bounded_memory(
        cli_env: dict[str, str], tmp_path: Path, arith_server: MockServer, case: str,
        env_args: dict[str, Any] | None) -> None:
    import psutil

    async with serve(cli_env, tmp_path) as s:
        [server] = [p for p in psutil.Process().children(recursive=True)
                    if "mcp" in p.cmdline() and "--max-rollouts" in p.cmdline()]
        res = await s.call_tool("run_eval", {**eval_args(arith_server, n=1, r=1),
                                             **({"args": env_args} if env_args else {})})
        assert not res.is_error, f"{case}: {res.content}"
        summary = res.structured_content
        assert summary is not None and summary["rollouts"] == 1 and summary["status"] == "completed", summary
        assert [r["rollouts"] for r in (await call(s, "list_runs"))["runs"]] == [1]
        assert _peak_rss(server.pid) < PEAK_RSS_LIMIT, f"{case}: peak RSS {_peak_rss(server.pid)} bytes"
