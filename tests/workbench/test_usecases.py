"""Each use case is one function that every face calls: the command line (``--json``), ``workbench mcp``
(through the MCP SDK's own client), the app and the Python API (``import workbench as wb``) answer alike."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

CLI_DIR = REPO / "workbench" / "cli"


def _declares_env_args(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "--env-args"
                                              for a in node.args)


def test_env_args_is_declared_once_in_common_and_every_command_uses_it() -> None:
    declared = {p.name for p in CLI_DIR.glob("*.py") if any(_declares_env_args(n) for n in ast.walk(ast.parse(
        p.read_text(encoding="utf-8"))))}
    assert declared == {"common.py"}, f"--env-args declared by hand in {sorted(declared - {'common.py'})}: use " \
                                      "common.env_args_option()"
    users = {p.name for p in CLI_DIR.glob("*_cmd.py") if "@env_args_option(" in p.read_text(encoding="utf-8")}
    assert {"eval_cmd.py", "probe_cmd.py", "rescore_cmd.py", "train_cmd.py", "import_cmd.py"} <= users


def test_run_async_has_one_home() -> None:
    defined = [p.name for p in CLI_DIR.glob("*.py") for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.FunctionDef) and n.name == "run_async"]
    assert defined == ["common.py"]
    assert not [p for p in Path(CLI_DIR).glob("*.py") if "eval_cmd import run_async" in p.read_text(encoding="utf-8")]
