"""The engine and sandboxes: acquired before the harness, live through scoring, released after it
(also on errors, timeouts and cancellation); ``--runtime`` hot swap end to end."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from workbench_local.sandbox.process_pool import ProcessPool

import workbench as wb
from tests.helpers import assert_user_error, last_json, query, write_file
from workbench.authoring.environment import needs_sandbox
from workbench.rollouts.engine import RolloutEngine
from workbench.store import Store


class RecordingPool(ProcessPool):
    """A real process pool that logs acquires and releases into a shared event list."""

    def __init__(self, events: list[tuple[str, str]], **kw: Any) -> None:
        super().__init__(wb.Local(), **kw)
        self.events = events

    async def acquire(self, rollout_id: str = "", task: Any = None) -> Any:
        sb = await super().acquire(rollout_id, task)
        self.events.append(("acquire", rollout_id))
        return sb

    async def release(self, sandbox: Any) -> None:
        if sandbox in self.held:
            self.events.append(("release", sandbox.rollout_id))
        await super().release(sandbox)


class ToolThenDone:
    """A chat client: call the ``probe`` tool once, then answer."""

    async def chat(self, *, base_url: str, model: str, messages: list[dict[str, Any]], tools: Any,
                   params: dict[str, Any]) -> Any:
        if messages[-1]["role"] == "tool":
            msg: dict[str, Any] = {"role": "assistant", "content": "done"}
        else:
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "probe", "arguments": "{}"}}]}
        return SimpleNamespace(message=msg, prompt_tokens=1, completion_tokens=1, finish_reason="stop", extra=None)


def make_env(events: list[tuple[str, str]], *, mode: str = "ok", group: bool = False) -> wb.Environment:
    rubric = wb.Rubric()

    async def probe(sandbox: wb.Sandbox, state: dict[str, Any]) -> str:
        """Touch the sandbox."""
        events.append(("tool", sandbox.rollout_id))  # type: ignore[attr-defined]
        state["sandbox_id"] = id(sandbox)
        await sandbox.write_file("mark.txt", "from the tool")
        if mode == "raise":
            raise RuntimeError("tool bug")
        if mode == "sleep":
            await sandbox.exec("sleep 30", timeout=60)
        return "ok"

    @rubric.reward
    async def reads_tool_file(sandbox: wb.Sandbox, state: dict[str, Any]) -> float:
        events.append(("reward", sandbox.rollout_id))  # type: ignore[attr-defined]
        r = await sandbox.exec("cat mark.txt")  # the same live sandbox the tool used
        return float(r.stdout == "from the tool" and state["sandbox_id"] == id(sandbox))

    if group:
        @rubric.group_reward(weight=0.0)
        async def all_alive(sandboxes: list[wb.Sandbox]) -> list[float]:
            events.append(("group", ",".join(sorted(s.rollout_id for s in sandboxes))))  # type: ignore[attr-defined]
            return [float((await s.exec("cat mark.txt")).ok) for s in sandboxes]

    harness = wb.ToolLoop(tools=[probe], max_turns=3)
    if mode == "harness":
        class Broken(wb.ToolLoop):
            async def run(self, rollout: wb.Rollout) -> None:
                assert rollout.sandbox is not None
                events.append(("harness-bug", rollout.id))
                raise ValueError("harness bug")

        harness = Broken(tools=[probe])
    return wb.Environment(name="sbx", tasks=wb.TaskSet.from_records([{"prompt": f"t{i}"} for i in range(2)]),
                          harness=harness, rubric=rubric)


async def run_engine(tmp_path: Path, env: wb.Environment, events: list[tuple[str, str]], *, timeout: float = 30,
                     r: int = 1, cancel_after: float | None = None) -> tuple[RolloutEngine, RecordingPool]:
    pool = await RecordingPool(events, run_id="e", size=2).start()
    store = Store(tmp_path / "db.sqlite")
    writer = store.writer()
    engine = RolloutEngine(env=env, client=ToolThenDone(), writer=writer, run_id="e", model="m",  # type: ignore[arg-type]
                           base_url="http://unused/v1", rollouts_per_task=r, concurrency=2, timeout_s=timeout,
                           sandboxes=pool)
    try:
        task = asyncio.ensure_future(engine.run(list(env.tasks)))
        if cancel_after is not None:
            await asyncio.sleep(cancel_after)
            task.cancel()
        with pytest.raises(asyncio.CancelledError) if cancel_after is not None else _nothing():
            await task
        assert not pool.held, "every sandbox is given back"
    finally:
        await pool.close()
        writer.close()
        store.close()
    return engine, pool


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _order(events: list[tuple[str, str]], rid: str) -> list[str]:
    return [kind for kind, who in events if who == rid or rid in who.split(",")]


async def test_sandbox_lives_from_before_the_harness_until_after_scoring(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    engine, pool = await run_engine(tmp_path, make_env(events), events)
    assert engine.counters.scored == 2 and engine.counters.reward_sum == 2.0
    for rid in ("e.0.0", "e.1.0"):
        assert _order(events, rid) == ["acquire", "tool", "reward", "release"]
    assert pool.stats.sandbox_seconds > 0


async def test_released_on_tool_error_harness_error_and_timeout(tmp_path: Path) -> None:
    for mode, timeout in (("raise", 30.0), ("harness", 30.0), ("sleep", 1.0)):
        events: list[tuple[str, str]] = []
        engine, _ = await run_engine(tmp_path / mode, make_env(events, mode=mode), events, timeout=timeout)
        for rid in ("e.0.0", "e.1.0"):
            order = _order(events, rid)
            assert order[0] == "acquire" and order[-1] == "release", (mode, order)
        if mode == "sleep":
            assert engine.counters.failed == 2  # timed out; no reward ran on a half-done rollout
            assert not any(k == "reward" for k, _ in events)


async def test_released_on_cancellation(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    await run_engine(tmp_path, make_env(events, mode="sleep"), events, cancel_after=1.0)
    acquired = [who for k, who in events if k == "acquire"]
    released = [who for k, who in events if k == "release"]
    assert acquired and sorted(acquired) == sorted(released)


async def test_group_rewards_with_sandboxes_hold_them_until_the_group_is_scored(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    engine, _ = await run_engine(tmp_path, make_env(events, group=True), events, r=2)
    assert engine.counters.scored == 4
    group_events = [who for k, who in events if k == "group"]
    assert sorted(group_events) == ["e.0.0,e.0.1", "e.1.0,e.1.1"]
    for rid in ("e.0.0", "e.0.1"):
        order = _order(events, rid)
        assert order.index("group") < order.index("release"), order


async def test_no_sandbox_when_nothing_asks_for_one(tmp_path: Path) -> None:
    events: list[tuple[str, str]] = []
    rubric = wb.Rubric()
    rubric.reward(lambda completion: 1.0, name="plain")
    env = wb.Environment(name="plain", tasks=wb.TaskSet.from_records([{"prompt": "x"}]),
                         harness=wb.SingleTurn(), rubric=rubric)
    assert not needs_sandbox(env)
    engine, _ = await run_engine(tmp_path, env, events)
    assert engine.counters.scored == 1 and not events


# -- the CLI: eval with --runtime ------------------------------------------------------------------
PROBE_ENV = '''
import workbench as wb

async def where(sandbox: wb.Sandbox) -> str:
    """Say where this runs."""
    r = await sandbox.exec("cat /etc/hostname 2>/dev/null; echo; id -u")
    return sandbox.kind + " " + " ".join(r.stdout.split())

def load_environment() -> wb.Environment:
    rubric = wb.Rubric()

    @rubric.metric
    def docker(state: dict, messages: list) -> float:
        return float(any("docker" in str(m.get("content")) for m in messages if m["role"] == "tool"))

    return wb.Environment(name="probe", tasks=wb.TaskSet.from_records([{"prompt": "where?"}]),
                          harness=wb.ToolLoop(tools=[where]), rubric=rubric, runtime=wb.Local(timeout=20))
'''
WHERE_SCRIPT = [{"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "where", "arguments": "{}"}}]},
                "done"]


def test_eval_runtime_hot_swap(tmp_path: Path, cli: Callable[..., Any], mock_server: Callable[..., Any],
                               store_path: Path, docker_client: Any) -> None:
    env = write_file(tmp_path / "probe_env.py", PROBE_ENV)
    url = mock_server("script", script=WHERE_SCRIPT).base_url
    base = ["eval", env, "--base-url", url, "-m", "mock-model", "-c", "1", "--json"]
    res = cli(*base)
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["errors"] == 0 and s["metrics"]["docker"] == 0.0
    res = cli(*base, "--runtime", "docker")
    assert res.rc == 0, res.stderr
    s = last_json(res.stdout)
    assert s["errors"] == 0 and s["metrics"]["docker"] == 1.0, s
    rows = query(store_path, "SELECT runtime FROM run ORDER BY created_at")
    assert [r[0] for r in rows] == ["local", "docker"]
    msgs = json.loads(query(store_path, "SELECT messages FROM rollout WHERE run_id=?", (s["run_id"],))[0][0])
    assert msgs[2]["content"].startswith("docker sandbox"), msgs[2]
    cost = query(store_path, "SELECT kind, provider, quantity FROM cost_event WHERE run_id=? AND kind='sandbox_seconds'",
                 (s["run_id"],))
    assert cost and cost[0][1] == "docker" and cost[0][2] > 0
    res = cli(*base, "--runtime", "docker:no-such-image-anywhere:0")
    line = assert_user_error(res, "no-such-image-anywhere:0", "not on this machine")
    assert "Traceback" not in line
    assert_user_error(cli(*base, "--runtime", "podman"), "unknown --runtime")
    assert_user_error(cli(*base, "--runtime", "modal"), "only in the cloud")
    res = cli(*base, "--runtime", "docker", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    assert_user_error(res, "Docker engine is not running")
    # Nothing half-made: the refused runs were never recorded.
    assert len(query(store_path, "SELECT id FROM run")) == 2


def test_cli_sandbox_commands(cli: Callable[..., Any], docker_client: Any) -> None:
    res = cli("sandbox", "image", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["image"] == "workbench-sandbox:2" and out["built"] is False  # idempotent: built once already
    res = cli("sandbox", "status", "--json")
    st = last_json(res.stdout)
    assert st["local"]["isolated"] is True and st["docker"]["running"] is True and st["docker"]["default_image"]
    res = cli("sandbox", "exec", "--runtime", "docker", "--", "python3", "-c", "print(6*7)")
    assert res.rc == 0 and res.stdout.strip() == "42", res
    res = cli("sandbox", "exec", "exit 5")
    assert res.rc == 5
    res = cli("sandbox", "exec", "--json", "--timeout", "0.5", "echo partial; sleep 5")
    r = last_json(res.stdout)
    assert r["timed_out"] is True and r["stdout"] == "partial\n"


@pytest.mark.slow  # an eval interrupted mid-rollout with sandboxed commands running, per runtime
@pytest.mark.parametrize("kind", ["local", "docker"])
def test_ctrl_c_mid_rollout_leaves_no_sandbox_behind(kind: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                     cli_env: dict[str, str], mock_server: Callable[..., Any]) -> None:
    import signal
    import subprocess

    from tests.helpers import workbench_argv
    from tests.sandbox.test_security import _procs_with, _wait

    def sandboxed() -> list[int]:  # the mock server's command line holds the script (and so the marker) too
        return _procs_with(marker, exclude=b"mock_openai")

    client = request.getfixturevalue("docker_client") if kind == "docker" else None
    marker = f"ctrlc-{kind}-{tmp_path.name}"
    script = [{"tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "run", "arguments": json.dumps({"cmd": f"sleep 120; echo {marker}"})}}]}]
    url = mock_server("script", script=script).base_url
    proc = subprocess.Popen([*workbench_argv(), "eval", "coding", "-n", "2", "-c", "2", "--base-url", url, "-m",
                             "mock-model", "--runtime", kind, "--json"], env=cli_env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _wait(lambda: len(sandboxed()) >= 2, 60), "the sandboxed commands should be running"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert b"Traceback" not in err
    assert _wait(lambda: not sandboxed(), 10), "sandboxed processes outlived the interrupted run"
    if kind == "docker":
        left = client.containers.list(all=True, filters={"label": ["workbench.sandbox=1", f"workbench.pid={proc.pid}"]})
        assert not left, [c.name for c in left]


def test_a_sandbox_tool_asks_for_a_sandbox_in_every_tool_harness() -> None:
    """A plain tool that declares ``sandbox`` gets one whether a ToolLoop or a UserSim offers it."""

    async def run(cmd: str, sandbox: wb.Sandbox) -> str:
        """Run a command."""
        return (await sandbox.exec(cmd)).output()

    tasks = wb.TaskSet.from_records([{"prompt": "x"}])
    for harness in (wb.ToolLoop(tools=[run]), wb.UserSim(persona="a user", tools=[run])):
        assert needs_sandbox(wb.Environment(name="t", tasks=tasks, harness=harness)), harness.describe()
    assert not needs_sandbox(wb.Environment(name="t", tasks=tasks, harness=wb.UserSim(persona="a user")))
