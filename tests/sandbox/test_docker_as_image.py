"""``wb.Docker(as_image=True)``: containers run as their image declares them (its user, WORKDIR and
environment, a writable root), and each serves one rollout: what one rollout wrote, the next never sees."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import workbench as wb

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def image_folder(tmp_path: Path, user: str | None = None) -> Path:
    d = tmp_path / "image"
    d.mkdir()
    lines = ["FROM workbench-sandbox:2", "ENV GREETING=from-the-image", "WORKDIR /app", "COPY seed.txt /app/seed.txt"]
    if user:
        lines += [f"USER {user}"]
    (d / "Dockerfile").write_text("\n".join(lines) + "\n")
    (d / "seed.txt").write_text("seed\n")
    return d / "Dockerfile"


async def test_commands_run_as_the_image_says_and_its_root_is_writable(docker_client: Any, tmp_path: Path) -> None:
    rt = wb.Docker(dockerfile=image_folder(tmp_path), as_image=True, timeout=20)
    async with rt.sandbox() as sb:
        r = await sb.exec("id -u; pwd; echo $GREETING; cat seed.txt; echo changed > /etc/motd && cat /etc/motd")
        assert r.ok, r.output()
        assert r.stdout.split() == ["0", "/app", "from-the-image", "seed", "changed"]
        assert (await sb.exec("pwd", cwd="/tmp")).stdout.strip() == "/tmp"
        assert (await sb.exec("mkdir -p sub && cd sub && pwd")).stdout.strip() == "/app/sub"
        assert (await sb.exec("pwd", cwd="sub")).stdout.strip() == "/app/sub"  # relative to the image's WORKDIR
        slow = await sb.exec("sleep 30", timeout=1)
        assert slow.timed_out and slow.exit_code == 124


async def test_the_images_user_runs_the_commands(docker_client: Any, tmp_path: Path) -> None:
    rt = wb.Docker(dockerfile=image_folder(tmp_path, user="65534:65534"), as_image=True, timeout=20)
    async with rt.sandbox() as sb:
        assert (await sb.exec("id -u")).stdout.strip() == "65534"


async def test_a_container_serves_one_rollout(docker_client: Any, tmp_path: Path) -> None:
    rt = wb.Docker(dockerfile=image_folder(tmp_path), as_image=True, timeout=20)
    pool = rt.pool(run_id="as-image", size=1, env_dir=tmp_path)
    await pool.start()
    try:
        first = await pool.acquire("r1")
        assert (await first.exec("echo left > /app/left.txt")).ok
        first_id = first.container_id  # type: ignore[attr-defined]
        await first.close()
        second = await pool.acquire("r2")
        assert second.container_id != first_id  # type: ignore[attr-defined]
        r = await second.exec("cat /app/left.txt")
        assert r.exit_code != 0  # a fresh container: the first rollout's file is not there
        await second.close()
    finally:
        await pool.close()
