"""Recognise a verifiers environment of its legacy API (0.3.x) from its source, without importing it: verifiers
0.3 cannot be imported into Workbench's interpreter (it needs ``mcp<2``).

A legacy environment is a Python file or package, by path or installed module name, that imports verifiers
(anywhere in the file; for a package, in any of its files) and defines ``load_environment`` (or imports it into
its ``__init__``), and that is not a v1 environment (``v1_source``). The verifiers version it runs with is the
one its package declares (``pyproject.toml``'s dependencies, else ``requirements.txt``, in its folder or the
one above), else :data:`DEFAULT`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from workbench.errors import EnvLoadError
from workbench.frameworks import package_deps, v1_source
from workbench.frameworks.v1_source import V1Source as LegacySource

#: The verifiers an environment that declares none runs with.
DEFAULT = "verifiers==0.3.1"
#: The most files of a package read when looking for its import of verifiers.
_MAX_FILES = 200
#: The 0.3 releases a declared requirement is matched against (it must allow one of them).
_LEGACY_VERSIONS = [f"0.3.{i}" for i in range(100)]


def find(spec: str) -> LegacySource | None:
    """The legacy environment ``spec`` names (a path or an installed top-level module), or None."""
    src = v1_source._locate(spec)
    if src is None or not src.entry.is_file():
        return None
    return src if is_legacy(src) else None


def imports_verifiers(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "verifiers" or a.name.startswith("verifiers.")
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                node.module == "verifiers" or node.module.startswith("verifiers.")):
            return True
    return False


def defines_load_environment(tree: ast.Module) -> bool:
    """Whether the module defines ``load_environment`` at its top level (a function, an assignment, or an
    import under that name)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "load_environment":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "load_environment"
                                                for t in node.targets):
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "load_environment" for a in node.names):
            return True
    return False


def _package_files(folder: Path) -> list[Path]:
    files: list[Path] = []
    for f in sorted(folder.rglob("*.py")):
        if any(part.startswith(".") or part in ("__pycache__", "tests") for part in f.relative_to(folder).parts):
            continue
        files.append(f)
        if len(files) >= _MAX_FILES:
            break
    return files


def is_legacy(src: LegacySource) -> bool:
    tree = v1_source._parse(src.entry)
    if tree is None or not defines_load_environment(tree):
        return False
    found = imports_verifiers(tree)
    if not found and src.path.is_dir():
        found = any((sub := v1_source._parse(f)) is not None and imports_verifiers(sub)
                    for f in _package_files(src.path) if f != src.entry)
    return found and not v1_source.is_v1(src)


def declared(src: LegacySource) -> Requirement | None:
    """The verifiers requirement the environment's package declares, if it declares one."""
    return package_deps.declared(src.path, "verifiers")


def requirement(src: LegacySource) -> str:
    """The verifiers requirement the environment runs with: the declared one, kept within 0.3 (``verifiers>=0.3``
    is ``verifiers<0.4,>=0.3``), else :data:`DEFAULT`; an ``EnvLoadError`` when it allows no 0.3 release."""
    req = declared(src)
    if req is None or not str(req.specifier):
        return DEFAULT
    spec = req.specifier
    if not any(spec.contains(v, prereleases=True) for v in _LEGACY_VERSIONS):
        raise EnvLoadError(f"{src.path} declares {req.name}{spec}, but it is written for verifiers' legacy API (a "
                           "load_environment, no v1 Taskset exported through __all__), which Workbench runs with "
                           "verifiers 0.3.x; declare verifiers>=0.3,<0.4")
    if spec.contains("0.4.0", prereleases=True):
        spec = spec & SpecifierSet("<0.4")
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"verifiers{extras}{spec}"


__all__ = ["DEFAULT", "LegacySource", "declared", "find", "is_legacy", "requirement"]
