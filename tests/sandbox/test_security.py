"""Security of both sandbox runtimes: what a hostile command inside must not be able to do.

Each test runs for real against ``wb.Local()`` (bubblewrap) and ``wb.Docker()`` (a running engine).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import workbench as wb
from tests.helpers import REPO, last_json
from workbench.authoring.sandbox import SandboxPathError

CONNECT = ("import socket, sys\n"
           "sys.argv.append('3')\n"
           "try:\n"
           "    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))\n"
           "    s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(200))\n"
           "except OSError as e:\n"
           "    print('blocked:', e); sys.exit(7)\n")


@pytest.fixture
async def secret_server() -> AsyncIterator[tuple[int, str]]:
    """An HTTP server on every host address (0.0.0.0) answering a secret."""
    token = "srv-" + secrets.token_hex(8)

    async def handle(request: web.Request) -> web.Response:
        return web.Response(text=token)

    app = web.Application()
    app.router.add_get("/", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "0.0.0.0", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield port, token
    await runner.cleanup()


def bridge_gateway(client: Any) -> str:
    """This machine's address on Docker's default bridge (docker0)."""
    import ipaddress

    cfg = client.networks.get("bridge").attrs["IPAM"]["Config"][0]
    return cfg.get("Gateway") or str(ipaddress.ip_network(cfg["Subnet"])[1])


def host_addresses(runtime_kind: str) -> list[str]:
    addrs = ["127.0.0.1"]
    if runtime_kind == "docker":
        from workbench_local.sandbox.docker_pool import connect

        addrs.append(bridge_gateway(connect()))
    else:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
        addrs += out[:1]
    return addrs


async def test_no_network_egress(sandbox: wb.Sandbox, runtime_kind: str, secret_server: tuple[int, str]) -> None:
    port, token = secret_server
    for addr in host_addresses(runtime_kind):
        # The server really answers on that address (so "blocked" below means the sandbox, not the server).
        reader, writer = await asyncio.open_connection(addr, port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        assert token in (await reader.read()).decode()
        writer.close()
        r = await sandbox.exec(["python3", "-c", CONNECT, addr, str(port)], timeout=15)
        assert r.exit_code == 7 and token not in r.stdout, (addr, r)
    r = await sandbox.exec(["python3", "-c", CONNECT, "1.1.1.1", "53"], timeout=15)
    assert r.exit_code == 7, r


async def test_host_files_and_config_unreadable(sandbox: wb.Sandbox, tmp_path: Path) -> None:
    token = "host-secret-" + secrets.token_hex(8)
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    config = Path.home() / ".config" / "workbench" / f"sandbox-test-{secrets.token_hex(4)}"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(token)
    try:
        for path in (secret, config, REPO / "pyproject.toml", Path.home() / ".bash_history"):
            r = await sandbox.exec(["cat", str(path)], timeout=10)
            assert r.exit_code != 0 and token not in r.stdout, (path, r)
            # Outside the workdir, or (when the host path happens to start with /work) a path inside the
            # sandbox's own /work that does not exist there: never the host's file.
            with pytest.raises((SandboxPathError, FileNotFoundError)):
                await sandbox.read_file(str(path))
        r = await sandbox.exec(f"ls -a {Path.home()} /root /home {REPO} 2>&1; cat /etc/shadow 2>&1", timeout=10)
        assert token not in r.stdout and "pyproject.toml" not in r.stdout
        assert "keyrings" not in r.stdout and ".config" not in r.stdout, r.stdout
    finally:
        config.unlink()


async def test_parent_environment_not_visible(sandbox: wb.Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "env-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("WORKBENCH_API_KEY", token)
    monkeypatch.setenv("OPENAI_API_KEY", token)
    r = await sandbox.exec("env; cat /proc/1/environ 2>/dev/null | tr '\\0' '\\n'", timeout=10)
    assert r.ok and token not in r.stdout
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines() if "=" in line}
    assert not names & {"OPENAI_API_KEY", "WORKBENCH_API_KEY", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST"}, names
    # What a command asks for, it gets; nothing else.
    r = await sandbox.exec("echo $ONLY_THIS", env={"ONLY_THIS": "yes"})
    assert r.stdout.strip() == "yes"


async def test_no_writes_outside_the_workdir(sandbox: wb.Sandbox) -> None:
    marker = "wb-" + secrets.token_hex(4)
    r = await sandbox.exec(f"for d in /usr /etc /bin /{marker} /lib; do touch $d/{marker} 2>/dev/null && echo WROTE $d; done; "
                           "touch ok.txt && echo workdir-ok", timeout=10)
    assert "WROTE" not in r.stdout and "workdir-ok" in r.stdout, r
    assert not any(Path(d, marker).exists() for d in ("/usr", "/etc", "/bin", "/lib"))
    for bad in ("../escape.txt", "/etc/" + marker, "a/../../escape.txt"):
        with pytest.raises(SandboxPathError):
            await sandbox.write_file(bad, "x")


async def test_symlink_escape_fails(sandbox: wb.Sandbox, tmp_path: Path) -> None:
    token = "link-secret-" + secrets.token_hex(8)
    secret = tmp_path / "target.txt"
    secret.write_text(token)
    r = await sandbox.exec(f"ln -s /etc/passwd passwd && ln -s / root && ln -s .. up && ln -s {secret} host "
                           "&& mkdir d && ln -s ../../.. d/deep && echo inside > a.txt && ln -s a.txt b.txt", timeout=10)
    assert r.ok, r
    for path in ("passwd", "root/etc/passwd", "up/x", "host", "d/deep/etc/hostname", "root"):
        with pytest.raises((SandboxPathError, IsADirectoryError)):
            await sandbox.read_file(path)
    for path in ("passwd", "root/tmp/pwned", "up/pwned", "host", "d/deep/pwned"):
        with pytest.raises(SandboxPathError):
            await sandbox.write_file(path, "pwned")
    assert secret.read_text() == token
    # Links that stay inside the workdir are fine.
    assert await sandbox.read_file("b.txt") == "inside\n"
    await sandbox.write_file("b.txt", "changed")
    assert await sandbox.read_file("a.txt") == "changed"
    # download copies links as links, never what they point to.
    out = tmp_path / "out"
    await sandbox.download(".", out)
    assert (out / "host").is_symlink() and (out / "a.txt").read_text() == "changed"


# Both bombs stop themselves at four times the sandbox's limit and then wait: where the limit did not stop
# them they are still there when the (generous) timeout comes, and the test fails on `timed_out`.
COUNTED_FORKS = ("import errno, os, sys, time\n"
                 "n = 0\n"
                 "try:\n"
                 "    while n < int(sys.argv[1]):\n"
                 "        if os.fork() == 0:\n"
                 "            time.sleep(600); os._exit(0)\n"
                 "        n += 1\n"
                 "except OSError as e:\n"
                 "    print('forks', n, 'refused', errno.errorcode[e.errno], flush=True); sys.exit(3)\n"
                 "print('forks', n, 'never refused', flush=True); time.sleep(600)\n")
COUNTED_ALLOCS = ("import sys, time\n"
                  "x = []\n"
                  "while len(x) * 16 < int(sys.argv[1]):\n"
                  "    x.append(bytearray(16 * 2**20)); print(len(x) * 16, flush=True)\n"
                  "print('never refused', flush=True); time.sleep(600)\n")
BOMB_TIMEOUT = 120  # the limits stop both bombs within a second or two


async def test_fork_bomb_contained(sandbox: wb.Sandbox) -> None:
    """The process limit (64 here) stops a fork bomb: forking fails with EAGAIN and the command ends on its
    own, long before its timeout."""
    pids = sandbox.limits.pids
    r = await sandbox.exec(["python3", "-c", COUNTED_FORKS, str(4 * pids)], timeout=BOMB_TIMEOUT)
    assert not r.timed_out and r.exit_code == 3, r
    forks, verdict, err = r.stdout.split()[1:]
    assert (verdict, err) == ("refused", "EAGAIN") and 0 < int(forks) <= pids, r
    # The classic shell bomb ends too, with the shell's fork failures in its stderr.
    r = await sandbox.exec("bomb() { bomb | bomb & }; bomb; sleep 1; echo still-here", timeout=BOMB_TIMEOUT)
    assert not r.timed_out, r
    assert "Cannot fork" in r.stderr or "can't fork: Resource temporarily unavailable" in r.stderr, r
    # The host is unharmed: it can still start processes, and so can the sandbox.
    assert subprocess.run(["true"]).returncode == 0
    r = await sandbox.exec("echo alive", timeout=BOMB_TIMEOUT)
    assert r.stdout == "alive\n", r


def docker_oom_kills(stdout: str) -> int:
    """The container's OOM-kill count, from its memory cgroup's ``memory.oom_control`` (v1) or
    ``memory.events`` (v2), as printed by ``cat``."""
    counts = [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("oom_kill ")]
    assert len(counts) == 1, stdout
    return counts[0]


async def test_memory_bomb_contained(sandbox: wb.Sandbox, runtime_kind: str) -> None:
    """The memory limit (256 MiB here) stops a memory bomb before it gets that much, long before its timeout:
    the sandbox's memory cgroup's OOM killer takes the command, and Local says why (where the machine gives
    Local no cgroup, the allocation fails under RLIMIT_DATA instead)."""
    oom = "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null"
    before = docker_oom_kills((await sandbox.exec(oom)).stdout) if runtime_kind == "docker" else 0
    limit_mb = sandbox.limits.memory_mb
    r = await sandbox.exec(["python3", "-c", COUNTED_ALLOCS, str(4 * limit_mb)], timeout=BOMB_TIMEOUT)
    assert not r.timed_out and "never refused" not in r.stdout, r
    assert int(r.stdout.split()[-1]) < limit_mb, r  # what it had when the limit stopped it
    if runtime_kind == "local" and getattr(sandbox, "memory", None) is None:
        assert r.exit_code == 1 and r.stderr.rstrip().endswith("MemoryError"), r
    elif runtime_kind == "local":
        assert r.exit_code == 128 + signal.SIGKILL and "used more than its memory limit of 256 MB" in r.stderr, r
    else:
        assert r.exit_code == 128 + signal.SIGKILL and docker_oom_kills((await sandbox.exec(oom)).stdout) == before + 1, r
    r = await sandbox.exec("echo alive")
    assert r.stdout.strip() == "alive"


async def test_infinite_loop_killed_with_output_kept(sandbox: wb.Sandbox) -> None:
    t0 = time.monotonic()
    r = await sandbox.exec("echo before-loop; echo err-side >&2; while :; do :; done", timeout=1.5)
    assert r.timed_out and r.exit_code == 124
    assert r.stdout.strip() == "before-loop" and "err-side" in r.stderr
    assert time.monotonic() - t0 < 15  # a hang guard (10x the timeout), not a speed claim
    # The process tree is gone: background children too.
    r = await sandbox.exec(["python3", "-c", "import subprocess,time\n"
                            "subprocess.Popen(['sh','-c','while :; do :; done; echo spinmark'])\nprint('started')\n"
                            "time.sleep(60)"], timeout=1.5)
    assert r.timed_out and "started" in r.stdout
    r = await sandbox.exec("ps -eo args 2>/dev/null | grep -c '[s]pinmark' || true", timeout=10)
    assert r.stdout.strip() == "0", r


async def test_large_output_capped(sandbox: wb.Sandbox) -> None:
    r = await sandbox.exec("head -c 100000000 /dev/zero | tr '\\0' a; echo tail >&2", timeout=60)
    assert r.exit_code == 0 and r.truncated
    assert len(r.stdout) == sandbox.limits.output_bytes and set(r.stdout) == {"a"}
    assert r.stderr.strip() == "tail"


KILLED_PARENT = '''
import asyncio, sys
import workbench as wb

async def main() -> None:
    rt = wb.Local() if sys.argv[1] == "local" else wb.Docker()
    pool = await rt.pool(run_id="killtest", size=2).start()
    sb = await pool.acquire("killtest.0.0")
    asyncio.ensure_future(sb.exec("sleep 300; echo " + sys.argv[2], timeout=600))
    await asyncio.sleep(1.0)
    print("READY", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
'''


def _procs_with(marker: str, exclude: bytes | None = None, skip: int = 0) -> list[int]:
    """Processes of this machine (containers' included) whose command line holds ``marker``."""
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and int(p.name) != skip:
            try:
                cmdline = (p / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and not (exclude and exclude in cmdline):
                out.append(int(p.name))
    return out


def _start_and_kill(kind: str, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent(KILLED_PARENT))
    marker = "wb-marker-" + secrets.token_hex(6)
    proc = subprocess.Popen([sys.executable, str(script), kind, marker], stdout=subprocess.PIPE, cwd=REPO,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline().decode()
        assert line.startswith("READY"), line
        assert _procs_with(marker, skip=proc.pid), "the sandboxed command should be running"
    finally:
        proc.send_signal(signal.SIGKILL)  # also when the checks above fail: never leave the parent running
        proc.wait(10)
        proc.stdout.close()
    return proc.pid, marker


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_killed_parent_leaves_no_process_local(tmp_path: Path, cli: Callable[..., Any]) -> None:
    pid, marker = _start_and_kill("local", tmp_path)
    assert _wait(lambda: not _procs_with(marker), 10), f"sandboxed processes outlived their parent: {_procs_with(marker)}"
    from workbench_local.sandbox.fs import stale_pool_dirs

    assert any(f"-{pid}-" in d.name for d in stale_pool_dirs())
    res = cli("sandbox", "gc", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["dirs_removed"] >= 1
    assert not any(f"-{pid}-" in d.name for d in stale_pool_dirs())


def _containers_of(client: Any, pid: int) -> list[Any]:
    # sparse: no inspect per container, which fails when one is auto-removed between the list and the inspect
    return client.containers.list(all=True, sparse=True,
                                  filters={"label": ["workbench.sandbox=1", f"workbench.pid={pid}"]})


def test_killed_parent_docker_gc_removes_containers(docker_client: Any, tmp_path: Path, cli: Callable[..., Any]) -> None:
    pid, marker = _start_and_kill("docker", tmp_path)
    assert len(_containers_of(docker_client, pid)) >= 1
    res = cli("sandbox", "gc", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["containers_removed"] >= 1 and out["docker"] is True
    assert _wait(lambda: not _containers_of(docker_client, pid), 10)
    assert _wait(lambda: not _procs_with(marker), 10)


def test_killed_parent_docker_containers_expire_alone(docker_client: Any, tmp_path: Path) -> None:
    """With no gc at all, the containers notice their heartbeat stopped and remove themselves."""
    pid, marker = _start_and_kill("docker", tmp_path, {"WORKBENCH_SANDBOX_HEARTBEAT": "1"})
    assert _containers_of(docker_client, pid)
    assert _wait(lambda: not _containers_of(docker_client, pid), 60), "containers outlived their heartbeat"
    assert _wait(lambda: not _procs_with(marker), 10)


async def test_network_allow_list_docker(docker_client: Any, secret_server: tuple[int, str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("network allow lists need root and iptables (they are enforced with iptables rules)")
    port, token = secret_server
    rt = wb.Docker(network=[f"gateway:{port}"])
    async with rt.sandbox() as sb:
        r = await sb.exec("ip route 2>/dev/null", timeout=10)
        gateway = next(ln.split()[2] for ln in r.stdout.splitlines() if ln.startswith("default"))
        r = await sb.exec(["python3", "-c", CONNECT, gateway, str(port)], timeout=15)
        assert r.exit_code == 0 and token in r.stdout, r
        bridge = bridge_gateway(docker_client)
        for addr, p in ((bridge, port), ("1.1.1.1", 53)):
            r = await sb.exec(["python3", "-c", CONNECT, addr, str(p), "1"], timeout=15)
            assert r.exit_code == 7 and token not in r.stdout, (addr, r)
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    assert "workbench:" not in rules, "allow-list rules must be removed with the pool"
