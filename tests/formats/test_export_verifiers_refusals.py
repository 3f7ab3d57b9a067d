"""What ``workbench export-env --format verifiers`` refuses: one line naming what does not translate, and
nothing written (no package, no temporary folder beside it)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CliResult, assert_user_error, last_json

HEADER = "import workbench as wb\n"
TASKS = 'wb.TaskSet.from_records([{"prompt": "hi", "answer": "x"}])'


def _env(harness: str = "wb.SingleTurn()", reward: str = "completion", extra: str = "") -> str:
    return (f"{HEADER}{extra}\n"
            "def load_environment():\n"
            "    rubric = wb.Rubric()\n"
            f"    rubric.reward(lambda {reward}: 1.0, name='r')\n"
            f"    return wb.Environment(name='probe', tasks={TASKS}, harness={harness}, rubric=rubric)\n")


CUSTOM_HARNESS = "class Mine(wb.Harness):\n    async def run(self, rollout):\n        pass\n"
SANDBOX_TOOL = "async def shell(cmd: str, sandbox) -> str:\n    return ''\n"
SANDBOX_TASKS = 'SANDBOXED = [{"prompt": "hi", "answer": "x", "sandbox": {"files": {"a.txt": "1"}}}]\n'

#: (case, environment source or bundled name, extra arguments, fragments of the one error line)
CASES = [
    ("simulated user", "support_desk", (), ("support_desk", "wb.UserSim", "second model")),
    ("sandbox tools", "coding", (), ("coding", "sandbox")),
    ("own harness", _env("Mine()", extra=CUSTOM_HARNESS), (), ("own harness Mine", "SingleTurn")),
    ("agent program", _env("wb.Program(['python3', 'agent.py'])"), (), ("wb.Program", "sandbox")),
    ("a person", _env("wb.Human(wb.SingleTurn())"), (), ("wb.Human", "person")),
    ("mcp toolset", _env("wb.ToolLoop(tools=[wb.MCPTools(command=['python3', 'srv.py'], name='crm')])"), (),
     ("MCP toolsets (crm)",)),
    ("sandbox-needing tool", _env("wb.ToolLoop(tools=[shell])", extra=SANDBOX_TOOL), (), ("take sandbox",)),
    ("token trace reward", _env(reward="trace"), (), ("reward 'r'", "'trace'")),
    ("sandbox reward", _env(reward="sandbox"), (), ("reward 'r'", "'sandbox'")),
    ("sandboxed tasks", _env(extra=SANDBOX_TASKS).replace(TASKS, "wb.TaskSet.from_records(SANDBOXED)"), (),
     ("sandbox",)),
    ("a secret in the source", _env(extra='API_KEY = "sk-abcdefghijklmnopqrstuvwxyz0123456789"\n'), (),
     ("refusing to export 'probe'", "probe.py:2", "OpenAI-style API key")),
    ("a secret in the arguments", _env().replace("load_environment()", "load_environment(token=None)"),
     ("-a", '{"token": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"}'),
     ("refusing to export", "manifest.json")),
    ("bad package name", "arithmetic", ("--name", "Not A Name"), ("package name", "--name")),
    ("verifiers' own taskset name", "arithmetic", ("--name", "textarena"), ("built-in taskset", "--name")),
]


@pytest.mark.parametrize(("case", "env", "args", "fragments"), CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_line_and_nothing_written(cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                                 tmp_path: Path, case: str, env: str, args: tuple[str, ...],
                                                 fragments: tuple[str, ...]) -> None:
    spec = env if "\n" not in env else str(write_env(env, "probe.py"))
    out = tmp_path / "out" / "pkg"
    res = cli("export-env", spec, "--format", "verifiers", "-o", out, *args)
    assert_user_error(res, *fragments)
    assert not out.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_folder_that_is_not_empty_is_refused_and_left_alone(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    res = cli("export-env", "arithmetic", "--format", "verifiers", "-o", out)
    assert_user_error(res, "not an empty folder")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"] or not any(
        p.name.startswith(".pkg.export-") for p in tmp_path.iterdir())


def test_an_empty_folder_is_filled(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    out.mkdir()
    res = cli("export-env", "arithmetic", "--format", "verifiers", "-o", out, "-a", '{"n": 3}', "--json")
    assert res.rc == 0, res.stderr
    done = last_json(res.stdout)
    assert done["tasks"] == 3 and done["package"] == "arithmetic" and done["requires"] == ["verifiers>=0.4.0,<0.5"]
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert "pyproject.toml" in names and "arithmetic/__init__.py" in names and "arithmetic/_env/source/__init__.py" in names
    assert not any(p.name.startswith(".pkg.export-") for p in tmp_path.iterdir())


def test_an_unknown_format_is_refused(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    res = cli("export-env", "arithmetic", "--format", "inspect", "-o", tmp_path / "pkg")
    assert res.rc != 0 and "verifiers" in res.stderr
    assert not (tmp_path / "pkg").exists()


def _package_env(write_env: Callable[..., Path], dependencies: list[str]) -> Path:
    init = write_env(_env(), "pkgenv/__init__.py")
    (init.parent / "pyproject.toml").write_text(
        f'[project]\nname = "pkgenv"\nversion = "0.1.0"\ndependencies = {json.dumps(dependencies)}\n')
    return init.parent


def test_what_the_environment_declares_is_declared_by_the_package(cli: Callable[..., CliResult],
                                                                   write_env: Callable[..., Path],
                                                                   tmp_path: Path) -> None:
    env = _package_env(write_env, ["numpy>=1.20"])
    res = cli("export-env", env, "--format", "verifiers", "-o", tmp_path / "pkg", "--json")
    assert res.rc == 0, res.stderr
    assert last_json(res.stdout)["requires"] == ["verifiers>=0.4.0,<0.5", "numpy>=1.20"]
    project = tomllib.loads((tmp_path / "pkg" / "pyproject.toml").read_text())["project"]
    assert project["name"] == "probe" and project["dependencies"] == ["verifiers>=0.4.0,<0.5", "numpy>=1.20"]


def test_an_environment_that_declares_workbench_is_refused(cli: Callable[..., CliResult],
                                                           write_env: Callable[..., Path], tmp_path: Path) -> None:
    env = _package_env(write_env, ["rl-workbench>=0.1"])
    res = cli("export-env", env, "--format", "verifiers", "-o", tmp_path / "pkg")
    assert_user_error(res, "rl-workbench", "cannot depend on Workbench")
    assert not (tmp_path / "pkg").exists()
