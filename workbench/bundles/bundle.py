"""Reproducible environment bundles: a wheel, a dependency lock and a content hash, checked before GPU work.

``workbench package ENV`` writes ``DIR/<env>-<hash12>/`` holding three files:

- ``workbench_env_<env>-0.0.0+<hash12>-py3-none-any.whl``: the environment's files as the package
  ``workbench_env_<env>`` (a single-file environment becomes the module ``workbench_env_<env>.py``),
  with ``.dist-info`` METADATA (the lock as ``Requires-Dist`` pins), WHEEL, RECORD and a
  ``workbench.environments`` entry point. Built here, not by setuptools: entries in a fixed order,
  stored uncompressed, every timestamp 1980-01-01 and mode 0644, so the same files give the same bytes
  on any machine.
- ``requirements.lock``: the environment's declared requirements (``pyproject.toml`` ``[project]
  dependencies``, ``requirements.txt``, or a single file's PEP 723 ``# /// script`` block) resolved by uv
  (their dependencies too) against the package index, one ``name==version`` line each, sorted; empty when it
  declares none.
- ``bundle.json``: the manifest (env name, hash, every file with its sha256, requirements, lock).

**The hash** (sha256, 64 hex) is computed exactly like ``workbench.authoring.discovery.env_version``: for each
file, in canonical order (relative path compared part by part), its POSIX relative path, a NUL, its
bytes, a NUL; then, only when the lock is not empty, ``requirements.lock``, a NUL, the lock's bytes,
a NUL. So for an environment without dependencies ``hash[:12] == env_version`` (what ``workbench envs``
and every run record), and with dependencies the hash extends it with the lock (DESIGN.md: "an
environment version is the content hash of its files plus its lock of dependencies").

:func:`workbench.bundles.verify.verify_bundle` is what the cloud side runs before any GPU work: it re-hashes the files inside the
wheel plus the lock, compares with the hash the user launched, checks every other wheel entry and the
manifest's sha256s, and rescans for secrets. Any difference raises :class:`BundleMismatchError`.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson

from workbench.authoring import overrides
from workbench.authoring.discovery import EnvRef, resolve
from workbench.authoring.env_files import LOCK_NAME, content_hash, read_env_files
from workbench.bundles.secrets_scan import check_files
from workbench.errors import ConfigError, WorkbenchError
from workbench.fsutil import atomic_write

FORMAT = 1
MANIFEST = "bundle.json"
LOCK = LOCK_NAME
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_SCRIPT_BLOCK = re.compile(r"(?m)^# /// script\s*$\n(?P<body>(?:^#(?: .*)?$\n)+?)^# ///\s*$")


class BundleError(WorkbenchError):
    """An environment cannot be packaged, or a path is not a usable bundle."""


class BundleMismatchError(BundleError):
    """A bundle's contents do not hash to what the run was launched with: it must not run."""


@dataclass(frozen=True, slots=True)
class Bundle:
    """A bundle on disk, as written by :func:`build_bundle` or checked by :func:`verify_bundle`."""

    path: Path  # the bundle directory
    env: str
    hash: str  # sha256 hex of the files plus the lock
    env_version: str  # discovery's 12-hex version of the files alone
    import_name: str  # the module to import after installing the wheel
    wheel: Path
    lock: list[str]
    files: list[dict[str, Any]]

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK


# -- the environment's files -----------------------------------------------------------------------
def env_files(ref: EnvRef) -> list[tuple[str, bytes]]:
    """(POSIX relative path, bytes) of every file of the environment, in canonical order."""
    if ref.path is None:
        raise BundleError(f"cannot package {ref.name!r}: it is installed module {ref.module!r} without source files "
                          "here; package it from its source directory (workbench package PATH)")
    return read_env_files(ref.path)


def with_override(ref: EnvRef, kind: str, files: list[tuple[str, bytes]],
                  override: overrides.Override) -> tuple[list[tuple[str, bytes]], str]:
    """The files with this machine's override of ``ref`` shipped in the package, and the version the
    loader gives the unpacked environment (its own files' hash marked by the override)."""
    if kind != "package":
        raise BundleError(f"an override applies to {ref.name!r} ({override.origin or 'a chosen system prompt'}), but a "
                          "single-file environment cannot carry it: move the environment into a package directory, or "
                          f"remove the override with `workbench optimize {ref.name} --unapply`")
    own = [(rel, data) for rel, data in files if rel != overrides.BUNDLED_FILE]
    marked = hashlib.sha256(f"{content_hash(own)[:12]}+{override.digest()}".encode()).hexdigest()[:12]
    shipped = sorted([*own, (overrides.BUNDLED_FILE, override.to_json().encode())], key=lambda x: tuple(x[0].split("/")))
    return shipped, marked


# -- requirements and the lock ---------------------------------------------------------------------
def declared_requirements(ref: EnvRef, files: list[tuple[str, bytes]]) -> list[str]:
    """Requirement strings the environment declares, in the order written."""
    by_path = dict(files)
    reqs: list[str] = []
    if ref.path is not None and ref.path.is_file():
        m = _SCRIPT_BLOCK.search(by_path[ref.path.name].decode("utf-8", "replace"))
        if m:
            body = "\n".join(ln[2:] if ln.startswith("# ") else ln[1:] for ln in m.group("body").splitlines())
            reqs += _toml_list(body, ref.path.name, ())
        return reqs
    if "pyproject.toml" in by_path:
        reqs += _toml_list(by_path["pyproject.toml"].decode("utf-8", "replace"), "pyproject.toml", ("project",))
    if "requirements.txt" in by_path:
        for n, line in enumerate(by_path["requirements.txt"].decode("utf-8", "replace").splitlines(), 1):
            line = line.split(" #", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("-"):
                raise ConfigError(f"requirements.txt:{n}: options such as {line.split()[0]} are not supported in an "
                                  "environment's requirements; list one requirement per line")
            reqs.append(line)
    return reqs


def _toml_list(text: str, where: str, table: tuple[str, ...]) -> list[str]:
    """The ``dependencies`` list of ``table`` in a TOML document."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where} is not valid TOML ({e}); fix it and package again") from None
    for t in table:
        data = data.get(t, {}) if isinstance(data, dict) else {}
    value = data.get("dependencies", []) if isinstance(data, dict) else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: {'.'.join((*table, 'dependencies'))} must be a list of requirement strings")
    return value


def lock_requirements(reqs: list[str], env: str, index: Any = None) -> list[str]:
    """The requirements (those whose marker applies here) resolved by uv, their own dependencies included,
    into ``name==version`` pins, sorted: against ``index`` (a :class:`workbench.packaging.indexes.Index`), else the
    settings' default package index, else uv's own configuration (PyPI unless it says otherwise)."""
    if not reqs:
        return []
    from packaging.requirements import InvalidRequirement, Requirement

    applicable = []
    for text in reqs:
        try:
            req = Requirement(text)
        except InvalidRequirement as e:
            raise ConfigError(f"environment {env!r} declares an invalid requirement {text!r} ({e})") from None
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.url:
            raise ConfigError(f"environment {env!r} requires {text!r} from a URL; a bundle pins versions, so "
                              "publish it or vendor the code into the environment")
        applicable.append(text)
    from workbench.errors import EndpointError
    from workbench.packaging.indexes import lock_index
    from workbench.packaging.uv import compile_lock

    try:
        return compile_lock(applicable, index if index is not None else lock_index())
    except EndpointError as e:
        raise ConfigError(f"environment {env!r}: {e}") from None


# -- the wheel ---------------------------------------------------------------------------------------
def names(env: str, hash_: str) -> tuple[str, str, str]:
    """(distribution name as in file names, import name, version) for an environment and its hash."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", env).strip("_").lower() or "env"
    return f"workbench_env_{slug}", f"workbench_env_{slug}", f"0.0.0+{hash_[:12]}"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_entries(env: str, kind: str, files: list[tuple[str, bytes]], lock: list[str], hash_: str, *,
                  version: str | None = None, description: str = "",
                  dist_info: dict[str, bytes] | None = None) -> tuple[str, dict[str, bytes]]:
    """The wheel's file name and its entries (name -> bytes), in the order they are written. A published
    version (``workbench hub push``) gives its ``version``, a Markdown ``description`` and more
    ``dist_info`` files (the eval card); a bundle's version is ``0.0.0+<hash12>``."""
    dist, mod, local_version = names(env, hash_)
    version = version or local_version
    entries: dict[str, bytes] = {}
    if kind == "module":
        entries[f"{mod}.py"] = files[0][1]
    else:
        for rel, data in files:
            entries[f"{mod}/{rel}"] = data
    info = f"{dist}-{version}.dist-info"
    meta = [
        "Metadata-Version: 2.1", f"Name: {dist.replace('_', '-')}", f"Version: {version}",
        f"Summary: Workbench environment {env} (bundle sha256 {hash_})",
        *(f"Requires-Dist: {pin}" for pin in lock),
    ]
    if description:
        meta.append("Description-Content-Type: text/markdown")
    entries[f"{info}/METADATA"] = ("\n".join(meta) + "\n" + (f"\n{description}" if description else "")).encode()
    for name, data in (dist_info or {}).items():
        entries[f"{info}/{name}"] = data
    entries[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: workbench package\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries[f"{info}/entry_points.txt"] = f"[workbench.environments]\n{env} = {mod}\n".encode()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for name, data in entries.items():
        writer.writerow([name, _record_hash(data), len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries[f"{info}/RECORD"] = buf.getvalue().encode()
    return f"{dist}-{version}-py3-none-any.whl", entries


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    """A deterministic zip: entries in order, stored, fixed timestamps, mode 0644, Unix attributes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in entries.items():
            zi = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            zi.create_system = 3
            zi.external_attr = 0o100644 << 16
            zi.compress_type = zipfile.ZIP_STORED
            zf.writestr(zi, data)
    return buf.getvalue()


# -- build -----------------------------------------------------------------------------------------
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _workbench_version() -> str:
    try:
        return metadata.version("rl-workbench")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


@dataclass(frozen=True, slots=True)
class Contents:
    """What a bundle of an environment holds, before it is written anywhere."""

    ref: EnvRef
    kind: str  # "package" | "module"
    files: list[tuple[str, bytes]]  # (POSIX relative path, bytes), canonical order
    requirements: list[str]
    lock: list[str]
    hash: str  # sha256 hex of the files plus the lock
    env_version: str


def bundle_contents(env: str | EnvRef, *, known_tokens: list[tuple[str, str]] | None = None,
                    index: Any = None) -> Contents:
    """The files (this machine's override included), lock and hash of ``env``; refuses a secret
    (:class:`SecretInBundleError`); ``known_tokens`` defaults to :func:`workbench.bundles.secrets_scan.workbench_secrets`;
    the lock is resolved against ``index`` (see :func:`lock_requirements`)."""
    ref = resolve(env) if isinstance(env, str) else env
    files = env_files(ref)
    root = ref.path if ref.path is not None and ref.path.is_dir() else (ref.path.parent if ref.path else Path("."))
    if known_tokens is None:
        from workbench.bundles.secrets_scan import workbench_secrets

        known_tokens = workbench_secrets()
    check_files(((str(root / rel), data) for rel, data in files), f"package {ref.name!r}", known_tokens)
    reqs = declared_requirements(ref, files)
    lock = lock_requirements(reqs, ref.name, index)
    kind = "module" if ref.path is not None and ref.path.is_file() else "package"
    env_version = content_hash(files)[:12]
    override = overrides.load(ref.name)
    if override is not None:
        files, env_version = with_override(ref, kind, files, override)
    return Contents(ref, kind, files, reqs, lock, content_hash(files, lock_text(lock)), env_version)


def lock_text(lock: list[str]) -> str:
    return "".join(f"{pin}\n" for pin in lock)


def build_bundle(env: str | EnvRef, out_dir: str | Path = "dist", *,
                 known_tokens: list[tuple[str, str]] | None = None) -> Bundle:
    """Package ``env`` (a name, path or EnvRef) into ``out_dir/<env>-<hash12>/`` and return the bundle.

    Refuses (:class:`SecretInBundleError`) when a file holds something shaped like a secret or the
    value of a token this machine knows; ``known_tokens`` defaults to :func:`workbench.bundles.secrets_scan.workbench_secrets`.
    """
    c = bundle_contents(env, known_tokens=known_tokens)
    ref, files, lock, digest, kind = c.ref, c.files, c.lock, c.hash, c.kind
    text = lock_text(lock)
    wheel_name, entries = wheel_entries(ref.name, kind, files, lock, digest)
    wheel = zip_bytes(entries)
    _, mod, _ = names(ref.name, digest)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "env": ref.name,
        "kind": kind,
        "import_name": mod,
        "hash": digest,
        "env_version": c.env_version,
        "files": [{"path": rel, "sha256": _sha(data), "size": len(data)} for rel, data in files],
        "requirements": c.requirements,
        "lock": lock,
        "wheel": {"file": wheel_name, "sha256": _sha(wheel), "size": len(wheel)},
        "lock_file": {"file": LOCK, "sha256": _sha(text.encode()), "size": len(text.encode())},
        "workbench_version": _workbench_version(),
    }
    dest = Path(out_dir) / f"{ref.name}-{digest[:12]}"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        _write(dest / wheel_name, wheel)
        _write(dest / LOCK, text.encode())
        _write(dest / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    except OSError as e:
        raise BundleError(f"cannot write the bundle to {dest} ({e.strerror or e}); choose another -o DIR") from None
    return Bundle(dest, ref.name, digest, c.env_version, mod, dest / wheel_name, lock, manifest["files"])


def _write(path: Path, data: bytes) -> None:
    atomic_write(path, data)
