"""Harbor's users and build limits: the agent runs as ``[agent] user`` and the tests as ``[verifier] user``
(each the image's ``USER`` when not given), while ``/logs``, ``/tests`` and ``/solution`` are made by root;
``[environment] build_timeout_sec`` bounds the image's build; ``storage_mb`` is read, not applied (as under
Harbor). The tiny tasks build ``FROM workbench-sandbox:2``."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.formats.test_harbor import bash_call, cli, mock  # noqa: F401  (fixtures; docker_client: tests/conftest.py)
from tests.helpers import CliResult, MockServer, last_json
from workbench.authoring import discovery
from workbench.errors import EnvLoadError

pytestmark = pytest.mark.timeout(600)

#: An image whose USER is ``player`` (uid 1234); ``checker`` (uid 2345) is a second user the tests may run as.
DOCKERFILE = """FROM workbench-sandbox:2
RUN echo 'player:x:1234:1234::/app:/bin/sh' >> /etc/passwd && echo 'checker:x:2345:2345::/:/bin/sh' >> /etc/passwd \\
 && mkdir -p /app && chown 1234:1234 /app
WORKDIR /app
USER {user}
"""
#: Records who the agent (or the reference solution) ran as.
SOLVE = "#!/bin/sh\nid -u > /logs/agent/agent-uid\n"
#: Scores 1 when the agent ran as uid 1234, the tests run as uid 2345, and root made /logs, /tests, /solution.
TEST = """#!/bin/sh
fail() { echo "$1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ "$(id -u)" = 2345 ] || fail "tests ran as $(id -u)"
[ "$(cat /logs/agent/agent-uid 2>/dev/null)" = 1234 ] || fail "agent ran as $(cat /logs/agent/agent-uid 2>/dev/null)"
for d in /logs /logs/agent /logs/verifier /tests; do
  [ "$(stat -c %u "$d")" = 0 ] || fail "$d is owned by $(stat -c %u "$d")"
done
[ "$(stat -c %u /tests/test.sh)" = 0 ] || fail "/tests/test.sh is not root's"
[ ! -e /solution ] || [ "$(stat -c %u /solution)" = 0 ] || fail "/solution is not root's"
echo 1 > /logs/verifier/reward.txt
"""


def user_task(tmp_path: Path, image_user: str, agent_user: str | None, name: str = "users") -> Path:
    task = tmp_path / name
    toml = '[environment]\nnetwork_mode = "no-network"\n\n[verifier]\nuser = "checker"\n'
    if agent_user is not None:
        toml += f"\n[agent]\nuser = {agent_user}\n"
    for rel, text in {"instruction.md": "Write your uid to /logs/agent/agent-uid.\n", "task.toml": toml,
                      "environment/Dockerfile": DOCKERFILE.format(user=image_user),
                      "tests/test.sh": TEST, "solution/solve.sh": SOLVE}.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    return task


@pytest.mark.parametrize(("value", "fragment"), [
    ("true", "[agent] user must be a user name or uid, not True"),
    ('"two words"', "[agent] user must be a user name or uid, not 'two words'"),
    ("-1", "[agent] user must be a user name or uid, not -1"),
])
def test_a_bad_user_is_one_line_naming_it(tmp_path: Path, value: str, fragment: str) -> None:
    task = user_task(tmp_path, "player", value)
    with pytest.raises(EnvLoadError) as e:
        discovery.load(str(task))
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize(("image_user", "agent_user"), [("player", None), ("root", '"player"'), ("root", "1234")],
                         ids=["image-user", "agent-user-by-name", "agent-user-by-uid"])
def test_the_agent_and_the_tests_run_as_their_users_and_root_makes_the_folders(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult],  # noqa: F811
        image_user: str, agent_user: str | None) -> None:
    res = cli("validate", user_task(tmp_path, image_user, agent_user), "--no-probe", "--json")
    assert res.rc == 0, res.stdout + res.stderr
    out = last_json(res.stdout)
    assert (out["gold"]["total"], out["empty"]["total"]) == (1.0, 0.0)


@pytest.mark.slow
def test_the_terminal_agent_runs_its_commands_as_the_agent_user(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult],  # noqa: F811
        mock: Callable[..., MockServer]) -> None:  # noqa: F811
    server = mock([bash_call("id -u > /logs/agent/agent-uid && touch /app/mine"), "Done."])
    task = user_task(tmp_path, "root", '"player"')
    res = cli("eval", task, "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["mean_reward"]) == (0, 1.0)


@pytest.mark.slow
def test_a_build_past_build_timeout_sec_is_one_error_naming_the_task(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult]) -> None:  # noqa: F811
    task = user_task(tmp_path, "player", None, name="slow-build")
    with (task / "environment" / "Dockerfile").open("a") as fh:
        fh.write(f"RUN sleep 30 # {secrets.token_hex(4)}\n")  # new to the engine: built, never found
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace("[environment]\n", "[environment]\nbuild_timeout_sec = 2\n"))
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 1
    problems = last_json(res.stdout)["problems"]
    assert any("Harbor task slow-build" in p and "took longer than its build timeout of 2 s" in p
               for p in problems), problems


@pytest.mark.slow
def test_storage_mb_is_read_but_not_applied_as_under_harbor(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult]) -> None:  # noqa: F811
    """Harbor's own Docker environment does not apply ``storage_mb``: the task scores here as under `harbor run`,
    whatever the engine's storage driver. ``wb.Docker(storage_mb=)`` asks for the limit, and is refused by name
    where the driver cannot apply it."""
    from workbench_local.sandbox.docker_pool import check_storage_limit

    from workbench.authoring.sandbox import SandboxError

    task = user_task(tmp_path, "player", None, name="disk")
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace("[environment]\n", "[environment]\nstorage_mb = 1024\n"))
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 0, res.stdout + res.stderr
    assert last_json(res.stdout)["gold"]["total"] == 1.0
    try:
        check_storage_limit(docker_client, 1024)
    except SandboxError as e:
        assert "storage_mb=1024: " in str(e) and "cannot limit" in str(e) and "\n" not in str(e)
