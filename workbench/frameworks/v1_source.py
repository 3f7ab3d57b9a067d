"""Recognise a verifiers v1 environment (``import verifiers.v1 as vf``) from its source, without importing it:
verifiers 0.4 cannot be imported into Workbench's interpreter (``workbench.frameworks.venvs``).

A v1 environment is a Python file or package, by path or installed module name, whose source imports
``verifiers.v1`` and whose ``__all__`` exports a ``Taskset`` subclass (defined there, or imported from a module
of its own package), as verifiers' loader finds it; or a package whose ``pyproject.toml`` declares
``verifiers>=0.4`` and that exports names through ``__all__``.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

#: A module name the user may type (``my_env``); dotted names are not looked up (it would import parents).
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: A requirement on verifiers whose version is at least 0.4 (``verifiers>=0.4``, ``verifiers==0.4.0``, ...).
_REQUIREMENT = re.compile(r"^\s*verifiers\s*(?:\[[^\]]*\])?\s*(>=|==|~=|>)\s*(\d+)\.(\d+)")
#: The largest source file read when recognising an environment.
_MAX_SOURCE = 2_000_000


@dataclass(frozen=True, slots=True)
class V1Source:
    """Where a v1 environment's code lives: its module name and what it is (a file or a package folder)."""

    module: str
    path: Path  # the .py file or the package folder
    installed: bool = False

    @property
    def entry(self) -> Path:
        """The file the module starts in."""
        return self.path / "__init__.py" if self.path.is_dir() else self.path


def find(spec: str) -> V1Source | None:
    """The v1 environment ``spec`` names (a path or an installed top-level module), or None."""
    src = _locate(spec)
    if src is None or not src.entry.is_file():
        return None
    return src if is_v1(src) else None


def _locate(spec: str) -> V1Source | None:
    p = Path(spec).expanduser()
    if p.is_file() and p.suffix == ".py":
        p = p.resolve()
        return V1Source(p.stem, p)
    if p.is_dir() and (p / "__init__.py").is_file():
        p = p.resolve()
        return V1Source(p.name, p)
    if "/" in spec or spec.endswith(".py") or not _MODULE.fullmatch(spec):
        return None
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin in (None, "built-in", "frozen"):
        return None
    if found.submodule_search_locations:
        folder = Path(next(iter(found.submodule_search_locations)))
        return V1Source(spec, folder.resolve(), installed=True) if (folder / "__init__.py").is_file() else None
    origin = Path(found.origin or "")
    return V1Source(spec, origin.resolve(), installed=True) if origin.suffix == ".py" else None


def _parse(path: Path) -> ast.Module | None:
    """``path``'s syntax tree, or None; parsed once per version of the file (discovery's ``claims``, then
    ``env_name`` and ``load`` each look at the same source)."""
    try:
        st = path.stat()
    except OSError:
        return None
    if st.st_size > _MAX_SOURCE:
        return None
    return _parse_version(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _parse_version(path: Path, mtime_ns: int, size: int) -> ast.Module | None:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None


def _imports_v1(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "verifiers.v1" or a.name.startswith("verifiers.v1.")
                                                for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "verifiers.v1" or node.module.startswith("verifiers.v1."):
                return True
            if node.module == "verifiers" and any(a.name == "v1" for a in node.names):
                return True
    return False


def exports(tree: ast.Module) -> list[str]:
    """The names a module's ``__all__`` lists (a literal list or tuple of strings)."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            value = getattr(node, "value", None)
            if isinstance(value, ast.List | ast.Tuple):
                return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _taskset_class(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return any("Taskset" in ast.unparse(base) for base in node.bases)
    return False


def _imported_from(tree: ast.Module, name: str, src: V1Source, here: Path) -> Path | None:
    """The file of the environment's own package that ``name`` is imported from, if it is."""
    if not src.path.is_dir():
        return None
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not any((a.asname or a.name) == name for a in node.names):
            continue
        if node.level:
            base = here.parent
            for _ in range(node.level - 1):
                base = base.parent
            parts = (node.module or "").split(".") if node.module else []
        elif node.module and node.module.split(".")[0] == src.module:
            base, parts = src.path, node.module.split(".")[1:]
        else:
            return None
        target = base.joinpath(*parts)
        for candidate in (target.with_suffix(".py"), target / "__init__.py"):
            resolved = candidate.resolve()
            if resolved.is_file() and resolved.is_relative_to(src.path):
                return resolved
    return None


def is_v1(src: V1Source) -> bool:
    tree = _parse(src.entry)
    if tree is None:
        return False
    names = exports(tree)
    for name in names:
        if _taskset_class(tree, name) and _imports_v1(tree):
            return True
        origin = _imported_from(tree, name, src, src.entry)
        sub = _parse(origin) if origin is not None else None
        if sub is not None and _taskset_class(sub, name) and _imports_v1(sub):
            return True
    return bool(names) and declares_v1(src)


def declares_v1(src: V1Source) -> bool:
    """Whether the package's ``pyproject.toml`` (in its folder or the one above) requires verifiers 0.4 or later."""
    if not src.path.is_dir():
        return False
    for folder in (src.path, src.path.parent):
        try:
            data = tomllib.loads((folder / "pyproject.toml").read_text())
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        deps = (data.get("project") or {}).get("dependencies") or []
        for dep in deps if isinstance(deps, list) else []:
            m = _REQUIREMENT.match(dep) if isinstance(dep, str) else None
            if m and (int(m.group(2)), int(m.group(3))) >= (0, 4):
                return True
    return False
