"""A bundle where it runs: :func:`verify_bundle` checks it against the hash the run was launched with before
any GPU work, and :func:`bundle_env_ref` unpacks its environment for the loader (see
:mod:`workbench.bundles.bundle` for what a bundle holds)."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from workbench.authoring.env_files import content_hash
from workbench.bundles.bundle import (
    FORMAT,
    MANIFEST,
    Bundle,
    BundleError,
    BundleMismatchError,
    _sha,
    names,
    wheel_entries,
    zip_bytes,
)
from workbench.bundles.secrets_scan import check_files
from workbench.errors import ConfigError
from workbench.fsutil import atomic_write


def _expected(expected_hash: str) -> str:
    value = expected_hash.strip().lower().removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{12,64}", value):
        raise ConfigError(f"{expected_hash!r} is not a bundle hash; give the sha256 hex (at least 12 digits) "
                          "that `workbench package` printed")
    return value


def _plain_name(manifest: dict[str, Any], key: str, where: Path) -> str:
    entry = manifest.get(key)
    name = entry.get("file") if isinstance(entry, dict) else None
    if not isinstance(name, str) or not name or PurePosixPath(name).name != name or name in {".", ".."}:
        raise BundleError(f"{where} is not a valid bundle manifest: {key}.file is missing or not a plain file name")
    return name


def verify_bundle(path: str | Path, expected_hash: str) -> Bundle:
    """Check the bundle at ``path`` (its directory or ``bundle.json``) against the hash the run was
    launched with, before any GPU work. Returns the bundle; raises :class:`BundleMismatchError` when
    anything differs, :class:`BundleError` when ``path`` is not a bundle, and ``SecretInBundleError``
    when it holds a secret."""
    want = _expected(expected_hash)
    p = Path(path)
    d = p.parent if p.name == MANIFEST else p
    try:
        manifest = orjson.loads((d / MANIFEST).read_bytes())
    except FileNotFoundError:
        raise BundleError(f"{d} is not a bundle: it has no {MANIFEST}; build one with `workbench package ENV`") from None
    except (OSError, orjson.JSONDecodeError) as e:
        raise BundleError(f"cannot read {d / MANIFEST} ({e}); rebuild the bundle with `workbench package ENV`") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleError(f"{d / MANIFEST} is not a format-{FORMAT} workbench bundle manifest; rebuild it")
    env, kind = str(manifest.get("env", "")), manifest.get("kind")
    files_meta = manifest.get("files")
    if not env or kind not in {"package", "module"} or not isinstance(files_meta, list) or not files_meta:
        raise BundleError(f"{d / MANIFEST} is missing env, kind or files; rebuild the bundle")

    def refuse(why: str) -> BundleMismatchError:
        return BundleMismatchError(f"refusing to run bundle {d} ({env}): {why}; the environment is not the one "
                                   f"launched (expected hash {want[:12]}), so package and launch it again")

    wheel_path = d / _plain_name(manifest, "wheel", d / MANIFEST)
    lock_path = d / _plain_name(manifest, "lock_file", d / MANIFEST)
    try:
        wheel_bytes, lock_bytes = wheel_path.read_bytes(), lock_path.read_bytes()
    except OSError as e:
        raise refuse(f"{Path(e.filename or '').name or 'a file'} is missing or unreadable") from None
    _, mod, _ = names(env, "0" * 12)
    try:
        with zipfile.ZipFile(io.BytesIO(wheel_bytes)) as zf:
            actual = {zi.filename: zf.read(zi) for zi in zf.infolist()}
    except Exception as e:  # anything a damaged zip raises (BadZipFile, bad CRC, odd compression, bad offsets)
        raise refuse(f"{wheel_path.name} is not a valid wheel ({type(e).__name__}: {e})") from None
    rels = [str(f.get("path")) for f in files_meta if isinstance(f, dict)]
    if kind == "module":
        payload = [(rels[0], actual.get(f"{mod}.py", b""))] if len(rels) == 1 else []
    else:
        prefix = f"{mod}/"
        payload = sorted(((n[len(prefix):], b) for n, b in actual.items() if n.startswith(prefix)),
                         key=lambda x: tuple(x[0].split("/")))
    lock_text = lock_bytes.decode("utf-8", "replace")
    got = content_hash(payload, lock_text)
    if not got.startswith(want):
        raise refuse(f"its files and lock hash to {got[:12]}")
    if got != manifest.get("hash"):
        raise refuse(f"{MANIFEST} records hash {str(manifest.get('hash'))[:12]} but the contents hash to {got[:12]}")
    lock = [ln for ln in lock_text.splitlines() if ln]
    _, expected_entries = wheel_entries(env, kind, payload, lock, got)
    if actual != expected_entries:
        odd = sorted(set(actual) ^ set(expected_entries)) or [n for n in actual if actual[n] != expected_entries.get(n)]
        raise refuse(f"the wheel differs from what `workbench package` builds ({odd[0]})")
    if wheel_bytes != zip_bytes(expected_entries):  # the same entries, but other zip headers or attributes
        raise refuse(f"{wheel_path.name} has the right files but is not the zip `workbench package` writes")
    listed = [(f.get("path"), f.get("sha256")) for f in files_meta if isinstance(f, dict)]
    if listed != [(r, _sha(b)) for r, b in payload] or manifest.get("lock") != lock:
        raise refuse(f"{MANIFEST} does not list the wheel's files and lock")
    for label, data in (("wheel", wheel_bytes), ("lock_file", lock_bytes)):
        if _sha(data) != manifest[label].get("sha256"):
            raise refuse(f"{manifest[label]['file']} does not match the sha256 in {MANIFEST}")
    from workbench.bundles.secrets_scan import workbench_secrets

    inside = (lambda r: f"{mod}.py") if kind == "module" else (lambda r: f"{mod}/{r}")
    check_files(((f"{wheel_path.name}!{inside(r)}", b) for r, b in payload), f"run bundle {d}", workbench_secrets())
    return Bundle(d, env, got, str(manifest.get("env_version") or content_hash(payload)[:12]), mod, wheel_path, lock,
                  files_meta)


# -- run ---------------------------------------------------------------------------------------------
def bundle_env_ref(path: str | Path, dest: str | Path | None = None) -> str:
    """Unpack a (verified) bundle's environment files and return what ``discovery.resolve`` loads.

    The files land in ``dest/<env>/`` (a package environment) or ``dest/<env>.py`` (a single file), so
    the loaded environment keeps its name and discovery's ``env_version`` of it equals the bundle's
    (``hash[:12]`` without dependencies). ``dest`` defaults to a fresh temporary directory. Call
    :func:`verify_bundle` first: this re-checks the unpacked files against the manifest's hash only.
    """
    import tempfile

    p = Path(path)
    d = p.parent if p.name == MANIFEST else p
    try:
        manifest = orjson.loads((d / MANIFEST).read_bytes())
        lock_text = (d / _plain_name(manifest, "lock_file", d / MANIFEST)).read_text()
        with zipfile.ZipFile(d / _plain_name(manifest, "wheel", d / MANIFEST)) as zf:
            env, kind = str(manifest["env"]), manifest["kind"]
            _, mod, _ = names(env, "0" * 12)
            if kind == "module":
                files = [(str(manifest["files"][0]["path"]), zf.read(f"{mod}.py"))]
            else:
                files = sorted(((n[len(mod) + 1:], zf.read(n)) for n in zf.namelist() if n.startswith(f"{mod}/")),
                               key=lambda x: tuple(x[0].split("/")))
    except (OSError, KeyError, IndexError, TypeError, orjson.JSONDecodeError, zipfile.BadZipFile) as e:
        raise BundleError(f"cannot unpack bundle {d} ({type(e).__name__}: {e}); rebuild it with `workbench package ENV`") from None
    digest = content_hash(files, lock_text)
    if digest != manifest.get("hash"):
        raise BundleMismatchError(f"refusing to run bundle {d} ({env}): its files hash to {digest[:12]}, not "
                                  f"{str(manifest.get('hash'))[:12]}; package and launch it again")
    base = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix=f"workbench-bundle-{digest[:12]}-"))
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env)
    for rel, data in files:
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
            raise BundleMismatchError(f"refusing to run bundle {d} ({env}): it holds an unsafe path {rel!r}")
        target = base / rel if kind == "module" else base.joinpath(name, *parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
    return str(base / files[0][0]) if kind == "module" else str(base / name)
