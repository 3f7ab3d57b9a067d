"""The type checker: mypy passes with no error over workbench, workbench_app, workbench_local and
workbench_cloud (``scripts/typecheck.py``, the settings of ``[tool.mypy]`` in pyproject.toml), strict on the
authoring API, the plugin registry and the wire formats."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests.helpers import REPO

STRICT = {"workbench.authoring.*", "workbench.plugins", "workbench.wire.*"}


def _typecheck(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "typecheck.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=1500)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_mypy_finds_no_error() -> None:
    p = _typecheck()
    errors = [line for line in p.stdout.splitlines() if ": error:" in line]
    assert p.returncode == 0 and not errors, "mypy (scripts/typecheck.py) reports:\n" + "\n".join(
        errors or [p.stdout[-4000:], p.stderr[-2000:]])
    assert "Success: no issues found" in p.stdout, p.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_checker_reads_the_installed_names_with_their_types() -> None:
    """A wrong use of an app function, imported by its installed name, is an error: the name resolves to
    the folder (not to nothing, which would type it Any and pass everything)."""
    p = _typecheck("-c", "from workbench_app.format import clip\nfrom workbench_local.sandbox.fs import "
                         "stale_pool_dirs\nn: int = clip('text', 3)\ns: str = stale_pool_dirs()\n")
    assert p.returncode == 1, p.stdout + p.stderr
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in p.stdout, p.stdout
    assert 'expression has type "list[Path]", variable has type "str"' in p.stdout, p.stdout


def test_the_strict_modules_get_every_strict_flag() -> None:
    """``strict = true`` in an override would turn the flags on everywhere (python/mypy#11401): the strict
    modules list them, each one of ``mypy --strict``'s per-module flags."""
    with open(REPO / "pyproject.toml", "rb") as f:
        overrides = tomllib.load(f)["tool"]["mypy"]["overrides"]
    strict = [o for o in overrides if set(o["module"]) == STRICT]
    assert len(strict) == 1, overrides
    assert "strict" not in strict[0]
    flags = {"disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
             "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_return_any",
             "no_implicit_reexport", "strict_equality", "extra_checks"}
    assert {k for k, v in strict[0].items() if v is True} == flags


def test_the_registry_returns_each_groups_type_and_refuses_another() -> None:
    from workbench import plugins
    from workbench.authoring.runtimes import is_pool_class
    from workbench.rollouts.render import is_tokenizers
    from workbench.runs.endpoint import is_model_server
    from workbench.training.backends import backend, is_launch_backend
    from workbench.training.run_config import is_trainer

    for kind, name, conforms in [("backends", "local", is_launch_backend), ("backends", "modal", is_launch_backend),
                                 ("endpoints", "embedded", is_model_server), ("trainers", "local", is_trainer),
                                 ("tokenizers", "transformers", is_tokenizers), ("sandbox_pools", "local", is_pool_class)]:
        assert conforms(plugins.load(kind, name, conforms)), (kind, name)
    assert backend("local").takes == "run" and backend("modal").takes == "launch"
    with pytest.raises(plugins.PluginError) as e:
        plugins.load("backends", "local", is_model_server)
    assert "'local' (workbench_cloud.launch:BACKEND) is a LocalBackend" in str(e.value)
    assert plugins.KINDS["backends"] in str(e.value)
