"""Harbor tasks run unchanged, read natively: a task folder (or a dataset folder of them) is an environment;
`workbench validate` scores the reference solution (reward 1) and an agent that does nothing (reward 0) as
Harbor's oracle and no-op agents do, and `workbench eval` plays each task with a terminal agent in the task's
own container against the mock OpenAI server. Bad task folders end in one clear line and write nothing.

The task folders under ``harbor_tasks/`` build ``FROM workbench-sandbox:2`` (made from this machine's files,
no registry); the tests that run containers are slow and need the Docker engine."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    CliResult,
    MockServer,
    agent_script,
    assert_user_error,
    cli_environment,
    last_json,
    mock_args,
    query,
    run_workbench,
)
from workbench.authoring import discovery
from workbench.errors import EnvLoadError
from workbench.formats.harbor import FORMAT
from workbench.formats.harbor.runtime import HarborRuntime

pytestmark = pytest.mark.timeout(600)

TASKS = Path(__file__).with_name("harbor_tasks")
HELLO = TASKS / "hello"


def bash_call(command: str, call_id: str = "c1") -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]}


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., CliResult]:
    env = cli_environment(tmp_path, tmp_path / "wb.db")

    def run(*args: Any, timeout: float = 300.0) -> CliResult:
        return run_workbench(list(args), env, timeout=timeout)

    return run


def runs(db: Path) -> int:
    """The runs recorded in the store (0 while it or its tables do not exist)."""
    if not db.exists():
        return 0
    try:
        return int(query(db, "SELECT COUNT(*) FROM run")[0][0])
    except sqlite3.OperationalError:
        return 0


def copy_task(tmp_path: Path, name: str = "task") -> Path:
    dest = tmp_path / name
    shutil.copytree(HELLO, dest, symlinks=True)
    return dest


# -- reading (no containers) ----------------------------------------------------------------------
def test_a_task_folder_and_a_dataset_folder_are_claimed_and_nothing_else(tmp_path: Path) -> None:
    assert FORMAT.claims(str(HELLO)) == HELLO.resolve()
    assert FORMAT.claims(str(TASKS)) == TASKS.resolve()
    package = copy_task(tmp_path, "package")
    (package / "__init__.py").write_text("")
    assert FORMAT.claims(str(package)) is None  # a Python environment package is not Harbor's
    assert FORMAT.claims(str(HELLO / "task.toml")) is None
    assert FORMAT.claims(str(tmp_path / "missing")) is None
    assert FORMAT.claims(str(HELLO / "tests")) is None


def test_a_dataset_is_one_environment_with_a_task_per_folder_and_its_limits() -> None:
    ref = discovery.resolve(str(TASKS))
    assert (ref.format, ref.name) == ("harbor", "harbor_tasks")
    env = discovery.load_ref(ref)
    assert env.dialect == "harbor" and isinstance(env.runtime, HarborRuntime)
    tasks = list(env.tasks)
    assert [t.id for t in tasks] == ["hello", "workbench/json-reward"]
    hello = tasks[0]
    assert hello.prompt == (HELLO / "instruction.md").read_text()
    assert hello.answer is not None  # the reference solution is the gold answer
    info = hello.info["harbor"]
    assert (info["agent_timeout_s"], info["verifier_timeout_s"], info["memory_mb"]) == (120.0, 60.0, 256)
    assert env.runtime.tasks["hello"].network is False  # allow_internet = false
    assert env.runtime.tasks["workbench/json-reward"].memory_mb == 512  # the older memory = "512M"
    assert env.version == discovery.load(str(TASKS)).version


@pytest.mark.parametrize(("change", "fragments"), [
    ("no tests", ("notes", "has no tests/test.sh")),
    ("no instruction", ("notes", "has no instruction.md")),
    ("compose", ("notes", "docker-compose", "environment/docker-compose.yaml")),
    ("link out", ("notes", "links outside")),
    ("steps", ("notes", "several steps")),
    ("bad toml", ("notes", "task.toml is not valid TOML")),
    ("host variable", ("notes", "reads the host's ${HOME}")),
    ("gpus", ("notes", "asks for GPUs")),
    ("negative cpus", ("notes", "[environment] cpus must be a positive number")),
    ("no image", ("notes", "has no environment/Dockerfile")),
    ("separate verifier", ("notes", "separate verifier container")),
    ("dataset links out", ("linked", "links outside")),
])
def test_bad_task_folders_end_in_one_line_and_write_nothing(tmp_path: Path, cli: Callable[..., CliResult],
                                                             change: str, fragments: tuple[str, ...]) -> None:
    task = copy_task(tmp_path, "notes")
    if change == "no tests":
        shutil.rmtree(task / "tests")
    elif change == "no instruction":
        (task / "instruction.md").unlink()
    elif change == "compose":
        (task / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    elif change == "link out":
        (task / "tests" / "secrets").symlink_to("/etc/passwd")
    elif change == "steps":
        with (task / "task.toml").open("a") as fh:
            fh.write('\n[[steps]]\nname = "one"\n')
    elif change == "bad toml":
        (task / "task.toml").write_text("[agent\n")
    elif change == "host variable":
        with (task / "task.toml").open("a") as fh:
            fh.write('\n[verifier.env]\nWHERE = "${HOME}"\n')
    elif change in ("gpus", "negative cpus"):
        toml = (task / "task.toml").read_text()
        (task / "task.toml").write_text(toml.replace("cpus = 1", "gpus = 1" if change == "gpus" else "cpus = -1"))
    elif change == "no image":
        shutil.rmtree(task / "environment")
    elif change == "dataset links out":  # a dataset whose task folder lies elsewhere: nothing of it is read
        dataset = tmp_path / "dataset"
        dataset.mkdir()
        (dataset / "linked").symlink_to(task, target_is_directory=True)
        task = dataset
    elif change == "separate verifier":
        toml = (task / "task.toml").read_text()
        (task / "task.toml").write_text(toml.replace("[verifier]\n", '[verifier]\nenvironment_mode = "separate"\n'))
    assert_user_error(cli("validate", task, "--no-probe"), *fragments)
    if change == "no tests":  # eval reads the task as validate does; it records nothing
        assert_user_error(cli("eval", task, "-n", "1", "--base-url", "http://127.0.0.1:9/v1", "-m", "m"), *fragments)
        assert runs(tmp_path / "wb.db") == 0


def test_a_dataset_skips_the_tasks_it_cannot_run_and_says_so(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """As Harbor skips a folder that is no valid task; a dataset with none left is one error."""
    root = tmp_path / "dataset"
    copy_task(root, "good")
    compose = copy_task(root, "composed")
    (compose / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    env = discovery.load(str(root))
    assert [t.id for t in env.tasks] == ["good"]
    assert "1 skipped" in env.description and "composed" in env.description
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "1 of 2 tasks skipped" in warning[0] and "docker-compose" in warning[0]
    shutil.rmtree(root / "good")
    with pytest.raises(EnvLoadError, match="has no task Workbench can run; the first: Harbor task composed"):
        discovery.load(str(root))


# -- running (containers) -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("where", [HELLO, TASKS], ids=["task", "dataset"])
def test_validate_scores_the_reference_solution_1_and_doing_nothing_0(docker_client: Any, cli: Callable[..., CliResult],
                                                                      where: Path) -> None:
    res = cli("validate", where, "--no-probe", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["ok"] and out["problems"] == []
    assert out["gold"]["total"] == 1.0 and out["empty"]["total"] == 0.0
    assert out["tasks_checked"] == (1 if where == HELLO else 2)


@pytest.fixture
def mock(tmp_path: Path) -> Iterator[Callable[..., MockServer]]:
    servers: list[MockServer] = []

    def start(script: list[Any]) -> MockServer:
        s = MockServer(mock_args("script", "--by-turn", script=script), tmp_path / f"mock{len(servers)}.log")
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.mark.slow
def test_eval_plays_the_task_in_its_container_and_its_tests_score_it(docker_client: Any, cli: Callable[..., CliResult],
                                                                     mock: Callable[..., MockServer]) -> None:
    server = mock([bash_call('pwd && echo hello > "$GREETING_FILE" && cat /app/seed.txt'), "Done."])
    res = cli("eval", HELLO, "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["rollouts"], out["mean_reward"]) == (0, 1, 1.0)
    shown = last_json(cli("show", f"{out['run_id']}.0.0", "--json").stdout)
    tool = next(m for m in shown["messages"] if m["role"] == "tool")
    assert "/app" in tool["content"] and "seed" in tool["content"]  # the image's WORKDIR and files
    # ([environment.env]'s GREETING_FILE named where to write: the task's variables reach the agent's commands)
    assert shown["state"]["harbor_rewards"] == {"reward": 1.0}


@pytest.mark.slow
def test_each_command_starts_where_the_last_one_ended(docker_client: Any, cli: Callable[..., CliResult],
                                                      mock: Callable[..., MockServer]) -> None:
    server = mock([bash_call("mkdir -p sub && cd sub && echo moved >&2", "c1"),
                   bash_call("pwd && echo hello > ../greeting.txt; exit 3", "c2"), "Done."])
    res = cli("eval", HELLO, "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["mean_reward"]) == (0, 1.0)
    shown = last_json(cli("show", f"{out['run_id']}.0.0", "--json").stdout)
    first, second = [m["content"] for m in shown["messages"] if m["role"] == "tool"]
    assert first.endswith("--- stderr\nmoved")  # the tool's own marker is not shown
    assert second.startswith("exit code 3") and "/app/sub" in second


@pytest.mark.slow
def test_an_agent_that_does_nothing_scores_0_with_no_error_and_named_rewards_are_metrics(
        docker_client: Any, cli: Callable[..., CliResult], mock: Callable[..., MockServer]) -> None:
    server = mock(["I will not do anything."])
    res = cli("eval", TASKS, "-n", "2", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["rollouts"], out["mean_reward"]) == (0, 2, 0.0)
    assert out["metrics"].get("rewards.files") == 0.0  # json-reward's reward.json names "files" too


@pytest.mark.slow
def test_a_dockerfile_that_does_not_build_is_one_error_naming_the_task(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult], mock: Callable[..., MockServer]) -> None:
    server = mock(["Done."])
    task = copy_task(tmp_path, "broken-build")
    with (task / "environment" / "Dockerfile").open("a") as fh:
        fh.write("RUN exit 3\n")
    assert_user_error(cli("eval", task, "-n", "1", "--base-url", server.base_url, "-m", "mock-model"),
                      "Harbor task broken-build", "Dockerfile failed")
    assert runs(tmp_path / "wb.db") == 0
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 1
    problems = last_json(res.stdout)["problems"]
    assert len(problems) == 1 and "Harbor task broken-build" in problems[0]
    dataset = tmp_path / "dataset"  # among tasks that build, the one that does not is named
    for name in ("a-fine", "z-fine"):
        copy_task(dataset, name)
    shutil.copytree(task, dataset / "broken-build")
    assert_user_error(cli("eval", dataset, "-n", "3", "--base-url", server.base_url, "-m", "mock-model"),
                      "Harbor task broken-build", "Dockerfile failed")
    assert runs(tmp_path / "wb.db") == 0


@pytest.mark.slow
@pytest.mark.parametrize(("script", "fragments"), [
    ("echo 'cannot find pytest' >&2\nexit 127", ("wrote no reward", "exit 127", "cannot find pytest")),
    ("echo passed > /logs/verifier/reward.txt", ("reward.txt holds 'passed', not a number",)),
    (": > /logs/verifier/reward.json", ("reward.json is not JSON: it is empty",)),
    ("echo '{\"reward\": \"1\"}' > /logs/verifier/reward.json", ("reward.json must hold finite numbers",)),
], ids=["no reward", "text", "empty json", "json string"])
def test_tests_that_write_no_reward_are_an_error_not_a_zero(docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult],
                                                            script: str, fragments: tuple[str, ...]) -> None:
    task = copy_task(tmp_path, "silent")
    (task / "tests" / "test.sh").write_text(f"#!/bin/sh\n{script}\n")
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 1
    problems = last_json(res.stdout)["problems"]
    assert any(all(f in p for f in fragments) for p in problems), problems


#: An agent program in the image's own python3 (standard library only): it asks the model through the proxy
#: (OPENAI_BASE_URL) for a command, runs it in the container, and prints the model's last word.
PROGRAM_AGENT = r'''
import json, os, subprocess, urllib.request
def chat(messages):
    req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", method="POST",
                                 data=json.dumps({"model": os.environ["WORKBENCH_MODEL"], "messages": messages}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer x"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["message"]
messages = [{"role": "user", "content": os.environ["WORKBENCH_PROMPT"]}]
reply = chat(messages)
command = reply["content"]
out = subprocess.run(command, shell=True, capture_output=True, text=True).stdout
messages += [reply, {"role": "user", "content": "ran: " + out}]
print(chat(messages)["content"])
'''


@pytest.mark.slow
def test_an_agent_program_plays_the_task_through_the_proxy(docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult],
                                                            mock: Callable[..., MockServer]) -> None:
    """The program is a host file, bound read-only into the task's container (``binds``)."""
    agent = agent_script(tmp_path, "agent.py", PROGRAM_AGENT)
    server = mock(["echo hello > /app/greeting.txt && cat /app/greeting.txt", "Finished."])
    res = cli("eval", HELLO, "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json",
              "-a", json.dumps({"agent": ["python3", str(agent)], "binds": [str(agent.parent)]}))
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["mean_reward"]) == (0, 1.0)
    shown = last_json(cli("show", f"{out['run_id']}.0.0", "--json").stdout)
    assert shown["completion"] == "Finished." and shown["state"]["harbor_agent"] == "program"
    assert server.requests() == 2  # both of the program's calls went through the proxy


@pytest.mark.slow
def test_a_task_on_a_prebuilt_image_runs_in_it(docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """``[environment] docker_image`` instead of a Dockerfile: an image already on the machine, as its image says
    (root, a writable root filesystem)."""
    task = tmp_path / "prebuilt"
    for rel, text in {"instruction.md": "Create the file /root/done.\n",
                      "task.toml": '[environment]\ndocker_image = "workbench-sandbox:2"\nnetwork_mode = "no-network"\n',
                      "tests/test.sh": "#!/bin/sh\n[ -f /root/done ] && echo 1 > /logs/verifier/reward.txt "
                                       "|| echo 0 > /logs/verifier/reward.txt\n",
                      "solution/solve.sh": "#!/bin/sh\ntouch /root/done\n"}.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 0, res.stdout + res.stderr
    out = last_json(res.stdout)
    assert (out["gold"]["total"], out["empty"]["total"]) == (1.0, 0.0)


@pytest.mark.slow
def test_when_the_agent_runs_out_of_the_tasks_time_its_tests_still_score_what_it_did(
        docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult], mock: Callable[..., MockServer]) -> None:
    task = copy_task(tmp_path, "hurry")
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace("[agent]\ntimeout_sec = 120.0", "[agent]\ntimeout_sec = 10.0"))
    # The second command outlasts the agent's 10 s by far; the first has done the work long before.
    server = mock([bash_call("echo hello > /app/greeting.txt", "c1"), bash_call("sleep 600", "c2"), "Done."])
    res = cli("eval", task, "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert (out["errors"], out["mean_reward"]) == (0, 1.0)
    state = last_json(cli("show", f"{out['run_id']}.0.0", "--json").stdout)["state"]
    assert state["harbor_agent_timed_out"] is True


@pytest.mark.slow
def test_a_multi_stage_dockerfile_builds(docker_client: Any, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """A stage named with ``AS`` is no base image to find on the machine."""
    task = copy_task(tmp_path, "staged")
    (task / "environment" / "Dockerfile").write_text(
        "FROM workbench-sandbox:2 AS base\nRUN echo staged > /staged.txt\n"
        "FROM base\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n")
    res = cli("validate", task, "--no-probe", "--json")
    assert res.rc == 0, res.stdout + res.stderr
    assert last_json(res.stdout)["gold"]["total"] == 1.0
