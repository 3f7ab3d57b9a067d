"""The sandbox interface on both runtimes: exec, files, the warm pool, seeding from tasks."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from tests.sandbox.conftest import make_runtime
from workbench.authoring.sandbox import SandboxError


async def test_exec_basics(sandbox: wb.Sandbox) -> None:
    r = await sandbox.exec("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out, r.truncated) == (3, "out\n", "err\n", False, False)
    assert not r.ok and "exit code 3" in r.output()
    r = await sandbox.exec(["printf", "%s|", "a b", "c"])  # an argv: no shell splitting
    assert r.stdout == "a b|c|"
    r = await sandbox.exec("pwd; echo $HOME; id -u")
    pwd, home, uid = r.stdout.split()
    assert pwd == sandbox.workdir == "/work" and home == "/tmp" and uid != "0"
    await sandbox.write_file("sub/dir/f.txt", "x")
    r = await sandbox.exec("pwd", cwd="sub/dir")
    assert r.stdout.strip() == "/work/sub/dir"
    r = await sandbox.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="piped in")
    assert r.stdout.strip() == "PIPED IN"
    r = await sandbox.exec(["python3", "-c", "import sys; sys.stdout.buffer.write(bytes(range(256)))"])
    assert r.ok and len(r.stdout) > 0  # undecodable bytes are replaced, not an error
    assert (await sandbox.exec("exit 0")).ok


async def test_files_round_trip(sandbox: wb.Sandbox, tmp_path: Path) -> None:
    await sandbox.write_file("a/b/c.txt", "héllo")
    await sandbox.write_file("/work/bin.dat", b"\x00\x01\xff")
    assert await sandbox.read_file("a/b/c.txt") == "héllo"
    assert await sandbox.read_file("./a/../a/b/c.txt") == "héllo"
    assert await sandbox.read_file("bin.dat", binary=True) == b"\x00\x01\xff"
    r = await sandbox.exec("cat a/b/c.txt && echo more >> a/b/c.txt")
    assert r.stdout == "héllo"
    assert await sandbox.read_file("a/b/c.txt") == "héllomore\n"
    with pytest.raises(FileNotFoundError):
        await sandbox.read_file("missing.txt")
    with pytest.raises(IsADirectoryError):
        await sandbox.read_file("a")
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('from upload')\n")
    (src / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (src / "run.sh").chmod(0o755)
    await sandbox.upload(src, "proj")
    r = await sandbox.exec("python3 pkg/mod.py && ./run.sh", cwd="proj")
    assert r.stdout == "from upload\nran\n", r
    await sandbox.exec("echo generated > proj/out.txt")
    await sandbox.download("proj", tmp_path / "back")
    assert (tmp_path / "back" / "out.txt").read_text() == "generated\n"
    assert (tmp_path / "back" / "pkg" / "mod.py").exists()


async def test_pool_warm_acquire_and_reset(runtime_kind: str) -> None:
    rt = make_runtime(runtime_kind)
    async with rt.pool(run_id="pooltest", size=2) as pool:
        sb = await pool.acquire("pooltest.0.0")
        await sb.write_file("left.txt", "x")
        await sb.exec("echo t > /tmp/tmpfile; (sleep 300; echo bg) > /dev/null 2>&1 &")
        await sb.close()
        with pytest.raises(RuntimeError):
            await sb.exec("true")
        for i in range(12):  # how fast a warm acquire is: scripts/bench_sandbox.py measures it
            await asyncio.sleep(0.15 if runtime_kind == "docker" else 0.02)  # the reset runs in the background
            sb = await pool.acquire(f"pooltest.{i}.1")
            r = await sb.exec("ls -A /work /tmp; ps -eo args 2>/dev/null | grep -c '[s]leep 300' || true")
            assert "left.txt" not in r.stdout and "tmpfile" not in r.stdout, r
            assert r.stdout.strip().splitlines()[-1] == "0", r  # the background process did not survive
            await sb.close()
        assert pool.stats.acquired == 13 and pool.stats.sandbox_seconds > 0


async def test_seeded_from_task(runtime_kind: str, tmp_path: Path) -> None:
    seed_dir = tmp_path / "seed"
    (seed_dir / "data").mkdir(parents=True)
    (seed_dir / "data" / "in.csv").write_text("a,b\n1,2\n")
    task = wb.Task(prompt="p", sandbox={"files": {"main.py": "print(open('data/in.csv').read().split()[1])"},
                                        "dir": str(seed_dir), "setup": "echo setup-done > setup.log"})
    rt = make_runtime(runtime_kind)
    async with rt.pool(size=1) as pool:
        sb = await pool.acquire("seed.0.0", task)
        r = await sb.exec("python3 main.py && cat setup.log")
        assert r.stdout == "1,2\nsetup-done\n", r
        await sb.close()
        bad = wb.Task(prompt="p", sandbox={"setup": "echo nope >&2; exit 4"})
        with pytest.raises(SandboxError, match="setup failed.*nope"):
            await pool.acquire("seed.1.0", bad)
        with pytest.raises(SandboxError, match="unknown sandbox needs"):
            await pool.acquire("seed.2.0", wb.Task(prompt="p", sandbox={"filez": {}}))
        assert not pool.held  # type: ignore[attr-defined]


def test_runtime_declarations() -> None:
    assert wb.Local().kind == "local" and wb.Docker().spec == "docker" and wb.Docker(image="x:1").spec == "docker:x:1"
    with pytest.raises(wb.WorkbenchError, match="allow lists need the Docker runtime"):
        wb.Local(network=["example.com:443"])
    with pytest.raises(wb.WorkbenchError, match="image=... or dockerfile"):
        wb.Docker(image="a", dockerfile="Dockerfile")
    with pytest.raises(wb.WorkbenchError, match="memory"):
        wb.Docker(memory="lots")
    with pytest.raises(wb.WorkbenchError, match="pids"):
        wb.Local(pids=0)
    with pytest.raises(SandboxError, match="only in the cloud"):
        wb.ModalSandbox().pool()
    from workbench.authoring.hotswap import load_runtime

    env_rt = wb.Local(timeout=7, memory="512m", network=True)
    swapped = load_runtime("docker:my-image:2", env_rt)
    assert isinstance(swapped, wb.Docker) and swapped.image == "my-image:2"
    assert (swapped.timeout, swapped.memory, swapped.network) == (7, "512m", True)  # the env's limits carry over
    assert isinstance(load_runtime("local", swapped), wb.Local)
    dock = wb.Docker(dockerfile="Dockerfile")
    assert load_runtime("docker", dock) is dock
    with pytest.raises(wb.WorkbenchError, match="unknown runtime 'podman'"):
        load_runtime("podman")


async def test_dockerfile_image_builds_offline(docker_client: Any, tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM workbench-sandbox:2\nCOPY hello.txt /opt/hello.txt\n"
                                         "RUN echo built-offline > /opt/built.txt\n")
    (tmp_path / "hello.txt").write_text("hello from the env folder\n")
    rt = wb.Docker(dockerfile="Dockerfile")
    async with rt.sandbox(env_dir=tmp_path) as sb:
        r = await sb.exec("cat /opt/hello.txt /opt/built.txt")
        assert r.stdout == "hello from the env folder\nbuilt-offline\n", r
    (tmp_path / "Dockerfile").write_text("FROM some/registry-image:latest\n")
    with pytest.raises(SandboxError, match="not on this machine"):
        async with wb.Docker(dockerfile=str(tmp_path / "Dockerfile")).sandbox():
            pass
    with pytest.raises(SandboxError, match="not on this machine"):
        async with wb.Docker(image="no-such-image-anywhere:0").sandbox():
            pass


async def test_docker_engine_down_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(SandboxError, match="Docker engine is not running"):
        async with wb.Docker().sandbox():
            pass


async def test_local_without_isolation_refuses_unless_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model-written commands never run unisolated by default: without bubblewrap, wb.Local() refuses with
    one line saying how to install it or opt in; isolation='none' runs them with the same limits."""
    from workbench_local.sandbox import bwrap as sandbox_bwrap

    monkeypatch.setenv("WORKBENCH_SANDBOX_ISOLATION", "none")
    monkeypatch.setattr(sandbox_bwrap, "_detected", {})
    for declared in (wb.Local(), wb.Local(isolation="auto"), wb.Local(isolation="bwrap")):
        with pytest.raises(SandboxError) as e:
            async with declared.sandbox():
                pass
        line = str(e.value)
        assert "\n" not in line and "apt-get install bubblewrap" in line and "isolation='none'" in line, line
    for _ in range(2):
        async with wb.Local(isolation="none").sandbox() as sb:
            assert not sb.isolated
            r = await sb.exec("echo $HOME; pwd; env | grep -c PYTEST_CURRENT_TEST || true")
            home, pwd, leaked = r.stdout.split()
            assert pwd == sb.workdir and leaked == "0"  # still a clean environment and its own workdir
            r = await sb.exec("while :; do :; done", timeout=0.5)
            assert r.timed_out


async def test_a_bind_under_a_private_folder_still_sees_the_system_files(tmp_path: Path) -> None:
    """A bind the sandbox's uid could not reach on the host (a 0700 folder above it: as root, the pool then
    mounts as root and drops to the uid inside) is readable, and so is what the system folders hold:
    /etc's certificates and name-service files (a TLS client such as node reads /etc/ssl at start)."""
    private = tmp_path / "private"
    (private / "data").mkdir(parents=True)
    private.chmod(0o700)
    (private / "data" / "note.txt").write_text("from the host\n")
    (private / "data").chmod(0o755)
    (private / "data" / "note.txt").chmod(0o644)
    wanted = [p for p in ("/etc/ssl/openssl.cnf", "/etc/nsswitch.conf") if Path(p).is_file()]
    async with wb.Local(binds=[str(private / "data")], timeout=20).sandbox() as sb:
        r = await sb.exec(["sh", "-c", f"cat {private / 'data' / 'note.txt'} && ls -ld /etc && head -c 1 "
                                       + " ".join(wanted) + " >/dev/null && echo read-etc"])
    assert r.ok and "from the host" in r.stdout and "read-etc" in r.stdout, r
    assert r.stdout.splitlines()[1].startswith("drwxr-xr-x"), r.stdout
