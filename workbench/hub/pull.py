"""``workbench hub pull``, ``fork`` and ``remove``: published environments on this machine.

A pull downloads one version's wheel (checked against the sha256 the index lists), reads its eval card and
metadata as data (nothing of it runs: its code runs when the user runs it), refuses it, installing
nothing, when its files and lock differ from the hash its card and summary carry, when its card names
another environment, or when a requirement is not a plain one (:mod:`workbench.hub.unpack`). Each version
lies in a folder of its own, ``<data>/hub/installed/NAME+XXXXXXXX/`` (the files, and ``deps/`` for its
locked dependencies, installed by ``uv pip install --target``; never the user's project venv); the record
``<data>/hub/records/NAME.json`` names the version installed and its files, so ``envs``, ``eval``, the app
and ``launch`` find it by name. Pulls and removals of one name take its lock (``<data>/hub/locks/``);
every delete and overwrite stays inside the hub folder (:mod:`workbench.hub.safe_fs`). A fork puts a
version's sources into the user's env folder under a new name, with what it was forked from beside them
(``workbench.fork.json``, shown by ``envs`` and carried by its own pushes).
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.env_files import content_hash
from workbench.bundles.bundle import lock_text
from workbench.config import paths
from workbench.errors import ConfigError, NotFoundError, WorkbenchError
from workbench.hub import safe_fs
from workbench.hub.publish import (
    FORKED_FROM,
    fork_record,
    project_name,
    read_card,
    sorted_versions,
    wheel_versions,
)
from workbench.hub.simple_api import IndexClient, IndexFile
from workbench.hub.unpack import requirement, unpack
from workbench.packaging.indexes import Index, resolve_index

PREFIX = "workbench-env-"


class HashMismatchError(WorkbenchError):
    """A downloaded environment is not what its metadata says: nothing is installed."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """One published version, downloaded and verified."""

    name: str
    version: str
    index: Index
    file: IndexFile
    kind: str  # package | module
    files: list[tuple[str, bytes]]
    lock: list[str]
    card: dict[str, Any]

    @property
    def hash(self) -> str:
        return str(self.card["hash"])


def parse_spec(spec: str) -> tuple[str, str | None]:
    name, sep, version = spec.partition("==")
    if not name.strip() or (sep and not version.strip()):
        raise ConfigError(f"{spec!r} is not NAME or NAME==VERSION")
    return name.strip(), (version.strip() or None)


def env_projects(client: IndexClient) -> list[str]:
    """The environment names an index holds (its ``workbench-env-*`` projects)."""
    return sorted(p[len(PREFIX):] for p in client.projects() if p.startswith(PREFIX))


def versions_of(client: IndexClient, name: str) -> dict[str, IndexFile]:
    try:
        found = wheel_versions(client.files(project_name(name)))
    except NotFoundError:
        found = {}
    if not found:
        known = env_projects(client)
        close = difflib.get_close_matches(name.replace("_", "-"), known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else \
            (f"; it holds {', '.join(known[:10])}" if known else "; it holds no Workbench environment")
        raise NotFoundError(f"no environment {name!r} on index {client.index.name}{hint}")
    return found


def pick_version(found: dict[str, IndexFile], name: str, version: str | None, index: str) -> tuple[str, IndexFile]:
    """``version`` of ``found`` (the newest without one); NotFoundError naming the versions there are."""
    ordered = sorted_versions(list(found))
    if version is None:
        version = ordered[-1]
    elif version not in found:
        raise NotFoundError(f"{name} has no version {version} on index {index}; it has {', '.join(ordered)}")
    return version, found[version]


def fetch(spec: str, index: str | None = None) -> Fetched:
    """Download and verify ``NAME[==VERSION]`` (the newest without one). Nothing in it runs: its card and
    metadata are read as data, its requirements checked (:mod:`workbench.hub.unpack`)."""
    name, version = parse_spec(spec)
    idx = resolve_index(index)
    client = IndexClient(idx)
    version, f = pick_version(versions_of(client, name), name, version, idx.name)
    wheel = client.download(f)
    card = read_card(wheel, f.filename)
    env_name = str(card.get("env") or name)
    if project_name(env_name) != project_name(name):
        raise HashMismatchError(f"{f.filename} from index {idx.name} names environment {env_name!r} in its card, not "
                                f"{name!r}; refusing it, nothing was installed")
    try:
        kind, files, lock, stated = unpack(env_name, wheel, f.filename)
    except (StopIteration, KeyError, zipfile.BadZipFile) as e:
        raise HashMismatchError(f"{f.filename} is not a Workbench environment wheel ({type(e).__name__}); "
                                "nothing was installed") from None
    got = content_hash(files, lock_text(lock))
    if got != card.get("hash") or (stated and stated != card.get("hash")):
        raise HashMismatchError(f"{f.filename} from index {idx.name}: its files hash to {got[:12]} but its metadata "
                                f"says {str(card.get('hash'))[:12]}; refusing it, nothing was installed")
    return Fetched(env_name, version, idx, f, kind, files, lock, card)


def records_dir() -> Path:
    return paths.hub_dir() / "records"


def installed_dir() -> Path:
    """Where pulled versions lie, one folder each (``NAME+XXXXXXXX``: the files, ``deps/``)."""
    return paths.hub_dir() / "installed"


def record(name: str) -> dict[str, Any] | None:
    """The record of the pulled environment ``name`` (None for any other name, a path included)."""
    return discovery.hub_records().get(name)


def _name_lock(name: str) -> Any:
    """Held to change what is installed under ``name`` (its record, its folders)."""
    return safe_fs.locked(paths.hub_dir() / "locks" / f"{name}.lock")


def _stage_lock(name: str) -> Any:
    """Held to start a version's folder (until it is locked itself) and to clean stale ones, so a cleaner
    never takes a folder that a pull has just made."""
    return safe_fs.locked(paths.hub_dir() / "locks" / f"{name}.stage.lock")


def _write_files(dest: Path, kind: str, name: str, files: list[tuple[str, bytes]]) -> Path:
    """The files under the new folder ``dest`` (a package folder ``dest/name`` or a file ``dest/name.py``)."""
    for rel, _ in files:
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts:
            raise HashMismatchError(f"the wheel holds an unsafe path {rel!r}; nothing was installed")
    for rel, data in files:
        target = safe_fs.inside(dest, dest / (f"{name}.py" if kind == "module" else Path(name, rel)))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        except OSError as e:  # e.g. one member is a file and a folder at once
            raise HashMismatchError(f"the wheel's file {rel!r} cannot be written ({e.strerror}); nothing was "
                                    "installed") from None
    return dest / (f"{name}.py" if kind == "module" else name)


def _write_tree(dest: Path, kind: str, name: str, files: list[tuple[str, bytes]]) -> Path:
    """The files under ``dest``, written whole into a temporary sibling first and renamed into place, so
    a failure leaves nothing half-written."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest))
    try:
        written = _write_files(tmp, kind, name, files)
        final = safe_fs.inside(dest, dest / written.name)
        if final.exists() or final.is_symlink():
            raise ConfigError(f"{final} exists already; nothing was written")
        os.replace(written, final)
        return final
    finally:
        safe_fs.remove_inside(dest, tmp)


def _taken(name: str) -> discovery.EnvRef | None:
    return next((r for r in discovery.discover() if r.name == name), None)


def _clean_stale(name: str, keep: set[Path]) -> None:
    """Folders of ``name`` that no record names and no live pull is filling (a pull that was killed, a
    version replaced), and record temporaries left by a kill. Called with the name's lock held."""
    root = paths.hub_dir()
    with _stage_lock(name):
        for d in sorted(installed_dir().glob(f"{name}+*")) if installed_dir().is_dir() else []:
            if d.resolve() in keep:
                continue
            fd = safe_fs.try_lock_dir(d) if d.is_dir() and not d.is_symlink() else None
            if fd is None and d.is_dir() and not d.is_symlink():
                continue  # a pull in progress holds it
            try:
                safe_fs.remove_inside(root, d)
            finally:
                if fd is not None:
                    os.close(fd)
    for t in sorted(records_dir().glob(f".{name}.json.*.tmp")) if records_dir().is_dir() else []:
        safe_fs.remove_inside(root, t)


def _old_paths(rec: dict[str, Any] | None) -> list[Path]:
    """What an earlier record of a name installed (its version folder, or the older layout's two)."""
    if rec is None:
        return []
    if isinstance(rec.get("install"), str):
        return [Path(rec["install"])]
    return [Path(p) for p in (rec.get("path"), rec.get("deps")) if isinstance(p, str)]


def _other_project(name: str, published_as: str) -> None:
    """Refuse to install ``published_as`` under ``name`` when ``name`` holds a pull of another project."""
    held = (record(name) or {}).get("published_as")
    if held is not None and project_name(str(held)) != project_name(published_as):
        raise ConfigError(f"{name!r} here is a pull of {held!r}, not {published_as!r}; nothing was installed: "
                          f"`workbench hub remove {name}` first, or pull it under another name with --as NAME")


def pull(spec: str, index: str | None = None, *, local_name: str | None = None) -> dict[str, Any]:
    """Install ``NAME[==VERSION]`` without running any of its code. Its files and dependencies are staged
    in a folder of their own inside the hub folder (locked while it fills); the record, replaced
    atomically under the name's lock, is what makes it the installed version. A kill before that leaves
    the previous version whole; what it left behind is removed by the next pull of the name."""
    from workbench.packaging.uv import install_target

    fetched = fetch(spec, index)
    name = local_name or fetched.name.replace("-", "_")
    if not discovery.HUB_NAME.fullmatch(name):
        raise ConfigError(f"{name!r} cannot name an environment here: use letters, digits, '_', '-' and '.'")
    other = _taken(name)
    if other is not None and other.origin != "hub":
        raise ConfigError(f"an environment named {name!r} exists here ({other.origin}: {other.path or other.module}); "
                          f"pull it under another name with --as NAME, or fork it with `workbench hub fork`")
    _other_project(name, fetched.name)
    root = paths.hub_dir()
    installed_dir().mkdir(parents=True, exist_ok=True)
    with _stage_lock(name):
        stage = Path(tempfile.mkdtemp(prefix=f"{name}+", dir=installed_dir()))
        stage_fd = safe_fs.try_lock_dir(stage)
    try:
        path = _write_files(stage, fetched.kind, name, fetched.files)
        deps = stage / "deps"
        if fetched.lock:
            install_target([requirement(r, fetched.file.filename) for r in fetched.lock], deps, fetched.index)
        card = fetched.card
        rec = {"name": name, "published_as": fetched.name, "version": fetched.version, "hash": fetched.hash,
               "index": fetched.index.name, "index_url": fetched.index.url, "file": fetched.file.filename,
               "sha256": fetched.file.sha256, "install": str(stage), "path": str(path), "lock": fetched.lock,
               "deps": str(deps) if fetched.lock else None, "installed_at": time.time(),
               "env_version": card.get("env_version"), "tasks": card.get("tasks"), "harness": card.get("harness"),
               "framework": card.get("framework"), "description": card.get("description"), "error": None}
        with _name_lock(name):
            old = record(name)
            _other_project(name, fetched.name)  # again, under the lock: a pull of another project may have won
            safe_fs.write_inside(root, records_dir() / f"{name}.json",
                                 json.dumps(rec, indent=1, sort_keys=True).encode())
            for p in _old_paths(old):
                if p.resolve() != stage.resolve():
                    safe_fs.remove_inside(root, p)
            _clean_stale(name, {stage.resolve()})
    except BaseException:
        with _name_lock(name):
            if (record(name) or {}).get("install") != str(stage):
                safe_fs.remove_inside(root, stage)
        raise
    finally:
        if stage_fd is not None:
            os.close(stage_fd)
    return rec


def fork(spec: str, new: str, index: str | None = None) -> dict[str, Any]:
    if not new.isidentifier():
        raise ConfigError(f"{new!r} cannot name an environment: use letters, digits and underscores")
    other = _taken(new)
    dest = paths.user_env_dirs()[-1]
    if other is not None or (dest / new).exists() or (dest / f"{new}.py").exists():
        where = f"{other.origin}: {other.path or other.module}" if other is not None else str(dest / new)
        raise ConfigError(f"an environment named {new!r} exists already ({where}); fork onto a new name")
    fetched = fetch(spec, index)
    origin = {"name": fetched.name, "version": fetched.version, "hash": fetched.hash, "index": fetched.index.name}
    files = list(fetched.files)
    if fetched.kind == "package":
        files = sorted([*(f for f in files if f[0] != FORKED_FROM),
                        (FORKED_FROM, (json.dumps(origin, indent=1, sort_keys=True) + "\n").encode())],
                       key=lambda x: tuple(x[0].split("/")))
    path = _write_tree(dest, fetched.kind, new, files)
    if fetched.kind == "module":
        record_path = fork_record(discovery.EnvRef(new, "user", path))
        assert record_path is not None
        safe_fs.write_inside(dest, record_path, (json.dumps(origin, indent=1, sort_keys=True) + "\n").encode())
    return {"name": new, "path": str(path), "forked_from": origin}


def remove(name: str) -> dict[str, Any]:
    """Remove the pulled environment ``name``: only a name the hub's own records hold, only inside the hub
    folder. The record goes first (then nothing names the files), its files after."""
    rec = record(name)
    if rec is None:
        other = _taken(name) if discovery.HUB_NAME.fullmatch(name) else None
        if other is not None:
            raise ConfigError(f"{name!r} is not a pulled environment ({other.origin}); `hub remove` removes only "
                              "what `hub pull` installed")
        raise NotFoundError(f"no pulled environment {name!r}; `workbench envs` lists what is here")
    root = paths.hub_dir()
    with _name_lock(name):
        safe_fs.remove_inside(root, records_dir() / f"{name}.json")
        for p in _old_paths(rec):
            safe_fs.remove_inside(root, p)
        _clean_stale(name, set())
    return {"name": name, "removed": True, "version": rec.get("version"), "index": rec.get("index")}


__all__ = ["Fetched", "HashMismatchError", "env_projects", "fetch", "fork", "installed_dir", "parse_spec",
           "pick_version", "pull", "record", "records_dir", "remove", "versions_of"]
