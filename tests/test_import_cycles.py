"""No import cycles in the product: between modules, and between the children of any package, deferred
imports included (``scripts/import_cycles.py``, on grimp's graph; the ``acyclic_siblings`` contract in
``pyproject.toml`` says the same to ``lint-imports``). Planted cycles in a copy show the check prints them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from setup import FOLDERS
from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "import_cycles.py"


def _cycles(root: Path) -> subprocess.CompletedProcess[str]:
    """The script over the packages under ``root`` (found first on the path, by their installed names)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-P", str(SCRIPT)], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_product_has_no_import_cycles() -> None:
    p = _cycles(REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "no import cycles in" in p.stdout, p.stdout


def _copy(tmp_path: Path) -> Path:
    for name, folder in FOLDERS.items():
        shutil.copytree(REPO / folder, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    return tmp_path


# (file, code appended, lines the script prints)
PLANTED = [
    pytest.param("workbench_local/server/http_app.py",
                 "\n\ndef _planted():\n    from workbench_local.server.app import create_app\n\n    return create_app\n",
                 ["module cycle: workbench_local.server.app -> workbench_local.server.http_app -> "
                  "workbench_local.server.app"], id="deferred-module-cycle"),
    pytest.param("workbench/wire/planted.py", "import workbench.rollouts.proxy\n",
                 ["sibling cycle: workbench.wire -> workbench.rollouts -> workbench.wire"], id="sibling-packages"),
]


@pytest.mark.parametrize(("rel", "code", "expected"), PLANTED)
def test_a_planted_cycle_is_printed(tmp_path: Path, rel: str, code: str, expected: list[str]) -> None:
    root = _copy(tmp_path)
    with open(root / rel, "a") as f:
        f.write(code)
    p = _cycles(root)
    assert p.returncode == 1, p.stdout + p.stderr
    for line in expected:
        assert line in p.stdout.splitlines(), f"{line!r} missing from:\n{p.stdout}"
    lint = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert lint.returncode != 0 and "no import cycles between the children of any package BROKEN" in lint.stdout, \
        lint.stdout[-3000:]


@pytest.mark.parametrize(("expression", "complaint"), [
    pytest.param("workbench.errors -> workbench.nowhere", "no such import", id="stale"),
    pytest.param("workbench_local.server.app -> workbench_local.server.state", "it closes no cycle", id="needless"),
])
def test_a_needless_exception_is_an_error(tmp_path: Path, expression: str, complaint: str) -> None:
    """An exception in the contract that matches no import, or whose imports close no cycle, is an error,
    so the list only shrinks."""
    root = _copy(tmp_path)
    config = root / "pyproject.toml"
    text = config.read_text()
    head, contract = text.split('type = "acyclic_siblings"', 1)  # the exceptions of this contract
    config.write_text(head + 'type = "acyclic_siblings"'
                      + contract.replace('ignore_imports = [', f'ignore_imports = [\n    "{expression}",', 1))
    assert expression in config.read_text()
    p = _cycles(root)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"set aside in pyproject.toml but {complaint}: {expression}" in p.stdout.splitlines(), p.stdout
