"""What names an OpenEnv environment, and what a bad name or an unreachable server ends in: one clear line
(``workbench eval`` as a subprocess; no OpenEnv server is started here)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.formats.openenv_support import ENVS
from tests.helpers import CliResult, MockServer, assert_user_error


@pytest.mark.parametrize(("spec", "args", "fragments"), [
    ("openenv:", "{}", ["names nothing"]),
    ("openenv:./no/such/env", "{}", ["no such folder"]),
    (f"openenv:{ENVS}", "{}", ["not an OpenEnv environment folder"]),
    ("openenv+http://", "{}", ["names no host"]),
    ("openenv+docker:", "{}", ["names no Docker image"]),
    ("openenv+http://127.0.0.1:{closed}", "{}", ["cannot reach the OpenEnv server"]),
    ("openenv+{mock_root}", "{}", ["is not an OpenEnv server", "404"]),
    ("openenv+{mock_root}", '{"episodes": 0}', ["episodes", "at least 1"]),
    ("openenv+{mock_root}", '{"max_turns": "many"}', ["max_turns", "at least 1"]),
    ("openenv+{mock_root}", '{"system_prompt": 3}', ["system_prompt", "a text"]),
    ("openenv:not a requirement!", "{}", ["neither an environment folder nor a package requirement"]),
    ("openenv:{readme}", "{}", ["README.md is not a wheel"]),
    ("openenv+docker:-v/:/host", "{}", ["names no Docker image"]),
])
def test_bad_specs_end_in_one_clear_line(
        spec: str, args: str, fragments: list[str], closed_port: int, mock_server: Callable[..., MockServer],
        cli: Callable[..., CliResult]) -> None:
    mock = mock_server("instant")
    spec = spec.format(closed=closed_port, mock_root=mock.root, readme=ENVS / "README.md")
    res = cli("eval", spec, "-n", "1", "-a", args, "--base-url", mock.base_url, "-m", "mock-model")
    assert_user_error(res, *fragments)


@pytest.mark.parametrize(("manifest", "fragments"), [
    ("app: ../../evil:app\n", ["is not a module:attribute reference"]),
    ("app: server.missing:app\n", ["names no file server/missing.py"]),
])
def test_a_folder_whose_manifest_names_no_app_ends_in_one_line(
        tmp_path: Path, manifest: str, fragments: list[str], mock_server: Callable[..., MockServer],
        cli: Callable[..., CliResult]) -> None:
    folder = tmp_path / "bad_env"
    (folder / "server").mkdir(parents=True)
    (folder / "server" / "app.py").write_text("app = None\n")
    (folder / "openenv.yaml").write_text(f"name: bad_env\n{manifest}")
    mock = mock_server("instant")
    res = cli("eval", f"openenv:{folder}", "-n", "1", "--base-url", mock.base_url, "-m", "mock-model")
    assert_user_error(res, *fragments)
