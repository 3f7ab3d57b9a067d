"""``workbench hub search``, ``versions`` and ``show``: what an index holds, read through its simple API.

A version's eval card is read from its wheel, downloaded once and kept in ``<cache>/hub/`` under its sha256
(a published file never changes), so browsing an index costs one download per version ever seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.config import paths
from workbench.errors import EndpointError, NotFoundError
from workbench.hub.publish import project_name, read_card, sorted_versions, wheel_versions
from workbench.hub.pull import env_projects, parse_spec, pick_version, versions_of
from workbench.hub.safe_fs import write_inside
from workbench.hub.simple_api import IndexClient, IndexFile
from workbench.packaging.indexes import resolve_index


def _cache(f: IndexFile) -> Path | None:
    return paths.cache_dir() / "hub" / f"{f.sha256}.whl" if f.sha256 else None


def card_of(client: IndexClient, f: IndexFile) -> dict[str, Any]:
    """The eval card of one published file (from the cache when this file was seen before); EndpointError
    naming the file when its card is not usable."""
    cached = _cache(f)
    if cached is not None and cached.is_file():
        return read_card(cached.read_bytes(), f.filename)
    data = client.download(f)
    if cached is not None:
        write_inside(cached.parent, cached, data)
    return read_card(data, f.filename)


def _summary(card: dict[str, Any]) -> str:
    text = (card.get("description") or card.get("readme") or "").strip().splitlines()
    return text[0][:120] if text else ""


def _no_wheel(client: IndexClient, env: str, files: list[IndexFile]) -> str:
    what = f"{len(files)} other file{'s' if len(files) != 1 else ''}" if files else "no files"
    return (f"project {project_name(env)} on index {client.index.name} has no wheel to read an eval card from "
            f"({what}); an environment is published as a wheel (`workbench hub push`)")


def search(text: str | None = None, index: str | None = None) -> dict[str, Any]:
    """The index's environments whose name, description or README holds ``text`` (all without one); a
    project with no wheel or no usable card is left out and named in ``skipped`` (its version None
    when it has none)."""
    idx = resolve_index(index)
    client = IndexClient(idx)
    needle = (text or "").lower().replace("-", "_")
    rows, skipped = [], []
    for name in env_projects(client):
        env = name.replace("-", "_")
        try:
            files = client.files(project_name(env))
        except NotFoundError:
            files = []
        found = wheel_versions(files)
        if not found:  # a project without a wheel is skipped and named, as a bad card is
            skipped.append({"name": env, "version": None, "reason": _no_wheel(client, env, files)})
            continue
        latest = sorted_versions(list(found))[-1]
        try:
            card = card_of(client, found[latest])
        except EndpointError as e:  # one bad card is skipped and named, never the end of the listing
            skipped.append({"name": env, "version": latest, "reason": str(e)})
            continue
        haystack = f"{env} {card.get('description', '')} {card.get('readme', '')}".lower()
        if needle and needle not in haystack and needle.replace("_", " ") not in haystack:
            continue
        rows.append({"name": str(card.get("env") or env), "latest": latest, "versions": len(found),
                     "summary": _summary(card), "hash": card.get("hash"), "results": len(card.get("results") or [])})
    return {"index": idx.name, "url": idx.url, "query": text or "", "environments": rows, "skipped": skipped}


def versions(name: str, index: str | None = None) -> dict[str, Any]:
    idx = resolve_index(index)
    client = IndexClient(idx)
    found = versions_of(client, name)
    rows = []
    for v in sorted_versions(list(found)):
        try:
            card, error = card_of(client, found[v]), None
        except EndpointError as e:  # one bad card is that version's row, not the end of the listing
            card, error = {}, str(e)
        rows.append({"version": v, "hash": card.get("hash"), "env_version": card.get("env_version"),
                     "file": found[v].filename, "sha256": found[v].sha256, "results": len(card.get("results") or []),
                     **({"error": error} if error else {})})
    return {"index": idx.name, "name": name, "versions": rows}


def show(spec: str, index: str | None = None) -> dict[str, Any]:
    name, version = parse_spec(spec)
    idx = resolve_index(index)
    client = IndexClient(idx)
    _, f = pick_version(versions_of(client, name), name, version, idx.name)
    return {"index": idx.name, **card_of(client, f)}


__all__ = ["card_of", "search", "show", "versions"]
