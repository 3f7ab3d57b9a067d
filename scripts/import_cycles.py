"""Prints every import cycle in the product, one per line (``a -> b -> c -> a``), and exits 1 if there is one.

Two kinds, deferred imports (inside functions) included:

- modules: a module that reaches itself through its imports (a package counts as its ``__init__``);
- siblings: two children of one package that reach each other, counted as wholes
  (``workbench.authoring -> workbench.rollouts -> workbench.authoring``) even where no module cycles.

The imports set aside are the ``ignore_imports`` of the ``acyclic_siblings`` contract in
``pyproject.toml``, which ``lint-imports`` checks the same way; each one there says why. One that matches
no import, or whose imports close no cycle while the others stay aside, is an error: the list only shrinks. The packages are
found on ``sys.path`` by their installed names, so run it from the repository root with
``PYTHONPATH=.`` (``tests/test_import_cycles.py`` does, and runs it over a copy with a planted cycle).
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import grimp
from importlinter.domain.helpers import MissingImport, import_expressions_to_imports
from importlinter.domain.imports import ImportExpression, ModuleExpression

ROOTS = ("workbench", "workbench_local", "workbench_cloud", "workbench_app", "workbench_envs")
CONTRACT_TYPE = "acyclic_siblings"


def set_aside(pyproject: Path) -> list[str]:
    with open(pyproject, "rb") as f:
        contracts = tomllib.load(f)["tool"]["importlinter"]["contracts"]
    return [e for c in contracts if c["type"] == CONTRACT_TYPE for e in c.get("ignore_imports", [])]


def build(pyproject: Path) -> tuple[grimp.ImportGraph, dict[str, list[tuple[str, str]]]]:
    """The product's import graph without the imports set aside, and the (importer, imported) pairs each
    set-aside expression removed (none: it is stale, an error, as ``lint-imports`` reports it)."""
    graph = grimp.build_graph(*ROOTS, include_external_packages=False, cache_dir=None)
    removed = {}
    for text in set_aside(pyproject):
        importer, imported = (ModuleExpression(side.strip()) for side in text.split("->"))
        try:
            found = import_expressions_to_imports(graph, [ImportExpression(importer=importer, imported=imported)])
        except MissingImport:
            found = []
        removed[text] = [(direct.importer.name, direct.imported.name) for direct in found]
        for pair in removed[text]:
            graph.remove_import(importer=pair[0], imported=pair[1])
    return graph, removed


def needless(graph: grimp.ImportGraph, removed: dict[str, list[tuple[str, str]]]) -> list[str]:
    """The set-aside expressions whose imports, put back while the others stay aside, close no cycle."""
    found = []
    for text, pairs in removed.items():
        for importer, imported in pairs:
            graph.add_import(importer=importer, imported=imported)
        if pairs and not (module_cycles(graph) or sibling_cycles(graph)):
            found.append(text)
        for importer, imported in pairs:
            graph.remove_import(importer=importer, imported=imported)
    return found


def _shortest_cycle(graph: grimp.ImportGraph, start: str, within: set[str]) -> list[str]:
    best: tuple[str, ...] | None = None
    for nxt in sorted(graph.find_modules_directly_imported_by(start) & within):
        back = (start,) if nxt == start else graph.find_shortest_chain(importer=nxt, imported=start)
        if back is not None and (best is None or len(back) < len(best)):
            best = back
    assert best is not None
    return [start, *best]


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """One shortest cycle per strongly connected group of modules, through its first module by name."""
    seen: set[str] = set()
    found = []
    for module in sorted(graph.modules):
        if module in seen:
            continue
        group = (graph.find_upstream_modules(module) & graph.find_downstream_modules(module)) | {module}
        seen |= group
        if len(group) > 1:
            found.append(_shortest_cycle(graph, module, group))
    return found


def _sibling_path(graph: grimp.ImportGraph, children: list[str], start: str, goal: str) -> list[str]:
    """The shortest chain of children from ``start`` to ``goal``, each importing the next (breadth first)."""
    came_from = {start: start}
    frontier = [start]
    while goal not in came_from:
        reached = []
        for child in frontier:
            for nxt in children:
                if nxt not in came_from and graph.direct_import_exists(importer=child, imported=nxt, as_packages=True):
                    came_from[nxt] = child
                    reached.append(nxt)
        frontier = reached
    path = [goal]
    while path[-1] != start:
        path.append(came_from[path[-1]])
    return path[::-1]


def sibling_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """For each package whose children import each other in a ring: the ring, one per import that closes
    it (grimp's nomination of the fewest imports whose removal leaves the children acyclic)."""
    found = []
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        children = sorted(graph.find_children(package))
        depth = package.count(".") + 2
        closing = {tuple(".".join(m.split(".")[:depth]) for m in edge)
                   for edge in graph.nominate_cycle_breakers(package)}
        for a, b in sorted(closing):
            found.append([a, *_sibling_path(graph, children, b, a)])
    return found


def main() -> int:
    graph, removed = build(Path.cwd() / "pyproject.toml")
    modules, siblings = module_cycles(graph), sibling_cycles(graph)
    for cycle in modules:
        print("module cycle:", " -> ".join(cycle))
    for cycle in siblings:
        print("sibling cycle:", " -> ".join(cycle))
    stale = [text for text, pairs in removed.items() if not pairs]
    for text in stale:
        print("set aside in pyproject.toml but no such import:", text)
    spare = [] if modules or siblings else needless(graph, removed)  # a cycle left makes every exception look needed
    for text in spare:
        print("set aside in pyproject.toml but it closes no cycle:", text)
    if not (modules or siblings or stale or spare):
        print(f"no import cycles in {len(graph.modules)} modules")
    return 1 if modules or siblings or stale or spare else 0


if __name__ == "__main__":
    sys.exit(main())
