"""What a framework environment's package declares it needs: the requirement lines of its ``pyproject.toml``
(``[project].dependencies``) or, where that lists none, its ``requirements.txt``, in the package's folder or the
one above (a flat module: its own folder). Read as text, never run.

The framework's own requirement (``verifiers``) picks the framework environment; the others are installed in
it beside the framework, so the environment's imports resolve there. Each must be a plain requirement
(``name[extras] version ; marker``): a URL, a path, an installer option (``-e .``, ``--index-url``) or an
include (``-r``) is refused in one line naming the file, before anything is installed.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from workbench.errors import EnvLoadError


def declared_lines(path: Path) -> tuple[Path | None, list[str]]:
    """The file that declares the package's requirements and its lines (comments and blank lines left out)."""
    folders = [path, path.parent] if path.is_dir() else [path.parent]
    for folder in folders:
        pyproject = folder / "pyproject.toml"
        try:
            data = tomllib.loads(pyproject.read_text())
            deps = (data.get("project") or {}).get("dependencies") or []
            lines = [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
            lines = []
        if lines:
            return pyproject, lines
        reqs = folder / "requirements.txt"
        try:
            text = reqs.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        lines = [s for s in (ln.split(" #")[0].strip() for ln in text.splitlines()) if s and not s.startswith("#")]
        if lines:
            return reqs, lines
    return None, []


def declared(path: Path, name: str) -> Requirement | None:
    """The package's requirement on ``name``, if it declares one."""
    for line in declared_lines(path)[1]:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == canonicalize_name(name):
            return req
    return None


def others(path: Path, framework: str) -> tuple[str, ...]:
    """The package's requirements besides ``framework``'s, each in its normal form, sorted; an ``EnvLoadError``
    naming the file for a line that is not a plain requirement."""
    where, lines = declared_lines(path)
    found: set[str] = set()
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            req = None
        if req is None or req.url or line.startswith("-"):
            raise EnvLoadError(f"{where} requires {line!r}, which is not a plain requirement (name[extras] version; "
                               "no URL, path, installer option or include); refusing it, nothing was installed")
        if canonicalize_name(req.name) != canonicalize_name(framework):
            found.add(str(req))
    return tuple(sorted(found))


__all__ = ["declared", "declared_lines", "others"]
