"""``workbench new``: every template makes an environment that discovery finds, that validates, and
that evals against a real mock server; bad names and existing folders are clear errors that write nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import CliResult, MockServer, assert_user_error, last_json, query
from workbench.authoring import discovery
from workbench.authoring.templates import PLACEHOLDER, TEMPLATES, check_name, create_env
from workbench.errors import ConfigError

# slow: every template created, validated and evaluated through the CLI
pytestmark = pytest.mark.slow


def _user_envs(tmp_path: Path) -> Path:
    return tmp_path / "xdg-data" / "workbench" / "envs"  # where cli_environment puts XDG_DATA_HOME


def _tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": name, "arguments": json.dumps(arguments)}}]}


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_each_template_creates_an_env_that_validates_and_evals(
        template: str, cli: Callable[..., CliResult], mock_server: Callable[..., MockServer], tmp_path: Path,
        store_path: Path) -> None:
    name = "my_" + template.replace("-", "_")
    res = cli("new", name, "--template", template, "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    path = _user_envs(tmp_path) / name
    assert out == {"name": name, "template": template, "path": str(path), "env": name}
    assert (path / "__init__.py").is_file() and not list(path.rglob("__pycache__"))
    assert not any(PLACEHOLDER in f.read_text() for f in path.rglob("*") if f.is_file())
    assert f'name="{name}"' in (path / "__init__.py").read_text()

    envs = {e["name"]: e for e in last_json(cli("envs", "--json").stdout)["envs"]}
    assert envs[name]["origin"] == "user" and envs[name]["path"] == str(path)

    res = cli("validate", name, "--json")
    assert res.rc == 0, res.stdout + res.stderr
    rep = last_json(res.stdout)
    assert rep["ok"] and not rep["problems"] and rep["tasks_checked"] >= 4
    assert rep["gold"]["total"] >= 1.0 and rep["empty"]["total"] == 0.0  # the gold answer earns the reward

    server = mock_server("instant")
    res = cli("eval", name, "-n", "2", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["env"] == name and summary["rollouts"] == 2 and summary["errors"] == 0
    assert summary["rewards"] and summary["metrics"]
    assert query(store_path, "SELECT COUNT(*) FROM rollout WHERE run_id = ?", (summary["run_id"],))[0][0] == 2


def test_tools_template_tools_answer_the_model(cli: Callable[..., CliResult],
                                                mock_server: Callable[..., MockServer], store_path: Path) -> None:
    """The tools template's tools really serve the model: a scripted model looks both mugs up and answers."""
    assert cli("new", "shop", "--template", "tools").rc == 0
    server = mock_server("script", script=[_tool_call("stock", {"item": "red mug"}),
                                           _tool_call("stock", {"item": "Blue Mug"}, "call_2"), "23"])
    res = cli("eval", "shop", "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["mean_reward"] == 1.0 and summary["metrics"] == {"answered_blind": 0.0, "tool_calls": 2.0}
    messages = json.loads(query(store_path, "SELECT messages FROM rollout")[0][0])
    assert [m["content"] for m in messages if m["role"] == "tool"] == ["14 units of red mug in stock",
                                                                       "9 units of blue mug in stock"]


def test_sandboxed_template_runs_commands_in_the_seeded_sandbox(
        cli: Callable[..., CliResult], mock_server: Callable[..., MockServer], store_path: Path,
        tmp_path: Path) -> None:
    assert cli("new", "logs", "--template", "sandboxed").rc == 0
    env = discovery.load(str(_user_envs(tmp_path) / "logs"))
    task = env.tasks[0]
    server = mock_server("script", script=[_tool_call("run", {"cmd": "grep -c ' ERROR ' logs/app.log"}),
                                           task.answer])
    res = cli("eval", "logs", "-n", "1", "--base-url", server.base_url, "-m", "mock-model", "--json")
    assert res.rc == 0, res.stderr
    summary = last_json(res.stdout)
    assert summary["mean_reward"] == 1.0 and summary["metrics"]["log_untouched"] == 1.0
    messages = json.loads(query(store_path, "SELECT messages FROM rollout")[0][0])
    tool = next(m["content"] for m in messages if m["role"] == "tool")
    assert tool.startswith("exit code 0") and task.answer in tool  # grep counted the seeded file


@pytest.mark.parametrize("name, fragment", [
    ("1env", "not a valid environment name"), ("my-env", "not a valid environment name"),
    ("../escape", "not a valid environment name"), ("class", "Python keyword"), ("x" * 65, "keep it to 64"),
    ("arithmetic", "already a bundled environment"),
])
def test_bad_names_are_refused(name: str, fragment: str, cli: Callable[..., CliResult], tmp_path: Path) -> None:
    assert_user_error(cli("new", name, "--template", "tools"), fragment)
    assert not _user_envs(tmp_path).exists() or not any(_user_envs(tmp_path).iterdir())


def test_existing_directory_is_an_error_and_nothing_is_overwritten(cli: Callable[..., CliResult],
                                                                    tmp_path: Path) -> None:
    target = tmp_path / "projects" / "mine"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("keep me")
    assert_user_error(cli("new", "mine", "--dir", str(tmp_path / "projects")), "already exists", "nothing was written")
    assert [p.name for p in target.iterdir()] == ["notes.txt"] and (target / "notes.txt").read_text() == "keep me"
    assert [p.name for p in target.parent.iterdir()] == ["mine"]  # no staging folder left behind

    (tmp_path / "projects" / "single.py").write_text("# a file env of the same name\n")
    assert_user_error(cli("new", "single", "--dir", str(tmp_path / "projects")), "single.py already exists")

    assert cli("new", "twice").rc == 0
    before = (_user_envs(tmp_path) / "twice" / "__init__.py").read_text()
    assert_user_error(cli("new", "twice", "--template", "multi-turn"), "already exists")
    assert (_user_envs(tmp_path) / "twice" / "__init__.py").read_text() == before


def test_dir_option_and_unknown_template(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    res = cli("new", "local_game", "--template", "multi-turn", "--dir", str(tmp_path / "here"), "--json")
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["path"] == out["env"] == str(tmp_path / "here" / "local_game")
    assert cli("validate", out["env"]).rc == 0
    res = cli("new", "x", "--template", "chess")
    assert res.rc != 0 and "chess" in res.stderr and "Traceback" not in res.stderr
    (tmp_path / "afile").write_text("")
    assert_user_error(cli("new", "y", "--dir", str(tmp_path / "afile")), "not a directory")


def test_check_name_and_create_env_in_process(tmp_path: Path) -> None:
    assert check_name("  ok_name2 ") == "ok_name2"
    with pytest.raises(ConfigError, match="give the new environment a name"):
        check_name(" ")
    with pytest.raises(ConfigError, match="unknown template 'nope'"):
        create_env("fine", "nope", tmp_path)
    path = create_env("fine", "single-turn", tmp_path)
    env = discovery.load(str(path))
    assert env.name == "fine" and len(env.tasks) == 8 and (path / "tasks.jsonl").is_file()
