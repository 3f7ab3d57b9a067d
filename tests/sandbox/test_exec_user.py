"""``Sandbox.exec(user=...)``: a command runs as the user it names. Docker runs it as that user (a name of the
image or a uid), killing it on timeout as that user; the local sandbox runs commands as its own user only
and refuses another in one line. ``wb.Docker(build_timeout=...)`` bounds a Dockerfile's build and
``storage_mb`` is refused in one line where the engine's storage driver cannot limit a container's disk."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

import workbench as wb
from workbench.authoring.sandbox import SandboxError
from workbench.errors import ConfigError

pytestmark = pytest.mark.timeout(300)


def image_folder(tmp_path: Path, *lines: str) -> Path:
    d = tmp_path / "image"
    d.mkdir()
    (d / "Dockerfile").write_text("\n".join(["FROM workbench-sandbox:2", *lines]) + "\n")
    return d / "Dockerfile"


@pytest.mark.parametrize("other", ["root", "0", "nobody:nogroup", "12345"])
async def test_the_local_sandbox_refuses_another_user_in_one_line(other: str) -> None:
    async with wb.Local(timeout=20).sandbox() as sb:
        own = set((await sb.exec("id -u; id -un")).stdout.split())
        if other in own:
            pytest.skip(f"{other} is the user this sandbox runs commands as")
        with pytest.raises(SandboxError) as e:
            await sb.exec("id -u", user=other)
        assert "\n" not in str(e.value) and repr(other) in str(e.value) and "Docker" in str(e.value)


async def test_the_local_sandbox_runs_as_its_own_user_when_named() -> None:
    async with wb.Local(timeout=20).sandbox() as sb:
        uid = (await sb.exec("id -u")).stdout.strip()
        r = await sb.exec("id -u", user=uid)
        assert r.ok and r.stdout.strip() == uid


@pytest.mark.slow
@pytest.mark.parametrize("as_image", [True, False], ids=["as-image", "sandbox-user"])
async def test_docker_runs_a_command_as_the_user_it_names(docker_client: Any, tmp_path: Path, as_image: bool) -> None:
    df = image_folder(tmp_path, "USER 65534:65534")
    rt = wb.Docker(dockerfile=df, as_image=as_image, timeout=20)
    async with rt.sandbox() as sb:
        default = (await sb.exec("id -u")).stdout.strip()
        assert default == ("65534" if as_image else "1000")  # the image's USER / the sandbox user
        for user, uid in (("root", "0"), ("0:0", "0"), ("sandbox", "1000"), ("4321", "4321")):
            r = await sb.exec("id -u", user=user)
            assert r.ok and r.stdout.strip() == uid, (user, r.output())
        slow = await sb.exec("sleep 60", timeout=1, user="4321")  # killed on timeout, as the user it ran as
        assert slow.timed_out and slow.exit_code == 124
        left = await sb.exec("ps | grep -c '[s]leep 60' || true", user="root")
        assert left.stdout.strip() == "0", left.output()
        bad = await sb.exec("id -u", user="no-such-user")
        assert not bad.ok


@pytest.mark.slow
async def test_a_build_longer_than_its_timeout_is_one_error_naming_it(docker_client: Any, tmp_path: Path) -> None:
    # A nonce: the image is new to the engine, so it is built (not found from an earlier run).
    df = image_folder(tmp_path, f"RUN sleep 30 # {secrets.token_hex(4)}")
    pool = wb.Docker(dockerfile=df, as_image=True, build_timeout=2).pool(run_id="build-timeout", size=0)
    with pytest.raises(SandboxError) as e:
        await pool.start()
    await pool.close()
    assert "\n" not in str(e.value) and "took longer than its build timeout of 2 s" in str(e.value)


@pytest.mark.slow
async def test_storage_mb_is_refused_where_the_storage_driver_cannot_limit_it(docker_client: Any) -> None:
    from workbench_local.sandbox.docker_pool import check_storage_limit

    try:
        check_storage_limit(docker_client, 512)
    except SandboxError as e:
        line = str(e)
        assert "\n" not in line and line.startswith("storage_mb=512: ") and "storage driver" in line
        pool = wb.Docker(storage_mb=512).pool(run_id="storage", size=0)
        with pytest.raises(SandboxError, match="storage_mb=512: "):
            await pool.start()
        await pool.close()
        return
    async with wb.Docker(storage_mb=512, as_image=True, timeout=60).sandbox() as sb:  # a driver that limits it
        r = await sb.exec("dd if=/dev/zero of=/big bs=1M count=700", user="root")
        assert not r.ok


@pytest.mark.parametrize(("kw", "fragment"), [
    ({"build_timeout": 0}, "build_timeout=0"), ({"storage_mb": -1}, "storage_mb=-1"),
    ({"storage_mb": True}, "storage_mb=True"),
])
def test_bad_build_timeout_or_storage_is_one_line(kw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        wb.Docker(**kw)
    assert fragment in str(e.value) and "\n" not in str(e.value)
