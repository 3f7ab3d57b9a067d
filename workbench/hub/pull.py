"""``workbench hub pull``, ``fork`` and ``remove``: published environments on this machine.

A pull downloads one version's wheel (checked against the sha256 the index lists), re-hashes the files and
the lock inside it and refuses it, installing nothing, when they differ from the hash its eval card and
summary carry. It then puts the files in Workbench's own folder (``<data>/hub/envs/NAME``), the locked
dependencies in ``<data>/hub/deps/NAME`` (``uv pip install --target``; never the user's project venv), and
a record of where it came from in ``<data>/hub/records/NAME.json``, so ``envs``, ``eval``, the app and
``launch`` find it by name. A pulled environment that does not load stays listed, with its error, until it
is removed. A fork puts a version's sources into the user's env folder under a new name, with what it was
forked from beside them (``workbench.fork.json``, shown by ``envs`` and carried by its own pushes).
"""

from __future__ import annotations

import difflib
import email.parser
import json
import os
import re
import shutil
import tempfile
import time
import zipfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from workbench.authoring import discovery
from workbench.authoring.env_files import content_hash
from workbench.bundles.bundle import lock_text, names
from workbench.config import paths
from workbench.errors import ConfigError, EnvLoadError, NotFoundError, WorkbenchError
from workbench.hub.indexes import Index, resolve_index
from workbench.hub.publish import (
    FORKED_FROM,
    fork_record,
    project_name,
    read_card,
    sorted_versions,
    wheel_versions,
)
from workbench.hub.simple_api import IndexClient, IndexFile

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


def _unpack(name: str, wheel: bytes) -> tuple[str, list[tuple[str, bytes]], list[str], str]:
    """(kind, the environment's files, the lock, the hash the summary names) of a published wheel."""
    _, mod, _ = names(name, "0" * 12)
    with zipfile.ZipFile(BytesIO(wheel)) as zf:
        entries = zf.namelist()
        meta_name = next(n for n in entries if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode("utf-8", "replace"))
        if f"{mod}.py" in entries:
            kind, files = "module", [(f"{name}.py", zf.read(f"{mod}.py"))]
        else:
            kind = "package"
            files = sorted(((n[len(mod) + 1:], zf.read(n)) for n in entries if n.startswith(f"{mod}/") and
                            not n.endswith("/")), key=lambda x: tuple(x[0].split("/")))
    lock = sorted(meta.get_all("Requires-Dist") or [])
    summary = meta.get("Summary") or ""
    stated = summary.rsplit("sha256 ", 1)[-1].rstrip(")") if "sha256 " in summary else ""
    return kind, files, lock, stated


def fetch(spec: str, index: str | None = None) -> Fetched:
    """Download and verify ``NAME[==VERSION]`` (the newest without one)."""
    name, version = parse_spec(spec)
    idx = resolve_index(index)
    client = IndexClient(idx)
    version, f = pick_version(versions_of(client, name), name, version, idx.name)
    wheel = client.download(f)
    card = read_card(wheel)
    env_name = str(card.get("env") or name)
    try:
        kind, files, lock, stated = _unpack(env_name, wheel)
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


def record(name: str) -> dict[str, Any] | None:
    try:
        return dict(json.loads((records_dir() / f"{name}.json").read_text()))
    except (OSError, ValueError):
        return None


def _write_tree(dest: Path, kind: str, name: str, files: list[tuple[str, bytes]]) -> Path:
    """The files under ``dest`` (a package folder ``dest/name`` or a file ``dest/name.py``), written whole
    into a temporary sibling first, so a failure leaves what was there."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest))
    try:
        for rel, data in files:
            parts = Path(rel).parts
            if Path(rel).is_absolute() or ".." in parts:
                raise HashMismatchError(f"the wheel holds an unsafe path {rel!r}; nothing was installed")
            target = tmp / (f"{name}.py" if kind == "module" else Path(name, rel))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        final = dest / (f"{name}.py" if kind == "module" else name)
        if final.is_dir():
            shutil.rmtree(final)
        elif final.exists():
            final.unlink()
        os.replace(tmp / final.name, final)
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _taken(name: str) -> discovery.EnvRef | None:
    return next((r for r in discovery.discover() if r.name == name), None)


def pull(spec: str, index: str | None = None, *, local_name: str | None = None) -> dict[str, Any]:
    from workbench.hub.uv import install_target

    fetched = fetch(spec, index)
    name = local_name or fetched.name.replace("-", "_")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", name):
        raise ConfigError(f"{name!r} cannot name an environment here: use letters, digits, '_', '-' and '.'")
    other = _taken(name)
    if other is not None and other.origin != "hub":
        raise ConfigError(f"an environment named {name!r} exists here ({other.origin}: {other.path or other.module}); "
                          f"pull it under another name with --as NAME, or fork it with `workbench hub fork`")
    deps = paths.hub_dir() / "deps" / name
    if fetched.lock:
        shutil.rmtree(deps, ignore_errors=True)
        install_target(fetched.lock, deps, fetched.index)
    path = _write_tree(paths.hub_dir() / "envs", fetched.kind, name, fetched.files)
    rec = {"name": name, "published_as": fetched.name, "version": fetched.version, "hash": fetched.hash,
           "index": fetched.index.name, "index_url": fetched.index.url, "file": fetched.file.filename,
           "sha256": fetched.file.sha256, "path": str(path), "lock": fetched.lock,
           "deps": str(deps) if fetched.lock else None, "installed_at": time.time()}
    try:
        env = discovery.load(name)
        rec["env_version"], rec["error"] = env.version, None
    except (EnvLoadError, ConfigError) as e:
        rec["env_version"], rec["error"] = None, str(e).splitlines()[0]
    records_dir().mkdir(parents=True, exist_ok=True)
    (records_dir() / f"{name}.json").write_text(json.dumps(rec, indent=1, sort_keys=True))
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
        record_path.write_text(json.dumps(origin, indent=1, sort_keys=True) + "\n")
    return {"name": new, "path": str(path), "forked_from": origin}


def remove(name: str) -> dict[str, Any]:
    rec = record(name)
    if rec is None:
        other = _taken(name)
        if other is not None:
            raise ConfigError(f"{name!r} is not a pulled environment ({other.origin}); `hub remove` removes only "
                              "what `hub pull` installed")
        raise NotFoundError(f"no pulled environment {name!r}; `workbench envs` lists what is here")
    for p in (paths.hub_dir() / "envs" / name, paths.hub_dir() / "envs" / f"{name}.py", paths.hub_dir() / "deps" / name):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    (records_dir() / f"{name}.json").unlink(missing_ok=True)
    return {"name": name, "removed": True, "version": rec.get("version"), "index": rec.get("index")}


__all__ = ["Fetched", "HashMismatchError", "env_projects", "fetch", "fork", "parse_spec", "pick_version", "pull",
           "record",
           "records_dir", "remove", "versions_of"]
