"""The architecture, checked: the layer contracts (import-linter), what ``import workbench`` and the
CLI load, and a third-party runtime plugged in through the registry the way a package would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from setup import FOLDERS
from tests.helpers import REPO, cli_environment, last_json, run_workbench, write_file

HEAVY = ("torch", "transformers", "peft", "textual", "modal", "docker", "workbench_local", "workbench_cloud",
         "workbench_app")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300)


def test_layer_contracts_hold() -> None:
    p = _lint(REPO)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout and "6 kept" in p.stdout, p.stdout[-2000:]


def _contracts() -> dict[str, dict]:
    with open(REPO / "pyproject.toml", "rb") as f:
        config = tomllib.load(f)["tool"]["importlinter"]
    return {c["name"]: c for c in config["contracts"]}


def _product_modules(package: str) -> set[str]:
    """Every module setuptools installs from a top-level folder: files reached through ``__init__.py``."""
    found = set()
    for path in (REPO / package).rglob("*.py"):
        rel = path.relative_to(REPO)
        if "__pycache__" in rel.parts or not all((REPO / Path(*rel.parts[:i]) / "__init__.py").is_file()
                                                 for i in range(1, len(rel.parts))):
            continue
        parts = rel.with_suffix("").parts
        found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_domain_contract_covers_every_module_but_the_cli() -> None:
    """The domain contract names the domain by construction: every module of ``workbench`` is a source of
    it except the command line, whose imports it sets aside wholesale; nothing else is set aside that way,
    and the command line is protected from the rest of the domain."""
    import grimp
    from importlinter.domain.helpers import module_expressions_to_modules
    from importlinter.domain.imports import ModuleExpression

    contracts = _contracts()
    domain = contracts["the domain imports no runtime, face or heavy stack"]
    graph = grimp.build_graph("workbench", cache_dir=None)
    sources = {m.name for m in module_expressions_to_modules(
        graph, [ModuleExpression(e) for e in domain["source_modules"]], as_packages=True)}
    wholesale = set()
    for expression in domain.get("ignore_imports", []):
        importer, imported = (side.strip() for side in expression.split("->"))
        if imported == "**":
            wholesale |= {m.name for m in module_expressions_to_modules(graph, [ModuleExpression(importer)])}
    modules = _product_modules("workbench")
    cli = {m for m in modules if m == "workbench.cli" or m.startswith("workbench.cli.")}
    assert cli and len(modules) > 100, sorted(modules)[:10]
    assert modules <= sources, f"not covered by the domain contract: {sorted(modules - sources)}"
    assert wholesale == cli, f"set aside beyond the command line: {sorted(wholesale ^ cli)}"
    assert domain["unmatched_ignore_imports_alerting"] == "error"
    cli_guard = contracts["the domain never imports the command line"]
    assert cli_guard["type"] == "protected" and cli_guard["protected_modules"] == ["workbench.cli"]
    assert all(c.get("unmatched_ignore_imports_alerting") == "error" for c in contracts.values()), contracts


# Each row plants code in a copy of the product: (file, code, whether it is appended, lines lint-imports prints).
PLANTED = [
    pytest.param("workbench/analysis/probe.py", "def f():\n    import torch\n\n    return torch\n", False,
                 ["workbench is not allowed to import torch", "workbench.analysis.probe -> torch"], id="deferred"),
    pytest.param("workbench/wire/planted.py", "import torch\n\n\ndef f():\n    import workbench_app\n    import workbench_local\n",
                 False, ["workbench is not allowed to import torch", "workbench.wire.planted -> torch",
                         "workbench is not allowed to import workbench_app",
                         "workbench.wire.planted -> workbench_app", "workbench.wire.planted -> workbench_local"], id="wire"),
    pytest.param("workbench/__init__.py", "\n\ndef _planted():\n    import modal\n", True,
                 ["workbench is not allowed to import modal", "workbench -> modal"], id="root-package"),
    pytest.param("workbench/planted.py", "import workbench_cloud\n", False,
                 ["workbench is not allowed to import workbench_cloud", "workbench.planted -> workbench_cloud"],
                 id="root-module"),
    pytest.param("workbench/brand_new/deep/mod.py", "import textual\n", False,
                 ["workbench is not allowed to import textual", "workbench.brand_new.deep.mod -> textual"],
                 id="new-subpackage"),
    pytest.param("workbench/runs/planted.py", "from workbench.cli import common\n", False,
                 ["the domain never imports the command line", "workbench.runs.planted -> workbench.cli.common"],
                 id="domain-imports-cli"),
]


@pytest.mark.parametrize(("rel", "code", "append", "expected"), PLANTED)
def test_layer_contracts_catch_a_planted_import(tmp_path: Path, rel: str, code: str, append: bool,
                                              expected: list[str]) -> None:
    """The contracts are not vacuous: a forbidden import planted anywhere in a copy of the domain, deferred
    or not, in a subpackage written today, breaks them."""
    import shutil

    for name, folder in FOLDERS.items():  # under their installed names, found before the installed ones
        shutil.copytree(REPO / folder, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    target = tmp_path / rel  # every planted row is under workbench/, whose folder is its name
    target.parent.mkdir(parents=True, exist_ok=True)
    for folder in target.relative_to(tmp_path).parents[:-1]:
        (tmp_path / folder / "__init__.py").touch()
    with open(target, "a" if append else "w") as f:
        f.write(code)
    p = _lint(tmp_path)
    assert p.returncode != 0, p.stdout[-3000:]
    for line in expected:
        assert line in p.stdout, f"{line!r} missing from:\n{p.stdout[-3000:]}"


@pytest.mark.parametrize("code", [
    "import workbench",
    "import workbench as wb; wb.Environment; wb.Local(); wb.Docker()",
    "import workbench.cli",
    "from workbench.cli import main; import sys; sys.argv = ['workbench', '--help']\ntry:\n    main()\n"
    "except SystemExit:\n    pass",
])
def test_light_imports_load_no_heavy_module(code: str) -> None:
    check = textwrap.dedent(f"""
        import sys, json
        {code.replace(chr(10), chr(10) + '        ')}
        heavy = {HEAVY!r}
        print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set(heavy))))
    """)
    p = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    loaded = json.loads(p.stdout.strip().splitlines()[-1])
    assert loaded == [], f"{code!r} loaded {loaded}"


TOY_PACKAGE = '''
"""A third-party runtime: sandboxes as plain folders, commands as subprocesses, marked so a test can
see they ran here."""
import asyncio
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import ClassVar

import workbench as wb
from workbench.authoring.sandbox import ExecResult, PoolStats, Sandbox, SandboxPool


@dataclass(slots=True)
class Toy(wb.Runtime):
    kind: ClassVar[str] = "toy"


class ToySandbox(Sandbox):
    kind = "toy"
    isolated = False

    def __init__(self, root):
        self.root, self.workdir, self.id = root, root, os.path.basename(root)
        self.held_since, self.closed = 0.0, False

    async def exec(self, cmd, timeout=None, cwd=None, env=None, stdin=None):
        p = await asyncio.create_subprocess_shell(cmd, cwd=self.root, env={"PATH": os.environ["PATH"],
                                                  "TOY_RUNTIME": "yes", **(env or {})},
                                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await p.communicate()
        return ExecResult(p.returncode, out.decode(), err.decode())

    async def read_file(self, path, *, binary=False):
        data = open(os.path.join(self.root, path), "rb").read()
        return data if binary else data.decode()

    async def write_file(self, path, content):
        with open(os.path.join(self.root, path), "wb") as f:
            f.write(content.encode() if isinstance(content, str) else content)

    async def upload(self, src, dest="."):
        shutil.copy(src, os.path.join(self.root, dest))

    async def download(self, src, dest):
        shutil.copy(os.path.join(self.root, src), dest)

    async def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


class ToyPool(SandboxPool):
    kind = "toy"

    def __init__(self, runtime, *, run_id="", size=4, env_dir=None):
        self.runtime, self.stats, self.held = runtime, PoolStats(), set()

    async def start(self):
        return self

    async def acquire(self, rollout_id="", task=None):
        sb = ToySandbox(tempfile.mkdtemp(prefix="toy-"))
        self.held.add(sb)
        return sb

    async def release(self, sandbox):
        if self._taken_back(sandbox):
            await sandbox.close()

    async def close(self):
        for sb in list(self.held):
            await sb.close()
        self.held.clear()
'''

TOY_ENV = '''
import workbench as wb


def load_environment(n: int = 3) -> wb.Environment:
    rubric = wb.Rubric()

    @rubric.reward
    async def ran_in_toy(sandbox: wb.Sandbox) -> float:
        r = await sandbox.exec("echo $TOY_RUNTIME")
        return float(r.stdout.strip() == "yes")

    tasks = wb.TaskSet.from_records([{"prompt": f"q{i}", "answer": "a"} for i in range(n)], name="toy")
    return wb.Environment(name="toyenv", tasks=tasks, harness=wb.SingleTurn(), rubric=rubric)
'''


def _install_toy(site: Path) -> None:
    write_file(site / "wb_toy_runtime" / "__init__.py", TOY_PACKAGE)
    dist = site / "wb_toy_runtime-0.1.dist-info"
    write_file(dist / "METADATA", "Metadata-Version: 2.1\nName: wb-toy-runtime\nVersion: 0.1\n")
    write_file(dist / "entry_points.txt", "[workbench.runtimes]\ntoy = wb_toy_runtime:Toy\n\n"
                                          "[workbench.sandbox_pools]\ntoy = wb_toy_runtime:ToyPool\n")


def test_third_party_runtime_is_selected_by_name(tmp_path: Path, mock_url: str) -> None:
    site = tmp_path / "site"
    _install_toy(site)
    env_file = write_file(tmp_path / "toyenv.py", TOY_ENV)
    env = cli_environment(tmp_path, tmp_path / "wb.db", PYTHONPATH=str(site))
    res = run_workbench(["eval", env_file, "--runtime", "toy", "--base-url", mock_url, "-m", "mock-model", "--json"], env)
    assert res.rc == 0, res.stderr
    out = last_json(res.stdout)
    assert out["rollouts"] == 3 and out["errors"] == 0 and out["rewards"]["ran_in_toy"] == 1.0, out
    # Without the package, the same name is one clear line naming what is installed.
    bare = cli_environment(tmp_path, tmp_path / "wb.db")
    res = run_workbench(["eval", env_file, "--runtime", "toy", "--base-url", mock_url, "-m", "mock-model"], bare)
    assert res.rc != 0 and "Traceback" not in res.stderr
    assert "unknown --runtime 'toy'" in res.stderr and "docker" in res.stderr and "local" in res.stderr, res.stderr


def test_registry_lists_the_bundled_plugins() -> None:
    from workbench import plugins

    assert {"local", "docker", "modal"} <= set(plugins.names("runtimes"))
    assert {"local", "docker"} <= set(plugins.names("sandbox_pools"))
    assert plugins.names("endpoints") == ["embedded"] and "local" in plugins.names("trainers")
    assert {"local", "modal"} <= set(plugins.names("backends")) and "transformers" in plugins.names("tokenizers")
    with pytest.raises(plugins.PluginError, match="no backend named 'modall'.*did you mean 'modal'"):
        plugins.load("backends", "modall")
