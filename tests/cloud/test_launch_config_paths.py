"""``workbench launch --config PATH`` from any directory: a path from the current directory first, then
the cloud package's bundled run configs; one line naming ``--config`` when neither has it. ``--plan``
without a config says which flag gives the ``cloud.*`` keys the plan needs. Real CLI subprocesses, run
from a folder that is not the checkout's root."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import CliResult, last_json

BUNDLED = "cloud_runtime/configs/long-context-28node.toml"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    (folder / "mine").mkdir(parents=True)
    (folder / "mine" / "run.toml").write_text((Path(__file__).parents[2] / BUNDLED).read_text())
    return folder


@pytest.mark.parametrize("given", [
    BUNDLED,                          # as the docs write it, from the checkout's root
    "long-context-28node.toml",       # a bundled config by its name
    "configs/long-context-28node.toml",
    "mine/run.toml",                  # a file of the current directory's
], ids=["docs-path", "bundled-name", "configs-path", "own-file"])
def test_a_relative_config_resolves_from_any_directory(given: str, elsewhere: Path,
                                                      cli: Callable[..., CliResult]) -> None:
    res = cli("launch", "arithmetic", "--config", given, "--plan", "--json", cwd=elsewhere)
    assert res.rc == 0, res.stderr
    plan = last_json(res.stdout)
    assert plan["nodes"] == 28, plan


def test_the_current_directory_wins_over_a_bundled_config(elsewhere: Path, cli: Callable[..., CliResult]) -> None:
    own = elsewhere / "long-context-28node.toml"
    own.write_text("[cloud\n")  # not the bundled file: its own error shows which one was read
    res = cli("launch", "arithmetic", "--config", "long-context-28node.toml", "--plan", cwd=elsewhere)
    assert res.rc != 0 and "is not valid TOML" in res.stderr and str(own.name) in res.stderr, res.stderr


@pytest.mark.parametrize("given", ["nope.toml", "cloud_runtime/configs/nope.toml", "/nowhere/run.toml"])
def test_a_config_found_nowhere_is_one_line_naming_the_flag(given: str, elsewhere: Path,
                                                           cli: Callable[..., CliResult]) -> None:
    res = cli("launch", "arithmetic", "--config", given, "--plan", cwd=elsewhere)
    assert res.rc == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--config {given}: no such file" in lines[0], res.stderr
    assert BUNDLED in lines[0] and "Traceback" not in res.stderr


def test_plan_without_a_config_says_how_to_give_the_cloud_keys(elsewhere: Path,
                                                              cli: Callable[..., CliResult]) -> None:
    res = cli("launch", "arithmetic", "--plan", cwd=elsewhere)
    assert res.rc == 2, res.stderr
    line = res.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert "the plan needs cloud.params_b" in line and "--config FILE" in line and BUNDLED in line, line
    assert "--cloud.params_b N" in line, line
