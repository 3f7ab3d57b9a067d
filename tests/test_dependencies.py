"""Every import of the product is a declared dependency: the third-party modules each layer imports (found
by walking its installed modules with ``ast``) belong to distributions ``pyproject.toml`` declares for that
layer. The domain's module-level imports are base dependencies, so ``import workbench`` needs no extra;
an optional feature of the domain (``rl-workbench[hf]``, ``[verifiers]``, ``[inspect]``) is imported
inside the function that needs it. A runtime draws on its own extra, the app on ``tui``."""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO
from workbench import frameworks

FIRST_PARTY = {"workbench", "workbench_app", "workbench_local", "workbench_cloud", "workbench_envs"}
FEATURES = {"hf", "verifiers", "inspect", "openai-evals"}  # optional features of the domain, imported inside functions

# (folder, folders left to another row, extras its module-level imports may use, extras its imports inside
# functions may use besides those). The base dependencies are always allowed; `dev` never is.
LAYERS = [
    pytest.param("workbench", ("workbench/cli",), set(), FEATURES, id="domain"),
    pytest.param("workbench/cli", (), set(), FEATURES, id="cli"),
    pytest.param("app", (), {"tui"}, set(), id="app"),
    pytest.param("local_runtime", (), {"local"}, set(), id="local_runtime"),
    pytest.param("cloud_runtime", (), {"local", "cloud", "vllm", "ray"}, set(), id="cloud_runtime"),
    pytest.param("envs", (), set(), set(), id="envs"),
]


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]

    def names(reqs: list[str]) -> set[str]:
        return {canonicalize_name(Requirement(r).name) for r in reqs}

    return names(project["dependencies"]), {k: names(v) for k, v in project["optional-dependencies"].items()}


#: The files that run in a framework's own interpreter (its workers), whose imports are that framework's.
WORKER_SIDE = {Path("workbench/frameworks") / f"{name}.py" for name in frameworks.WORKER_SIDE}


def _modules(folder: str, skip: tuple[str, ...]) -> Iterator[Path]:
    """The files setuptools installs from a folder that run in Workbench's interpreter: those reached through
    ``__init__.py`` files (an environment's task repositories are data, not modules of the product), less the
    frameworks' worker side."""
    for path in sorted((REPO / folder).rglob("*.py")):
        rel = path.relative_to(REPO)
        if any(rel.is_relative_to(s) for s in skip) or "__pycache__" in rel.parts or rel in WORKER_SIDE:
            continue
        if all((REPO / Path(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts))):
            yield path


def _imports(tree: ast.AST) -> Iterator[tuple[str, int, bool]]:
    """(top-level name, line, whether inside a function) of every absolute import."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, int, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                yield from ((a.name.split(".")[0], child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                yield child.module.split(".")[0], child.lineno, in_function
            yield from walk(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    yield from walk(tree, False)


@pytest.mark.parametrize(("folder", "skip", "extras", "deferred_extras"), LAYERS)
def test_every_import_is_a_declared_dependency(folder: str, skip: tuple[str, ...], extras: set[str],
                                               deferred_extras: set[str]) -> None:
    base, optional = _declared()
    assert extras | deferred_extras <= set(optional) and "dev" not in extras | deferred_extras
    at_top = base.union(*(optional[e] for e in extras))
    in_functions = at_top.union(*(optional[e] for e in deferred_extras))
    dists = importlib.metadata.packages_distributions()
    undeclared, third_party, files = [], set(), 0
    for path in _modules(folder, skip):
        files += 1
        for name, line, in_function in _imports(ast.parse(path.read_text(), str(path))):
            if name in sys.stdlib_module_names or name in FIRST_PARTY:
                continue
            third_party.add(name)
            owners = {canonicalize_name(d) for d in dists.get(name, [name])}
            if not owners & (in_functions if in_function else at_top):
                where = "inside a function" if in_function else "at module level"
                undeclared.append(f"{path.relative_to(REPO)}:{line} imports {name} ({', '.join(sorted(owners))}) "
                                  f"{where}, not declared for {folder}")
    assert files > 0 and (third_party or folder == "envs"), (folder, files, third_party)
    assert not undeclared, "\n".join(undeclared)


def test_imports_inside_functions_are_told_apart() -> None:
    """The walk sees a deferred import as deferred and a module-level one as module-level."""
    tree = ast.parse("import a.b\nfrom c import d\n\ndef f():\n    import e\n\n    class K:\n        from g import h\n"
                     "\nclass C:\n    async def m(self):\n        import i\n    import j\nfrom . import k\n")
    assert sorted(_imports(tree)) == [("a", 1, False), ("c", 2, False), ("e", 5, True), ("g", 8, True),
                                      ("i", 12, True), ("j", 13, False)]


def test_the_worker_side_names_files_that_exist_and_import_no_workbench() -> None:
    """The frameworks' worker side is left out above; each file exists, and none imports Workbench, whose
    interpreter it never runs in."""
    for rel in sorted(WORKER_SIDE):
        imported = {name for name, _, _ in _imports(ast.parse((REPO / rel).read_text()))}
        assert (REPO / rel).is_file() and not imported & FIRST_PARTY, (rel, imported & FIRST_PARTY)
