"""MCP servers as toolsets (wb.MCPTools): real servers written with the mcp SDK, real `workbench eval`
processes against the scripted mock model, real SQLite. The model's moves come from the mock's
``--by-turn`` script, so concurrent rollouts each follow it."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, assert_user_error, last_json

# slow: MCP servers as toolsets through CLI evals, on both runtimes
pytestmark = pytest.mark.slow

COUNTER = REPO / "tests" / "fixtures" / "mcp_servers" / "counter_server.py"

ENV = '''
import sys
import workbench as wb

def load_environment(per_rollout=True, sandboxed=False, runtime="local", n=8, extra=None, url=None,
                     prefix2=None, startup_timeout=20.0, env=None, command=None, plain=False):
    kw = dict(url=url) if url else dict(command=command or [sys.executable, {server!r}], env=env or {{}})
    tools = [wb.MCPTools(per_rollout=per_rollout and not url, sandboxed=sandboxed, name="counter",
                         startup_timeout=startup_timeout, **kw)]
    if prefix2 is not None:
        tools.append(wb.MCPTools(command=[sys.executable, {server!r}], env={{"COUNTER_PREFIX": prefix2}}, name="other"))
    if plain:
        def increment(by: int = 1) -> int:
            """A plain tool with an MCP tool's name."""
            return by
        tools.append(increment)
    rubric = wb.Rubric()

    @rubric.reward
    async def count(mcp) -> float:
        return float((await mcp.call("get_count"))["count"])

    @rubric.metric
    async def server_pid(mcp) -> float:
        return float((await mcp.call("get_count"))["pid"])

    tasks = wb.TaskSet.from_records([{{"prompt": f"count {{i}}", "answer": "1"}} for i in range(n)], name="c")
    rt = wb.Docker() if runtime == "docker" else wb.Local()
    return wb.Environment(name="counter", tasks=tasks, harness=wb.ToolLoop(tools=tools, max_turns=4),
                          rubric=rubric, runtime=rt)
'''


def _call(name: str, args: dict[str, Any] | str, cid: str = "c1") -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": raw}}]}


@pytest.fixture
def counter_env(write_env: Callable[..., Path]) -> Path:
    return write_env(ENV.format(server=str(COUNTER)), "counter_env.py")


def _rollouts(db: Path, run_id: str) -> list[dict[str, Any]]:
    con = sqlite3.connect(db)
    con.row_factory = sqlite3.Row
    rows = [dict(r) for r in con.execute(
        "SELECT pk, id, status, error_kind, reward, messages, state FROM rollout WHERE run_id = ? "
        "ORDER BY task_index", (run_id,))]
    errs = dict(con.execute("SELECT rollout_pk, group_concat(kind || ': ' || message, ' | ') FROM rollout_error "
                            "WHERE run_id = ? GROUP BY rollout_pk", (run_id,)).fetchall())
    con.close()
    for r in rows:
        r["messages"], r["state"] = json.loads(r["messages"]), json.loads(r["state"])
        r["errors"] = errs.get(r["pk"], "")
    return rows


def _eval(cli: Callable[..., Any], env: Path, mock: Any, *args: str, timeout: float = 180.0,
          rc: int = 0) -> dict[str, Any]:
    res = cli("eval", env, "--base-url", mock.base_url, "-m", "mock-model", "--json", *args, timeout=timeout)
    assert res.rc == rc, res.stderr
    return last_json(res.stdout)


def test_each_rollout_gets_a_fresh_server_at_concurrency(cli, counter_env, mock_server, store_path) -> None:
    mock = mock_server("script", "--by-turn", script=[_call("increment", {"by": 1}), "done"])
    out = _eval(cli, counter_env, mock, "-c", "8")
    assert out["errors"] == 0 and out["rollouts"] == 8
    assert out["rewards"]["count"] == 1.0, "every rollout's server started at 0 and saw one increment"
    rows = _rollouts(store_path, out["run_id"])
    pids = {r["state"]["mcp_calls"][-1]["result"] for r in rows}
    assert len(pids) == 8, "eight rollouts, eight server processes"
    call = rows[0]["state"]["mcp_calls"][0]
    assert call["tool"] == "increment" and call["arguments"] == {"by": 1} and call["by"] == "model"
    assert call["server"] == "counter" and call["result"] == "1" and call["error"] is False and call["ms"] > 0
    assert [c["by"] for c in rows[0]["state"]["mcp_calls"][1:]] == ["reward", "reward"]
    tool_msg = next(m for m in rows[0]["messages"] if m["role"] == "tool")
    assert tool_msg["content"] == "1" and tool_msg["name"] == "increment"
    body = mock.bodies()[0]
    schema = next(t for t in body["tools"] if t["function"]["name"] == "increment")
    assert schema["function"]["parameters"]["properties"]["by"]["type"] == "integer", "the server's own schema"
    shown = cli("show", rows[0]["id"])
    assert shown.rc == 0 and "MCP tool calls" in shown.stdout, shown.stderr
    assert "increment" in shown.stdout and "get_count" in shown.stdout and "reward" in shown.stdout


def test_a_shared_server_keeps_its_state_across_the_run(cli, counter_env, mock_server, store_path) -> None:
    mock = mock_server("script", "--by-turn", script=[_call("increment", {"by": 1}), "done"])
    out = _eval(cli, counter_env, mock, "-c", "1", "-a", '{"per_rollout": false, "n": 4}')
    rows = _rollouts(store_path, out["run_id"])
    assert [r["reward"] for r in rows] == [1.0, 2.0, 3.0, 4.0], "one server: the count goes on"
    assert len({json.loads(r["state"]["mcp_calls"][-1]["result"])["pid"] for r in rows}) == 1


@pytest.mark.parametrize("runtime", ["local", "docker"])
def test_a_sandboxed_server_runs_in_the_rollouts_sandbox(cli, counter_env, mock_server, store_path, tmp_path,
                                                         runtime, request) -> None:
    if runtime == "docker":
        request.getfixturevalue("docker_client")  # starts the engine where it can, skips where it cannot exist
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only")
    outside = tmp_path / "written-by-server.txt"
    mock = mock_server("script", "--by-turn", script=[
        _call("whoami", {"probe": str(secret)}), _call("touch", {"path": str(outside)}), _call("increment", {}),
        "done"])
    out = _eval(cli, counter_env, mock, "-c", "3", "-a",
                json.dumps({"sandboxed": True, "runtime": runtime, "n": 3}), timeout=300)
    rows = _rollouts(store_path, out["run_id"])
    assert all(r["status"] == "ok" for r in rows), [r["errors"] for r in rows]
    assert out["rewards"]["count"] == 1.0
    for r in rows:
        who = json.loads(r["state"]["mcp_calls"][0]["result"])
        assert who["probe_visible"] is False, "the host's files are not in the sandbox"
        assert who["cwd"] == "/work"
    assert not outside.exists(), "a sandboxed server cannot write to the host"


def test_tool_errors_go_back_to_the_model(cli, counter_env, mock_server, store_path) -> None:
    mock = mock_server("script", "--by-turn", script=[
        _call("fail", {"message": "the CRM is read-only today"}), _call("increment", {"by": "lots"}),
        _call("increment", "{not json"), "done"])
    out = _eval(cli, counter_env, mock, "-c", "2", "-a", '{"n": 2}')
    rows = _rollouts(store_path, out["run_id"])
    r = rows[0]
    assert r["status"] == "ok" and r["reward"] == 0.0, "no increment went through"
    tool_msgs = [m["content"] for m in r["messages"] if m["role"] == "tool"]
    assert "the CRM is read-only today" in tool_msgs[0] and tool_msgs[0].startswith("Error")
    assert "by" in tool_msgs[1] and tool_msgs[1].startswith("Error"), "the server's schema error, to the model"
    assert "not a valid JSON object" in tool_msgs[2]
    assert [c["error"] for c in r["state"]["mcp_calls"][:2]] == [True, True]
    assert out["errors"] == 2, "each rollout recorded its tool errors"


def test_a_server_that_crashes_fails_its_rollout(cli, counter_env, mock_server, store_path) -> None:
    mock = mock_server("script", "--by-turn", script=[_call("crash", {}), "done"])
    out = _eval(cli, counter_env, mock, "-c", "2", "-a", '{"n": 2}', rc=2)  # 2: every rollout failed
    rows = _rollouts(store_path, out["run_id"])
    assert out["failed"] == 2 and {r["error_kind"] for r in rows} == {"tool"}
    assert all("went away" in r["errors"] and "counter" in r["errors"] for r in rows), rows[0]["errors"]
    assert rows[0]["state"]["mcp_calls"][0]["tool"] == "crash"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, str(COUNTER), "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the HTTP MCP server did not start")


def test_a_streamable_http_server(cli, counter_env, mock_server, store_path) -> None:
    port = _free_port()
    proc = _http_server(port)
    try:
        mock = mock_server("script", "--by-turn", script=[_call("increment", {"by": 2}), "done"])
        out = _eval(cli, counter_env, mock, "-c", "1", "-a", json.dumps({"url": f"http://127.0.0.1:{port}/mcp",
                                                                          "n": 2}))
        rows = _rollouts(store_path, out["run_id"])
        assert [r["reward"] for r in rows] == [2.0, 4.0] and out["errors"] == 0
    finally:
        proc.kill()
        proc.wait()


def test_an_http_server_that_disappears_mid_rollout(cli, counter_env, mock_server, store_path) -> None:
    port = _free_port()
    proc = _http_server(port)
    try:
        # The first rollout's tool call crashes the server; the next call (the second rollout's) finds it gone.
        mock = mock_server("script", "--by-turn", script=[_call("crash", {}), "done"])
        res = cli("eval", counter_env, "--base-url", mock.base_url, "-m", "mock-model", "--json", "-c", "1",
                  "-a", json.dumps({"url": f"http://127.0.0.1:{port}/mcp", "n": 2}), timeout=180)
        out = last_json(res.stdout)
        rows = _rollouts(store_path, out["run_id"])
        assert {r["status"] for r in rows} == {"error"} and {r["error_kind"] for r in rows} == {"tool"}
        assert all("went away" in r["errors"] for r in rows), [r["errors"] for r in rows]
    finally:
        proc.kill()
        proc.wait()


BAD = [
    ("no-such-command", {"command": ["/nonexistent/mcp-server"]}, ["counter", "does not exist"]),
    ("not-on-path", {"command": ["wb-no-such-mcp-server"]}, ["counter", "not on PATH"]),
    ("exits-at-start", {"env": {"COUNTER_EXIT_AT_START": "4"}}, ["counter", "exited before answering initialize",
                                                                  "refusing to start"]),
    ("never-initializes", {"env": {"COUNTER_NEVER_INIT": "1"}, "startup_timeout": 2},
     ["counter", "did not answer initialize within 2s"]),
    ("name-clash", {"prefix2": ""}, ["'increment'", "'counter'", "'other'", "include="]),
    ("plain-clash", {"plain": True}, ["'increment'", "plain tool", "'counter'"]),
]


@pytest.mark.parametrize(("case", "args", "fragments"), BAD, ids=[b[0] for b in BAD])
def test_bad_servers_stop_the_run_with_one_line(cli, counter_env, mock_server, store_path, case, args,
                                                fragments) -> None:
    mock = mock_server("script", "--by-turn", script=[_call("increment", {}), "done"])
    res = cli("eval", counter_env, "--base-url", mock.base_url, "-m", "mock-model", "-a",
              json.dumps({**args, "per_rollout": False, "n": 2}), timeout=120)
    assert_user_error(res, *fragments)
    assert mock.requests() == 0, "nothing was sent to the model"


def test_validate_scores_with_fresh_servers_and_reports_a_clash(cli, counter_env) -> None:
    ok = cli("validate", counter_env, "-a", '{"sandboxed": true, "n": 3}', timeout=180)
    assert ok.rc == 0 and "count 0.000" in ok.stdout and "problem" not in ok.stdout, ok.stdout + ok.stderr
    bad = cli("validate", counter_env, "-a", '{"prefix2": "", "per_rollout": false}', timeout=180)
    assert bad.rc != 0
    out = bad.stdout + bad.stderr
    assert "the MCP toolsets cannot start" in out and "'counter' and 'other'" in out, out
