"""The exec agent (``local_runtime/sandbox/agent.py``) on both runtimes, for real: what it must keep from
the per-command paths it replaces (whole-tree kills with output kept, output caps, concurrency), what it
adds (nothing outlives its command, commands cannot reach the agent, clean hand-over between rollouts)
and how it fails (an agent that dies is one clear error, never a hang)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

import pytest
from workbench_local.sandbox.channel import AgentDied

import workbench as wb
from tests.sandbox.conftest import hand_back, make_runtime

# slow: commands that sleep into their timeouts, escaped daemons and dying agents, on both runtimes
pytestmark = pytest.mark.slow

# A daemon that leaves the command's process group and session and is re-parented away from it.
DOUBLE_FORK = ("import os, sys, time\n"
               "if os.fork() == 0:\n"
               "    os.setsid()\n"
               "    if os.fork() == 0:\n"
               "        os.execvp('sh', ['sh', '-c', 'while :; do sleep 1; done # ' + sys.argv[1]])\n"
               "    os._exit(0)\n"
               "os.wait()\n"
               "print('forked', flush=True)\n")


# add_key("user", "wb-left-key", "x", KEY_SPEC_USER_KEYRING); prints the new key's serial, or -1 where
# the call is refused (Docker's seccomp profile) or unknown (another architecture)
ADD_KEY = ("import ctypes, os\n"
           "nr = {'x86_64': 248, 'aarch64': 217}.get(os.uname().machine)\n"
           "print(ctypes.CDLL(None).syscall(nr, b'user', b'wb-left-key', b'x', 1, -4) if nr else -1)\n")

# What of that key a later command can still reach: a search of the user, user-session and session
# keyrings (KEYCTL_SEARCH), and a read by serial (KEYCTL_READ) of any key /proc/keys still lists under
# its name (an unlinked key stays listed there until the kernel's key collector runs, unreadable).
FIND_KEY = ("import ctypes, os\n"
            "nr = {'x86_64': 250, 'aarch64': 219}.get(os.uname().machine)\n"
            "libc, found = ctypes.CDLL(None), []\n"
            "for ring in (-4, -5, -3):\n"
            "    k = libc.syscall(nr, 10, ring, b'user', b'wb-left-key', 0) if nr else -1\n"
            "    k >= 0 and found.append(f'search {ring}: {k}')\n"
            "for line in open('/proc/keys') if os.path.exists('/proc/keys') else ():\n"
            "    if nr and 'wb-left-key' in line:\n"
            "        buf = ctypes.create_string_buffer(8)\n"
            "        n = libc.syscall(nr, 11, int(line.split()[0], 16), buf, 8)\n"
            "        n >= 0 and found.append(f'read {line.split()[0]}: {buf.raw[:n]!r}')\n"
            "print('\\n'.join(found) or 'none')\n")


async def _count(sb: wb.Sandbox, marker: str) -> int:
    r = await sb.exec(f"ps -eo args 2>/dev/null | grep -c '[#] {marker}' || true", timeout=10)
    return int(r.stdout.strip() or 0)


async def test_timeout_kills_escaped_daemons_too(sandbox: wb.Sandbox) -> None:
    t0 = time.monotonic()
    r = await sandbox.exec(["sh", "-c", "python3 -c \"$0\" m1; echo partial; while :; do :; done", DOUBLE_FORK],
                           timeout=1.5)
    assert r.timed_out and r.exit_code == 124 and r.stdout == "forked\npartial\n", r
    assert time.monotonic() - t0 < 15  # a hang guard (10x the timeout), not a speed claim
    assert await _count(sandbox, "m1") == 0


async def test_no_process_outlives_its_command(sandbox: wb.Sandbox) -> None:
    """Background processes, redirected or double-forked, end with the command that started them: nothing
    lies in wait for a later command (the reward's)."""
    r = await sandbox.exec(["sh", "-c", "(sh -c 'sleep 300 # m2') > /dev/null 2>&1 &\npython3 -c \"$0\" m3",
                            DOUBLE_FORK], timeout=10)
    assert r.ok and r.stdout == "forked\n", r
    assert await _count(sandbox, "m2") == 0 and await _count(sandbox, "m3") == 0
    t0 = time.monotonic()
    r = await sandbox.exec("sleep 300 & echo started", timeout=60)  # holds stdout: ended at once, not at the timeout
    assert r.ok and not r.timed_out and r.stdout == "started\n", r
    assert time.monotonic() - t0 < 30, r  # not held until its timeout (the bound is half of it: a hang guard)


async def test_concurrent_commands_keep_their_own_output_and_limits(sandbox: wb.Sandbox) -> None:
    async def one(i: int) -> None:
        r = await sandbox.exec(["sh", "-c", f"cat; echo err{i} >&2; sleep 0.{i % 5}; exit {i % 7}"], stdin=f"in{i}\n")
        assert (r.stdout, r.stderr, r.exit_code) == (f"in{i}\n", f"err{i}\n", i % 7), (i, r)

    slow = asyncio.ensure_future(sandbox.exec("echo slow; sleep 30", timeout=1.0))
    await asyncio.gather(*(one(i) for i in range(12)))
    r = await slow
    assert r.timed_out and r.stdout == "slow\n"
    big = "x" * (3 << 20)  # more than a pipe and a frame hold: stdin is streamed in
    r = await sandbox.exec(["python3", "-c", "import sys; d = sys.stdin.read(); print(len(d), d == 'x' * len(d))"],
                           stdin=big)
    assert r.stdout.split() == [str(len(big)), "True"], r


async def test_output_capped_per_stream_with_exit_code_kept(sandbox: wb.Sandbox) -> None:
    cap = sandbox.limits.output_bytes
    r = await sandbox.exec(f"head -c {3 * cap} /dev/zero | tr '\\0' o; head -c {2 * cap} /dev/zero | tr '\\0' e >&2; "
                           "exit 5", timeout=60)
    assert r.exit_code == 5 and r.truncated
    assert r.stdout == "o" * cap and r.stderr == "e" * cap


async def test_exit_codes_and_errors(sandbox: wb.Sandbox) -> None:
    assert (await sandbox.exec(["sh", "-c", "kill -TERM $$"])).exit_code == 128 + signal.SIGTERM
    r = await sandbox.exec(["no-such-program-here"])
    assert r.exit_code == 127 and "no-such-program-here" in r.stderr
    r = await sandbox.exec("pwd", cwd="missing/dir")
    assert r.exit_code != 0 and "missing/dir" in r.stderr, r
    with pytest.raises(ValueError):
        await sandbox.exec("true", env={"BAD=KEY": "x"})


async def test_commands_cannot_reach_the_agent(sandbox: wb.Sandbox) -> None:
    """The agent is another uid (Docker) or the namespace's init and not dumpable (Local): a command can
    neither signal nor trace it, so it cannot break or impersonate it for the commands after it."""
    agent = getattr(sandbox, "agent", None)
    if agent is None:
        await sandbox.exec("true")
        agent = sandbox.agent  # type: ignore[attr-defined]
    pid = agent.info["pid"]
    r = await sandbox.exec(f"kill -9 {pid}; kill -STOP {pid}; cat /proc/{pid}/environ; ls /proc/{pid}/fd; "
                           f"python3 -c 'import os; os.kill({pid}, 9)'; echo tried")
    assert "tried" in r.stdout and "PATH=" not in r.stdout, r
    r = await sandbox.exec("echo still-answering", timeout=10)
    assert r.stdout == "still-answering\n" and agent.alive, r


async def test_the_next_rollout_starts_clean(runtime_kind: str) -> None:
    async with make_runtime(runtime_kind, pool_size=1).pool(run_id="agenttest", size=1) as pool:
        sb = await pool.acquire("agenttest.0.0")
        r = await sb.exec("echo a > /tmp/t && echo b > /dev/shm/s && (echo c > /.wb/c 2>/dev/null; true)")
        assert r.ok, r
        r = await sb.exec(["python3", "-c", ADD_KEY])  # a kernel key outlives the process that added it
        assert r.ok and (int(r.stdout) > 0 or runtime_kind == "docker"), r
        await hand_back(sb, pool)
        sb = await pool.acquire("agenttest.1.0")
        r = await sb.exec("ls -A /tmp /dev/shm; ls -A /.wb 2>/dev/null; true", timeout=10)
        assert r.ok and not {"t", "s", "c"} & set(r.stdout.split()), r
        r = await sb.exec(["python3", "-c", FIND_KEY])
        assert r.ok and r.stdout == "none\n", r
        await sb.close()


async def test_agent_death_is_one_clear_error(runtime_kind: str) -> None:
    rt = make_runtime(runtime_kind, timeout=20)
    async with rt.pool(size=1) as pool:
        sb: Any = await pool.acquire("death.0.0")
        assert (await sb.exec("true")).ok
        pid = sb.agent.info["pid"]
        running = asyncio.ensure_future(sb.exec("echo begun; sleep 30"))
        await asyncio.sleep(0.5)
        if runtime_kind == "local":
            os.killpg(sb._agent_proc.pid, signal.SIGKILL)  # from outside: the whole namespace goes
        else:
            from workbench_local.sandbox.docker_pool import connect

            connect().api.exec_start(connect().api.exec_create(sb.container_id, ["kill", "-9", str(pid)],
                                                               user="0:0")["Id"])
        t0 = time.monotonic()
        with pytest.raises(AgentDied, match="agent"):
            await running
        assert time.monotonic() - t0 < 10  # a hang guard: it says so at once, not when the 30 s sleep would end
        if runtime_kind == "local":  # a fresh namespace on the next command; the files are still there
            await sb.write_file("kept.txt", "k")
            r = await sb.exec("cat kept.txt")
            assert r.stdout == "k", r
        else:  # the container is broken: it says so, and the pool replaces it
            with pytest.raises(wb.SandboxError, match="agent"):
                await sb.exec("true")
        await sb.close()
        sb = await pool.acquire("death.1.0")
        assert (await sb.exec("echo fine")).stdout == "fine\n"
        await sb.close()


@pytest.mark.parametrize("case", ["basics", "timeout"])
async def test_without_the_agent(runtime_kind: str, case: str) -> None:
    """``exec_agent=False`` keeps the per-command paths (one bwrap / one docker exec each) working."""
    async with make_runtime(runtime_kind, exec_agent=False, timeout=20).sandbox() as sb:
        assert getattr(sb, "agent", None) is None
        if case == "basics":
            r = await sb.exec("cat; echo err >&2; exit 3", stdin="in")
            assert (r.exit_code, r.stdout, r.stderr) == (3, "in", "err\n")
        else:
            r = await sb.exec("echo before; while :; do :; done", timeout=1.0)
            assert r.timed_out and r.stdout == "before\n"
        assert getattr(sb, "agent", None) is None


async def test_an_agent_a_command_tampered_with_is_not_reused(runtime_kind: str) -> None:
    """A command may lower its agent's limits (same uid: prlimit needs no tracing). Commands started later
    would inherit them, so at the reset such an agent is replaced, never handed to the next rollout."""
    async with make_runtime(runtime_kind, pool_size=1).pool(run_id="tamper", size=1) as pool:
        sb: Any = await pool.acquire("tamper.0.0")
        normal = (await sb.exec("ulimit -n")).stdout.strip()
        pid = sb.agent.info["pid"]
        r = await sb.exec(["python3", "-c", f"import resource\ntry:\n resource.prlimit({pid}, resource.RLIMIT_NOFILE, "
                           "(64, 64)); print('lowered')\nexcept OSError as e: print('refused', e.errno)"])
        assert r.stdout.startswith("lowered" if runtime_kind == "local" else "refused"), r  # Docker: another uid
        await hand_back(sb, pool)
        sb = await pool.acquire("tamper.1.0")
        assert (await sb.exec("ulimit -n")).stdout.strip() == normal
        await sb.close()
