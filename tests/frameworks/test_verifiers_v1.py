"""verifiers 0.4 environments (its v1 API, ``import verifiers.v1 as vf``) run unchanged by Workbench.

Each environment under tests/frameworks/v1_envs is a v1 package as verifiers' own ``vf-init`` lays them out.
It is evaluated twice against the same deterministic mock model (two fresh mock processes, one rollout at a
time): by verifiers' own eval CLI in verifiers' own environment, and by ``workbench eval``; each rollout's
reward (a v1 episode's: the mean over its trainable traces) must be equal, task by task. Everything is real:
verifiers 0.4 in the environment uv builds for it (once per session), its harness programs, its MCP tool
server, processes, HTTP on 127.0.0.1, the SQLite store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import last_json

# slow: builds verifiers 0.4's environment on a fresh machine, and each case runs two evals of real agents
pytestmark = pytest.mark.slow

ENVS = Path(__file__).resolve().parent / "v1_envs"
EVAL_MAIN = "from verifiers.v1.cli.eval.main import main; main()"


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}]}


def _rules(*pairs: tuple[str | None, str]) -> dict[str, Any]:
    return {"mode": "rules", "rules": json.dumps([{"reply": r, **({"contains": c} if c else {})} for c, r in pairs])}


#: (env, tasks, rollouts per task, env args, the mock's arguments, the rewards expected per task): a single
#: turn with two weighted rewards and a metric; an MCP tool server the model calls; a multi-turn vf.Env that
#: answers guesses; a vf.Env whose finalize rewards sibling attempts that agree; a reward that raises.
PARITY: dict[str, tuple[str, int, int, dict[str, Any], dict[str, Any], list[float]]] = {
    "single turn": ("v1_single", 4, 1, {"num_tasks": 4}, _rules(
        ("0 + 1", "1"), ("1 + 2", "The answer is 3, and I am quite sure of it."), ("2 + 3", "6"), (None, "7")),
        [1.5, 1.0, 0.5, 1.5]),
    "tool server": ("v1_tools", 3, 1, {}, {"mode": "script", "by_turn": "", "script": [
        _call("add", {"a": 2, "b": 3}), "The answer is 5"]}, [1.0, 0.0, 0.0]),
    "multi-turn env": ("v1_game", 3, 1, {}, {"mode": "script", "by_turn": "", "script": ["5", "3", "4"]},
                       [1.25, 1.125, 0.25 / 3]),
    "group reward": ("v1_group", 2, 1, {}, {"mode": "script", "script": ["red", "blue", "red", "red"]},
                     [0.5, 0.5]),
    "raising reward": ("v1_raising", 4, 1, {}, _rules(
        ("even", "even"), ("odd one", "odd one"), ("odd", "odd"), ("plain", "plain")), [1.5, 0.0, 1.5, 0.0]),
}


@pytest.fixture(scope="session")
def v1_python() -> Path:
    """verifiers 0.4's interpreter, built by uv on the first use on this machine (minutes), then cached."""
    from workbench.frameworks.verifiers_v1 import FRAMEWORK

    return FRAMEWORK.ensure()


def _uv_cache() -> dict[str, str]:
    """The machine's uv cache for the harness programs verifiers prepares (tests give each run private XDG
    folders, where uv would download them again)."""
    uv = shutil.which("uv")
    if uv is None:
        return {}
    p = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=60)
    return {"UV_CACHE_DIR": p.stdout.strip()} if p.returncode == 0 and p.stdout.strip() else {}


def _mock(mock_server: Callable[..., Any], spec: dict[str, Any]) -> Any:
    spec = dict(spec)
    flags = ["--by-turn"] if spec.pop("by_turn", None) is not None else []
    flags += ["--tokens"] if spec.pop("tokens", None) is not None else []
    return mock_server(spec.pop("mode"), *flags, script=spec.pop("script", None), **spec)


def verifiers_eval(python: Path, env: str, base_url: str, n: int, r: int, env_args: dict[str, Any],
                   out: Path, roles: tuple[str, ...] = ("agent",)) -> dict[int, list[float]]:
    """verifiers' own eval CLI over ``env`` (one episode at a time, every role a local process): each task's
    episode rewards."""
    env_args = dict(env_args)
    flags = ["--env.id", env_args.pop("env_id")] if "env_id" in env_args else []
    flags += [f for k, v in env_args.items() for f in (f"--env.taskset.{k.replace('_', '-')}", json.dumps(v))]
    flags += [f for role in roles for f in (f"--env.{role}.runtime.type", "subprocess")]
    argv = [str(python), "-c", EVAL_MAIN, env, "-m", "mock-model", "-n", str(n), "-r", str(r), "-c", "1",
            "--no-push", "--no-rich", "-o", str(out), "--client.base-url", base_url,
            "--client.api-key-var", "WORKBENCH_PROXY_KEY", *flags]
    env_vars = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env_vars.update(PYTHONPATH=str(ENVS), WORKBENCH_PROXY_KEY="workbench-proxy", **_uv_cache())
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env_vars, cwd=out.parent)
    assert p.returncode == 0, p.stderr[-3000:]
    (traces,) = out.glob("*/traces.jsonl")
    by_task: dict[int, list[float]] = {}
    for line in traces.read_text().splitlines():
        episode = json.loads(line)
        scored = [t for t in episode["traces"] if t["agent"].get("trainable", True)] or episode["traces"]
        rewards = [sum(x["score"] * x["weight"] for x in t["rewards"].values() if x is not None) for t in scored]
        by_task.setdefault(episode["task"]["data"]["idx"], []).append(sum(rewards) / len(rewards))
    return by_task


def stored(store_path: Path, run_id: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(store_path)
    try:
        rows = conn.execute("SELECT pk, task_index, reward, messages, state, status FROM rollout WHERE run_id = ? "
                            "ORDER BY task_index, sample_index", (run_id,)).fetchall()
        out = []
        for pk, ti, reward, messages, state, status in rows:
            scores = dict(conn.execute("SELECT name, value FROM score WHERE rollout_pk = ?", (pk,)).fetchall())
            errors = [" ".join(map(str, e)) for e in
                      conn.execute("SELECT * FROM rollout_error WHERE rollout_pk = ?", (pk,)).fetchall()]
            calls = conn.execute("SELECT COUNT(*) FROM model_call WHERE rollout_pk = ?", (pk,)).fetchone()[0]
            out.append({"task_index": ti, "reward": reward, "scores": scores, "messages": json.loads(messages),
                        "state": json.loads(state), "status": status, "errors": errors, "calls": calls})
        return out
    finally:
        conn.close()


def workbench_env(cli_env: dict[str, str]) -> dict[str, str]:
    from workbench.frameworks.venvs import frameworks_dir

    return {"WORKBENCH_FRAMEWORKS_DIR": str(frameworks_dir()), **_uv_cache()}


@pytest.mark.parametrize("case", list(PARITY))
def test_rewards_equal_verifiers_own_eval(case: str, v1_python: Path, mock_server: Callable[..., Any],
                                          cli: Callable[..., Any], cli_env: dict[str, str], store_path: Path,
                                          tmp_path: Path) -> None:
    env, n, per_task, env_args, spec, expected = PARITY[case]
    (tmp_path / "vf").mkdir()
    ref = verifiers_eval(v1_python, env, _mock(mock_server, spec).base_url, n, per_task, env_args,
                         tmp_path / "vf" / "out")
    assert sorted(ref) == list(range(n))

    args = ["-a", json.dumps(env_args)] if env_args else []
    r = cli("eval", ENVS / env, *args, "--base-url", _mock(mock_server, spec).base_url, "-m", "mock-model",
            "-n", n, "-r", per_task, "-c", "1", "--json", env=workbench_env(cli_env), timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    out = last_json(r.stdout)
    assert out["env"] == env and out["rollouts"] == n * per_task and out["failed"] == 0
    mine = stored(store_path, out["run_id"])
    by_task: dict[int, list[float]] = {}
    for m in mine:
        assert m["status"] == "ok", m
        by_task.setdefault(m["task_index"], []).append(m["reward"])
        # every model call went through Workbench's proxy and is stored with the rollout
        assert m["calls"] == sum(1 for x in m["messages"] if x["role"] == "assistant") >= 1, m
    for task in range(n):
        assert sorted(by_task[task]) == pytest.approx(sorted(ref[task]), abs=1e-6), (case, task, ref, by_task)
    assert [by_task[t][0] for t in range(n)] == pytest.approx(expected, abs=1e-6), (case, by_task)


def test_verifiers_user_simulator_env_plays_a_taskset_as_in_verifiers(v1_python: Path,
                                                                     mock_server: Callable[..., Any],
                                                                     cli: Callable[..., Any], cli_env: dict[str, str],
                                                                     store_path: Path, tmp_path: Path) -> None:
    """``-a '{"env_id": "user-sim"}'`` is ``vf-eval --env.id user-sim``: verifiers' simulated user (an
    untrainable agent on the null harness) opens and ends the conversation; only the assistant is scored, and
    its conversation is the rollout's last (its reply the completion)."""
    spec = _rules(("Hello", "What is 2 + 3?"), ("2 + 3", "5"), (None, "###DONE###"))
    env_args = {"num_tasks": 4, "env_id": "user-sim"}
    (tmp_path / "vf").mkdir()
    ref = verifiers_eval(v1_python, "v1_single", _mock(mock_server, spec).base_url, 4, 1, env_args,
                         tmp_path / "vf" / "out", roles=("assistant", "user"))
    r = cli("eval", ENVS / "v1_single", "-a", json.dumps(env_args), "--base-url", _mock(mock_server, spec).base_url,
            "-m", "mock-model", "-n", 4, "-c", "1", "--json", env=workbench_env(cli_env), timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    rows = stored(store_path, last_json(r.stdout)["run_id"])
    assert [row["reward"] for row in rows] == pytest.approx([ref[t][0] for t in range(4)], abs=1e-6)
    assert [row["reward"] for row in rows] == pytest.approx([0.5, 0.5, 1.5, 0.5])
    for row in rows:
        assert len(row["state"]["conversations"]) == 2 and row["messages"][-1]["role"] == "assistant"
        assert row["messages"][-1]["content"] == "5" and row["scores"]["episode_metrics.user_turns"] == 2.0


def test_a_raising_reward_is_a_reward_error_naming_it(v1_python: Path, mock_server: Callable[..., Any],
                                                       cli: Callable[..., Any], cli_env: dict[str, str],
                                                       store_path: Path) -> None:
    spec = PARITY["raising reward"][4]
    r = cli("eval", ENVS / "v1_raising", "--base-url", _mock(mock_server, spec).base_url, "-m", "mock-model",
            "-n", 4, "-c", "1", "--json", env=workbench_env(cli_env), timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    out = last_json(r.stdout)
    assert out["failed"] == 0 and out["errors"] == 2
    rows = stored(store_path, out["run_id"])
    assert [bool(row["errors"]) for row in rows] == [False, True, False, True]
    assert all("picky" in e and "ValueError" in e for row in rows for e in row["errors"])


def test_the_tool_servers_calls_are_in_the_trace(v1_python: Path, mock_server: Callable[..., Any],
                                                 cli: Callable[..., Any], cli_env: dict[str, str],
                                                 store_path: Path) -> None:
    """The tool call, the MCP server's answer and the reply that used it are the rollout's messages, as the
    model saw them (the conversation the proxy recorded), with verifiers' dialect and stop condition."""
    mock = _mock(mock_server, PARITY["tool server"][4])
    r = cli("eval", ENVS / "v1_tools", "--base-url", mock.base_url, "-m", "mock-model", "-n", 1, "--json",
            env=workbench_env(cli_env), timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    (row,) = stored(store_path, last_json(r.stdout)["run_id"])
    roles = [m["role"] for m in row["messages"]]
    assert roles[-3:] == ["assistant", "tool", "assistant"] and row["calls"] == 2
    assert row["messages"][-2]["content"] == "5" and row["messages"][-1]["content"] == "The answer is 5"
    assert row["scores"] == {"correct": 1.0, "tool_results": 1.0}
    assert row["state"]["verifiers"]["stop_condition"] == "agent_completed"


#: What the model's bash command tries: read a file of the host's /tmp, write into the project, count the
#: processes it can see, write its own home and /tmp.
_ESCAPE = ("cat {secret} || echo no-secret; echo pwn > {project}/PWNED || echo no-write; "
           "echo procs=$(ls -d /proc/[0-9]* | wc -l); touch $HOME/ok && echo home-ok; touch /tmp/{mark} && echo tmp-ok")


def test_the_agents_commands_run_confined_by_workbench_local_runtime(
        v1_python: Path, mock_server: Callable[..., Any], cli: Callable[..., Any], cli_env: dict[str, str],
        store_path: Path, tmp_path: Path) -> None:
    """verifiers' ``bash`` harness runs the model's command on its local runtime; in Workbench that runtime's
    processes are confined as ``wb.Local()`` confines a sandbox: the host's files and processes out of sight,
    the project read-only, a home and a ``/tmp`` of the agents' own."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    project = tmp_path / "project"
    project.mkdir()
    mark = f"wb-confined-{tmp_path.name}-{os.getpid()}"
    command = _ESCAPE.format(secret=secret, project=project, mark=mark)
    mock = _mock(mock_server, {"mode": "script", "by_turn": "", "script": [_call("bash", {"command": command}), "1"]})
    r = cli("eval", ENVS / "v1_single", "-a", json.dumps({"num_tasks": 1}), "--base-url", mock.base_url,
            "-m", "mock-model", "-n", 1, "--json", env=workbench_env(cli_env), timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    (row,) = stored(store_path, last_json(r.stdout)["run_id"])
    (seen,) = [m["content"] for m in row["messages"] if m["role"] == "tool"]
    assert "the host's secret" not in seen and "no-secret" in seen, seen
    assert "no-write" in seen and not (project / "PWNED").exists(), seen
    assert "home-ok" in seen and "tmp-ok" in seen and not (Path("/tmp") / mark).exists(), seen
    procs = int(seen.split("procs=")[1].split()[0])
    assert procs < 20, seen  # the sandbox's own few (bwrap's init, the agent, its shell), not the machine's
    assert row["status"] == "ok" and row["calls"] == 2


def test_loaded_in_process_it_is_a_workbench_environment_of_the_v1_dialect(v1_python: Path) -> None:
    from workbench.authoring import discovery
    from workbench.frameworks.verifiers_v1 import V1Harness

    env = discovery.load(str(ENVS / "v1_single"), {"num_tasks": 2})
    try:
        assert (env.name, env.dialect) == ("v1_single", "verifiers v1")
        assert env.adapter == "verifiers 0.4.0" and isinstance(env.harness, V1Harness)
        assert [(f.name, f.kind, f.weight) for f in env.rubric.functions] == [
            ("brief", "reward", 0.5), ("correct", "reward", 1.0), ("reply_chars", "metric", 0.0)]  # verifiers' order
        tasks = list(env.tasks.take(2))
        assert [t.prompt for t in tasks] == [[{"role": "user", "content": "What is 0 + 1?"}],
                                             [{"role": "user", "content": "What is 1 + 2?"}]]
        assert [t.answer for t in tasks] == ["1", "3"]
    finally:
        env.harness.bridge.close()
        assert not env.harness.bridge.alive


def test_validate_and_rescore_score_with_the_tasks_own_code(v1_python: Path, mock_server: Callable[..., Any],
                                                            cli: Callable[..., Any], cli_env: dict[str, str],
                                                            tmp_path: Path) -> None:
    """validate scores gold and empty answers through the worker; a multi-turn rollout's trace is token-exact;
    rescore reproduces an unchanged environment's stored scores and re-scores with the task's code once its
    files changed."""
    env_dir = tmp_path / "envs" / "v1_game"
    shutil.copytree(ENVS / "v1_game", env_dir)
    extra = workbench_env(cli_env)
    v = cli("validate", env_dir, "--json", env=extra, timeout=600)
    assert v.rc == 0, v.stderr[-3000:]
    report = last_json(v.stdout)
    assert report["ok"] and report["empty"]["found"] == 0.0 and report["tasks_checked"] == 3

    # a token-returning model: every turn's tokens extend the last turn's (the trace is token-exact)
    mock = _mock(mock_server, {**PARITY["multi-turn env"][4], "tokens": ""})
    r = cli("eval", env_dir, "--base-url", mock.base_url, "-m", "mock-model", "-n", 3, "-c", "1", "--json",
            env=extra, timeout=600)
    assert r.rc == 0, r.stderr[-3000:]
    run_id = last_json(r.stdout)["run_id"]
    assert last_json(r.stdout)["metrics"]["token_mismatch"] == 0.0

    def rescored() -> dict[str, Any]:
        res = cli("rescore", env_dir, "--run", run_id, "--json", env=extra, timeout=600)
        assert res.rc == 0, res.stderr[-3000:]
        return last_json(res.stdout)

    same = rescored()
    assert (same["changed"], same["failed"], same["after"]["mean"]) == (0, 0, pytest.approx(same["before"]["mean"]))
    init = env_dir / "__init__.py"
    init.write_text(init.read_text().replace("return 1.0 / max(1, trace.num_turns)", "return 0.0"))
    changed = rescored()
    by_name = {f["name"]: f for f in changed["functions"]}
    assert (changed["changed"], by_name["quick"]["after"]["mean"], by_name["found"]["changed"]) == (3, 0.0, 0)
    assert changed["after"]["mean"] == pytest.approx((1.0 + 1.0 + 0.0) / 3)


def _agent_programs(pid: int) -> list[str]:
    """The command lines of the agent programs under the worker ``pid``: the processes running a script verifiers
    prepared, less the fork servers that start them (which serve on; a forked run is a fork server's child) and
    the sandboxes they start in."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [("", p) for p in children.get(pid, [])]
    while todo:
        parent_cmd, p = todo.pop()
        try:
            cmd = (Path("/proc") / str(p) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "bwrap" in cmd.split(" ", 1)[0]:  # the sandbox a process starts in, not a program
            todo += [(parent_cmd, c) for c in children.get(p, [])]
            continue
        if "runtimes/scripts" in cmd and not ("program_zygote.py" in cmd and "program_zygote.py" not in parent_cmd):
            out.append(cmd)
        todo += [(cmd, c) for c in children.get(p, [])]
    return out


def test_a_rollout_the_run_gives_up_stops_its_agent_and_the_worker_serves_on(
        v1_python: Path, mock_server: Callable[..., Any]) -> None:
    """A cancelled rollout (a timeout, Ctrl-C) is cancelled in the worker too: its agent program ends while the
    model call it waits on is still open, and the worker goes on answering."""
    import asyncio

    from tests.helpers import wait_for
    from workbench.authoring import discovery

    held = mock_server("instant", "--hold")
    env = discovery.load(str(ENVS / "v1_single"), {"num_tasks": 1})
    bridge = env.harness.bridge
    try:
        async def give_up() -> None:
            job = asyncio.ensure_future(bridge.acall("rollout", task=0, base_url=held.base_url, model="mock-model"))
            await asyncio.to_thread(wait_for, lambda: held.requests() >= 1, 300, "the agent's model call")
            assert _agent_programs(bridge.proc.pid)
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job

        asyncio.run(give_up())
        wait_for(lambda: not _agent_programs(bridge.proc.pid), 120, "the agent program to end")
        scored = bridge.call("score", task=0, messages=[{"role": "user", "content": "What is 0 + 1?"},
                                                        {"role": "assistant", "content": "1"}])
        assert scored["traces"][0]["rewards"]["correct"]["score"] == 1.0 and bridge.alive
    finally:
        held.release()
        bridge.close()
