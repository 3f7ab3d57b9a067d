"""The architecture, checked: the layer contracts (import-linter), what ``import workbench`` and the
CLI load, and a third-party runtime plugged in through the registry the way a package would."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO, cli_environment, last_json, run_workbench, write_file

HEAVY = ("torch", "transformers", "peft", "textual", "modal", "docker", "local_runtime", "cloud_runtime", "app")


def test_layer_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout and "4 kept" in p.stdout, p.stdout[-2000:]


def test_layer_contracts_catch_a_deferred_import(tmp_path: Path) -> None:
    """The contracts are not vacuous: a function-level import of torch in a copy of the domain breaks them."""
    import shutil

    for name in ("workbench", "local_runtime", "cloud_runtime", "app", "envs"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    write_file(tmp_path / "workbench" / "analysis" / "probe.py", "def f():\n    import torch\n\n    return torch\n")
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "workbench.analysis is not allowed to import torch" in p.stdout, p.stdout[-3000:]
    assert "workbench.analysis.probe -> torch" in p.stdout, p.stdout[-3000:]


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
