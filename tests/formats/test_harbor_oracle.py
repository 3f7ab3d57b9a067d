"""Harbor is the oracle: on the same task folders, `workbench validate` and `workbench eval` give each task the
rewards that `harbor run` gives it (Harbor 0.26, its Podman environment). Harbor's ``oracle`` agent (the reference
solution) is validate's gold answer, its ``nop`` agent validate's empty answer and an eval whose model does
nothing; tests that give fractional rewards, tests that exit non-zero after writing a reward, named rewards and
tests that write no reward (an error in both, never a 0) are compared too.

The dataset is the fixture tasks (``harbor_tasks/``) and the tasks below, copied, with two changes Harbor needs
on a machine with no registry, neither of which touches a reward: Harbor 0.26 enforces ``no-network`` and
``allow_internet = false`` only through an egress sidecar built from images it pulls (alpine, gost), so the
copies keep Harbor's default network; and Harbor requires ``[task] name`` to read ``org/name``
(`test_harbor_accepts_every_fixture_task` checks the fixtures themselves).

Slow: Harbor's trials start a container each through podman-compose (about 20 s a trial on 2 cores), and the
first run builds Harbor's Python 3.12 environment (cached under the user's cache folder afterwards).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.formats import harbor_oracle
from tests.formats.harbor_oracle import Trial, harbor_copy
from tests.helpers import MockServer, cli_environment, last_json, mock_args, run_workbench

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

FIXTURES = Path(__file__).with_name("harbor_tasks")
BASE_IMAGE = "workbench-sandbox:2"

HELLO_CHECK = 'if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello" ]; then'
#: Tasks made from ``hello`` with other tests: what each test.sh does after its shebang.
GENERATED_TESTS = {
    "partial": f"{HELLO_CHECK} echo 0.75; else echo 0.25; fi > /logs/verifier/reward.txt",
    "failing-exit": f"{HELLO_CHECK} echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
                    "echo 'some test failed' >&2\nexit 1",
    "no-reward": "echo 'cannot find pytest' >&2\nexit 127",
    "named-rewards": "if [ -f /app/greeting.txt ]; then a=1; else a=0; fi\n"
                     'printf \'{"a": %s, "b": 0.5}\\n\' "$a" > /logs/verifier/reward.json',
}


def missing_component(reason: str) -> None:
    """A component the machine cannot have: a skip saying so, or a failure where the setup must provide it."""
    if os.environ.get("WORKBENCH_TEST_STRICT_SYSTEM") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


def make_dataset(root: Path) -> Path:
    dataset = root / "tasks"
    for task in sorted(FIXTURES.iterdir()):
        if (task / "task.toml").exists():
            harbor_copy(task, dataset / task.name)
    for name, script in GENERATED_TESTS.items():
        task = harbor_copy(FIXTURES / "hello", dataset / name)
        (task / "tests" / "test.sh").write_text(f"#!/bin/sh\n{script}\n")
    return dataset


def harbor_reward(rewards: dict[str, float]) -> float | None:
    """The one number Harbor's metrics take from a trial's rewards: ``reward``, or the only one; None if several."""
    if "reward" in rewards:
        return rewards["reward"]
    return next(iter(rewards.values())) if len(rewards) == 1 else None


@dataclass
class Oracle:
    dataset: Path
    oracle: dict[str, Trial]
    nop: dict[str, Trial]


@pytest.fixture(scope="module")
def harbor_venv() -> Path:
    python = harbor_oracle.find_python312()
    if python is None:
        # not the setup's to provide: Debian 12's packages have no Python 3.12, and uv cannot download one offline
        pytest.skip("Harbor needs Python >= 3.12, which this machine lacks (none on PATH, under pyenv or known to "
                    "uv) and which the setup cannot install (Debian 12 has none; downloads are offline)")
    assert python is not None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench-tests"
    return harbor_oracle.harbor_venv(python, cache)


@pytest.fixture(scope="module")
def podman(docker_client: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[harbor_oracle.Podman]:
    if not shutil.which("podman"):
        missing_component("Harbor's Podman environment needs podman, which this machine lacks "
                          "(apt-get install podman)")
    root = tmp_path_factory.mktemp("podman")
    engine = harbor_oracle.start_podman(root)
    try:
        harbor_oracle.load_base_image(engine, BASE_IMAGE, root / "base")
        yield engine
    finally:
        engine.run("rm", "--all", "--force", timeout=300)
        engine.run("system", "reset", "--force", timeout=300)  # unmounts and empties the private store


@pytest.fixture(scope="module")
def harbor(harbor_venv: Path, podman: harbor_oracle.Podman, tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    root = tmp_path_factory.mktemp("harbor")
    dataset = make_dataset(root)
    runs = {agent: harbor_oracle.harbor_run(harbor_venv, podman, dataset, agent, root / "jobs", agent)
            for agent in ("oracle", "nop")}
    by_task = {agent: {trial.task: trial for trial in trials} for agent, trials in runs.items()}
    for agent, trials in by_task.items():
        assert sorted(trials) == sorted(p.name for p in dataset.iterdir()), f"harbor run -a {agent} left out tasks"
    return Oracle(dataset, by_task["oracle"], by_task["nop"])


@pytest.fixture(scope="module")
def workbench(tmp_path_factory: pytest.TempPathFactory) -> Any:
    home = tmp_path_factory.mktemp("workbench")
    env = cli_environment(home, home / "wb.db")
    return lambda *args: run_workbench(list(args), env, timeout=600)


@pytest.fixture(scope="module")
def does_nothing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockServer]:
    """A model that answers without a tool call: the terminal agent then does nothing, as Harbor's nop agent."""
    server = MockServer(mock_args("script", "--by-turn", script=["I will not do anything."]),
                        tmp_path_factory.mktemp("mock") / "mock.log")
    yield server
    server.stop()


TASKS = sorted([p.name for p in FIXTURES.iterdir() if (p / "task.toml").exists()] + list(GENERATED_TESTS))


@pytest.mark.parametrize("task", TASKS)
def test_validate_scores_each_task_as_harbors_oracle_and_nop_agents(harbor: Oracle, workbench: Any,
                                                                    task: str) -> None:
    res = workbench("validate", harbor.dataset / task, "--no-probe", "--json")
    out = last_json(res.stdout)
    for agent, trial, answer in (("oracle", harbor.oracle[task], "gold"), ("nop", harbor.nop[task], "empty")):
        if trial.rewards is None:  # Harbor's trial ended in an exception: Workbench's scoring is an error too
            assert trial.exception == "RewardFileNotFoundError", trial
            assert not out["ok"] and res.rc == 1 and "harbor" not in out[answer], out
            assert any("wrote no reward" in p for p in out["problems"]), out["problems"]
            continue
        assert trial.exception is None, trial
        expected = harbor_reward(trial.rewards)
        if expected is not None:  # Harbor gives no single number to several rewards without `reward`
            assert out[answer]["harbor"] == pytest.approx(expected), (agent, trial, out)


@pytest.mark.parametrize("task", TASKS)
def test_eval_with_a_model_that_does_nothing_scores_each_task_as_harbors_nop_agent(
        harbor: Oracle, workbench: Any, does_nothing: MockServer, task: str) -> None:
    res = workbench("eval", harbor.dataset / task, "-n", "1", "--base-url", does_nothing.base_url,
                    "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    trial = harbor.nop[task]
    if trial.rewards is None:
        assert (trial.exception, out["errors"]) == ("RewardFileNotFoundError", 1), (trial, out)
        return
    assert out["errors"] == 0, out
    shown = last_json(workbench("show", f"{out['run_id']}.0.0", "--json").stdout)
    assert shown["state"]["harbor_rewards"] == pytest.approx(trial.rewards)  # every named reward, as Harbor's
    expected = harbor_reward(trial.rewards)
    if expected is not None:
        assert out["mean_reward"] == pytest.approx(expected)


def test_harbor_accepts_every_fixture_task(harbor_venv: Path) -> None:
    """Harbor reads each fixture's task.toml (its own model), so the fixtures are Harbor tasks unchanged."""
    check = ("import sys, pathlib\nfrom harbor.models.task.config import TaskConfig\n"
             "for path in sys.argv[1:]:\n"
             "    try:\n        TaskConfig.model_validate_toml(pathlib.Path(path).read_text())\n"
             "    except Exception as e:\n        print(path, str(e).replace(chr(10), ' '))\n")
    tomls = sorted(str(p) for p in FIXTURES.glob("*/task.toml"))
    done = subprocess.run([str(harbor_venv / "bin" / "python"), "-c", check, *tomls],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "", f"Harbor {harbor_oracle.HARBOR_VERSION} refuses: {done.stdout}"
