"""Framework environments: built once by uv from their requirements (the package index the setup uses), an
older build of the same requirements removed, a build that fails is one line and leaves no folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from workbench.errors import EnvLoadError
from workbench.frameworks.venvs import _DONE, FrameworkEnv

# slow: each test builds a virtual environment with uv from the package index
pytestmark = pytest.mark.slow


@pytest.fixture
def frameworks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WORKBENCH_FRAMEWORKS_DIR", str(tmp_path / "frameworks"))
    return tmp_path / "frameworks"


def test_an_environment_is_built_once_and_an_older_build_of_it_is_removed(frameworks: Path) -> None:
    env = FrameworkEnv("probe", ("six==1.17.0",))
    older = frameworks / "probe-000000000000"  # the first layout's mark: the requirements alone
    (older / "bin").mkdir(parents=True)
    (older / _DONE).write_text("six==1.17.0\n")
    other = frameworks / "probe-111111111111"  # another version of the framework: kept
    (other / "bin").mkdir(parents=True)
    (other / _DONE).write_text("layout 1\nsix==1.16.0\n")

    python = env.ensure()
    out = subprocess.run([str(python), "-c", "import six; print(six.__version__)"], capture_output=True, text=True)
    assert out.stdout.strip() == "1.17.0", out.stderr
    assert not older.exists() and other.is_dir()
    assert sorted(p.name for p in frameworks.iterdir() if not p.name.startswith(".")) == sorted(
        [env.key, other.name])
    mark = (env.root / _DONE).stat().st_mtime_ns
    assert env.ensure() == python and (env.root / _DONE).stat().st_mtime_ns == mark  # not built again


def test_a_build_that_fails_is_one_line_and_leaves_nothing(frameworks: Path) -> None:
    env = FrameworkEnv("probe", ("workbench-no-such-package-for-tests==0.0.1",))
    with pytest.raises(EnvLoadError) as e:
        env.ensure()
    assert "cannot build the probe environment (workbench-no-such-package-for-tests==0.0.1)" in str(e.value)
    assert "\n" not in str(e.value)
    assert [p.name for p in frameworks.iterdir() if not p.name.startswith(".")] == []
    assert not any(p.name.startswith(f".{env.key}.building") for p in frameworks.iterdir())
