"""One namespace: Workbench installs nothing generic, so a project's own `app/` and `envs/` packages stay
the project's. Bundled environments are found where they are installed, never by importing `envs`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from setup import FOLDERS
from tests.helpers import MockServer, cli_environment, last_json, run_workbench, write_file

BUNDLED = {"arithmetic", "coding", "doc_search", "next_number", "support_desk", "wordle"}

# The env imports the project's own `app` module and scores 1 only when it got that one.
OWN_APP_ENV = '''
import app
import workbench as wb


def load_environment() -> wb.Environment:
    rows = [{"prompt": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(3)]
    rubric = wb.Rubric()

    @rubric.reward
    def own_app(completion: str) -> float:
        return float(app.WHOSE == "the project's")

    return wb.Environment(name="uses_own_app", tasks=wb.TaskSet.from_records(rows, name="sums"),
                          harness=wb.SingleTurn(), rubric=rubric)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with packages named like Workbench's folders: `app`, `envs`, `local_runtime`."""
    root = tmp_path / "project"
    write_file(root / "app" / "__init__.py", 'WHOSE = "the project\'s"\n')
    write_file(root / "envs" / "__init__.py", '"""The project\'s own envs package, not an environment."""\n')
    write_file(root / "local_runtime" / "__init__.py", "")
    write_file(root / "uses_own_app.py", OWN_APP_ENV)
    return root


def test_installed_names_do_not_collide() -> None:
    """Each top-level folder installs as workbench or workbench_<name>; nothing generic is importable."""
    assert all(name == "workbench" or name.startswith("workbench_") for name in FOLDERS), FOLDERS
    code = ("import importlib.util, json, sys; sys.path.remove('') if '' in sys.path else None; "
            "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))")
    names = ["app", "envs", "local_runtime", "cloud_runtime", *FOLDERS]
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True,
                         cwd="/")
    found = last_json(out.stdout)
    assert found == {**dict.fromkeys(["app", "envs", "local_runtime", "cloud_runtime"], False),
                     **dict.fromkeys(FOLDERS, True)}, found


@pytest.mark.parametrize("how", ["workbench", "python -m workbench.cli"])
def test_bundled_envs_are_listed_from_a_project_with_its_own_envs_package(project: Path, how: str) -> None:
    env = cli_environment(project)
    if how == "workbench":
        res = run_workbench(["envs", "--json"], env, cwd=project)
        rc, stdout, stderr = res.rc, res.stdout, res.stderr
    else:  # the current folder is first on sys.path: its `envs` shadows any installed one
        p = subprocess.run([sys.executable, "-m", "workbench.cli", "envs", "--json"], env=env, cwd=project,
                           capture_output=True, text=True, timeout=120)
        rc, stdout, stderr = p.returncode, p.stdout, p.stderr
    assert rc == 0, stderr
    rows = last_json(stdout)["envs"]
    assert {r["name"] for r in rows if r["origin"] == "bundled"} == BUNDLED, rows


def test_eval_from_a_project_with_its_own_app_and_envs(project: Path, arith_server: MockServer) -> None:
    """A bundled env evaluates from that folder, and an env's `import app` gets the project's module."""
    env = cli_environment(project, project / "store.db")
    common = ["--base-url", arith_server.base_url, "-m", "mock-model", "-n", "3", "-r", "1", "--json"]
    res = run_workbench(["eval", "arithmetic", *common], env, cwd=project)
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["rollouts"] == 3
    res = run_workbench(["eval", "uses_own_app.py", *common], env, cwd=project)
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["errors"] == 0 and summary["mean_reward"] == 1.0, summary
