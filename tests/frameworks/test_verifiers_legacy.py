"""verifiers environments of the legacy API (0.3.x) are recognised from their source without importing them,
run with the verifiers version their package declares, and what Workbench does not run is refused in one
line. The parity with verifiers' own evaluation is tests/workbench/test_verifiers_envs.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, write_file
from workbench.errors import EnvLoadError
from workbench.frameworks import legacy_source
from workbench.frameworks.legacy_source import DEFAULT, LegacySource

FIXTURES = REPO / "tests" / "fixtures" / "verifiers_envs"

LEGACY = '''
import verifiers as vf

def load_environment(**kwargs):
    return vf.SingleTurnEnv(dataset=None)
'''
LAZY_IMPORT = '''
def load_environment():
    import verifiers as vf
    return vf.SingleTurnEnv(dataset=None)
'''
FROM_SUBMODULE = '''
from verifiers.legacy.envs.singleturn_env import SingleTurnEnv

def load_environment():
    return SingleTurnEnv(dataset=None)
'''
ASYNC = '''
import verifiers as vf

async def load_environment():
    return None
'''
NO_LOAD_ENVIRONMENT = '''
import verifiers as vf

ENV = vf.SingleTurnEnv
'''
WORKBENCH_ENV = '''
import workbench as wb

def load_environment():
    return wb.Environment(name="x", tasks=[], harness=None)
'''
MENTIONS_ONLY = '''
"""Ported from verifiers: import verifiers as vf."""
import workbench as wb

def load_environment():
    return None
'''
V1_PACKAGE = '''
import verifiers.v1 as vf

class Mine(vf.Taskset):
    pass

__all__ = ["Mine"]

def load_environment():
    return Mine
'''
V1_RETURNED = '''
import verifiers.v1 as vf1

class Counting(vf1.Taskset):
    pass

def load_environment():
    return Counting
'''
BROKEN = '''
import verifiers as vf

def load_environment(:
'''

#: (file name, source, recognised): a module importing verifiers (at the top, in a function, a submodule)
#: that defines load_environment is a legacy environment; Workbench's own, one that only mentions verifiers,
#: one without load_environment, a v1 package and a file that does not parse are not.
SOURCES = [
    ("legacy.py", LEGACY, True),
    ("lazy.py", LAZY_IMPORT, True),
    ("submodule.py", FROM_SUBMODULE, True),
    ("asynchronous.py", ASYNC, True),
    ("v1_object.py", V1_RETURNED, True),  # named by the worker: it returns a v1 class
    ("no_load.py", NO_LOAD_ENVIRONMENT, False),
    ("wb_env.py", WORKBENCH_ENV, False),
    ("mentions.py", MENTIONS_ONLY, False),
    ("v1pkg/__init__.py", V1_PACKAGE, False),
    ("broken.py", BROKEN, False),
]


@pytest.mark.parametrize(("name", "source", "recognised"), SOURCES, ids=[s[0] for s in SOURCES])
def test_a_legacy_environment_is_recognised_from_its_source(tmp_path: Path, name: str, source: str,
                                                             recognised: bool) -> None:
    path = write_file(tmp_path / name, source)
    target = path.parent if name.endswith("__init__.py") else path
    found = legacy_source.find(str(target))
    assert (found is not None) is recognised
    if found is not None:
        assert found.path == target.resolve() and found.module == target.stem


def test_a_package_whose_load_environment_lives_in_a_submodule(tmp_path: Path) -> None:
    write_file(tmp_path / "pkg" / "__init__.py", "from .env import load_environment\n")
    write_file(tmp_path / "pkg" / "env.py", LEGACY)
    found = legacy_source.find(str(tmp_path / "pkg"))
    assert found is not None and found.module == "pkg"


def test_the_fixtures_are_recognised_and_not_imported() -> None:
    for name in ("vf_single", "vf_game", "vf_tools", "vf_stateful", "vf_group", "vf_raising", "vf_judge"):
        assert legacy_source.find(str(FIXTURES / f"{name}.py")) is not None, name
    assert legacy_source.find(str(FIXTURES / "vf_reference.py")) is None  # imports verifiers, no load_environment
    assert not any(m == "verifiers" or m.startswith("verifiers.") for m in sys.modules)


#: (what the package declares, in which file, the requirement it runs with; None: refused)
DECLARED = [
    (None, None, DEFAULT),
    ('["verifiers"]', "pyproject.toml", DEFAULT),
    ('["datasets>=2", "verifiers==0.3.0"]', "pyproject.toml", "verifiers==0.3.0"),
    ('["verifiers>=0.3,<0.4"]', "pyproject.toml", "verifiers<0.4,>=0.3"),
    ('["verifiers>=0.3"]', "pyproject.toml", "verifiers<0.4,>=0.3"),
    ('["verifiers[rl]~=0.3.1"]', "pyproject.toml", "verifiers[rl]~=0.3.1"),
    ("verifiers==0.3.1  # pinned\nrequests\n", "requirements.txt", "verifiers==0.3.1"),
    ('["verifiers>=0.4"]', "pyproject.toml", None),
]


@pytest.mark.parametrize(("deps", "where", "expected"), DECLARED)
def test_the_declared_verifiers_version_is_picked(tmp_path: Path, deps: str | None, where: str | None,
                                                  expected: str | None) -> None:
    env = write_file(tmp_path / "my_env" / "my_env.py", LEGACY)
    if where == "pyproject.toml":
        write_file(tmp_path / "my_env" / where, f'[project]\nname = "my-env"\nversion = "0.1"\ndependencies = {deps}\n')
    elif where is not None:
        write_file(tmp_path / "my_env" / where, deps or "")
    src = legacy_source.find(str(env))
    assert src is not None
    if expected is None:
        with pytest.raises(EnvLoadError) as e:
            legacy_source.requirement(src)
        assert "declares verifiers>=0.4" in str(e.value) and "\n" not in str(e.value)
    else:
        assert legacy_source.requirement(src) == expected


def test_a_package_declares_in_its_own_folder_or_the_one_above(tmp_path: Path) -> None:
    write_file(tmp_path / "proj" / "pyproject.toml", '[project]\nname = "p"\nversion = "0"\ndependencies = '
               '["verifiers==0.3.0"]\n')
    write_file(tmp_path / "proj" / "pkg" / "__init__.py", LEGACY)
    src = legacy_source.find(str(tmp_path / "proj" / "pkg"))
    assert isinstance(src, LegacySource) and legacy_source.requirement(src) == "verifiers==0.3.0"


# -- in verifiers' own environments (built by uv on first use: slow) ----------------------------------------
COMPLETION_ENV = '''
import verifiers as vf
from datasets import Dataset

def load_environment():
    ds = Dataset.from_list([{"question": "q", "answer": "a"}])
    return vf.SingleTurnEnv(dataset=ds, message_type="completion", rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''
TAKES_N = '''
import verifiers as vf
from datasets import Dataset

def load_environment(n: int = 1):
    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}] * n),
                            rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
'''

#: (source, env_args, what the one line says)
REFUSED = [
    (COMPLETION_ENV, {}, "message_type='completion') is not covered"),
    (V1_RETURNED, {}, "is a verifiers v1 taskset"),
    (TAKES_N, {"m": 2}, "does not accept these env_args"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("source", "env_args", "fragment"), REFUSED, ids=["completion", "v1 object", "env_args"])
def test_what_is_not_run_is_refused_in_one_line(tmp_path: Path, source: str, env_args: dict[str, int],
                                                fragment: str) -> None:
    from workbench.frameworks.verifiers_legacy import FORMAT

    path = write_file(tmp_path / "refused.py", source)
    with pytest.raises(EnvLoadError) as e:
        FORMAT.load(path, env_args)
    assert fragment in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.slow
def test_a_declared_version_runs_in_its_own_environment(tmp_path: Path) -> None:
    """``verifiers==0.3.0`` (whose modules are not under ``verifiers.legacy`` yet) loads in its own environment."""
    from workbench.frameworks.verifiers_legacy import FORMAT

    env_file = write_file(tmp_path / "pinned" / "pinned.py", TAKES_N)
    write_file(tmp_path / "pinned" / "pyproject.toml", '[project]\nname = "pinned"\nversion = "0"\ndependencies = '
               '["verifiers==0.3.0"]\n')
    env = FORMAT.load(env_file, {"n": 3})
    assert env.adapter == "verifiers 0.3.0" and env.dialect == "verifiers legacy"
    assert len(env.tasks.materialize()) == 3
    assert [fn.name for fn in env.rubric.rewards] == ["<lambda>"]
