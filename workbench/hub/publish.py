"""``workbench hub push``: an environment's bundle, versioned and with its eval card, uploaded to a package index.

The wheel is the bundle's (``workbench package``: the secret scan, the reproducible file order, the lock and
the content hash), under a real version instead of ``0.0.0+<hash>``, with the eval card as its description
and as ``workbench_card.json`` in its ``.dist-info``. The upload speaks the standard upload API through
``uv publish`` (what twine speaks too). A version is never overwritten: one that the index already lists is
refused before uploading, and an index that refuses the upload says so in one line. Pushing content that a
version already holds, under a new version, is allowed and said.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from workbench.authoring import discovery
from workbench.bundles.bundle import Contents, bundle_contents, names, wheel_entries, zip_bytes
from workbench.errors import ConfigError, EndpointError, NotFoundError, OptionError
from workbench.hub.card import CARD_FILE, build_card, card_problem, markdown
from workbench.hub.simple_api import IndexClient, IndexFile, normalize
from workbench.packaging.indexes import Index, resolve_index

VERSION = "publish.version"  # the field of the version pushed (``--version``)
FORKED_FROM = "workbench.fork.json"  # in a fork's folder: what it was forked from (written by `hub fork`)
UPLOAD_TIMEOUT_S = 300.0


@dataclass(frozen=True, slots=True)
class Pushed:
    name: str
    version: str
    hash: str
    index: str
    project: str
    filename: str
    same_as: str | None  # the version already holding this content, if one does

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "hash": self.hash, "index": self.index,
                "project": self.project, "file": self.filename, "same_content_as": self.same_as}


def project_name(env: str) -> str:
    return normalize(names(env, "0" * 12)[0])


def wheel_versions(files: list[IndexFile]) -> dict[str, IndexFile]:
    """Version -> its wheel, for the files whose names carry a version."""
    out: dict[str, IndexFile] = {}
    for f in files:
        if f.version:
            out[f.version] = f
    return out


def sorted_versions(versions: list[str]) -> list[str]:
    def key(v: str) -> Any:
        try:
            return (0, Version(v))
        except InvalidVersion:
            return (-1, v)

    return sorted(versions, key=key)


def next_version(existing: list[str], given: str | None) -> str:
    if given is not None:
        try:
            v = Version(given)
        except InvalidVersion:
            raise OptionError(VERSION, given, "a version like 1.2.0", "{field} {value!r} is not a version; give one like "
                              "1.2.0") from None
        if v.local is not None:
            raise OptionError(VERSION, given, "a version like 1.2.0", "{field} {value!r} has a local part (+...), which "
                              "indexes refuse; give one like 1.2.0")
        return str(v)
    parsed = []
    for s in existing:
        try:
            parsed.append(Version(s))
        except InvalidVersion:
            continue
    if not parsed:
        return "0.1.0"
    top = max(parsed)
    major, minor, patch = (list(top.release) + [0, 0, 0])[:3]
    return f"{major}.{minor}.{patch + 1}"


def read_card(wheel: bytes, what: str = "the wheel") -> dict[str, Any]:
    """The eval card a published wheel carries (its ``.dist-info/workbench_card.json``), checked field by
    field (:func:`workbench.hub.card.card_problem`): EndpointError naming ``what`` when it is not usable."""
    from workbench.hub.unpack import MAX_CARD_BYTES, UnpackError, read_member

    try:
        with zipfile.ZipFile(BytesIO(wheel)) as zf:
            info = next(i for i in zf.infolist() if i.filename.endswith(f".dist-info/{CARD_FILE}"))
            card = json.loads(read_member(zf, info, MAX_CARD_BYTES))
    except (StopIteration, zipfile.BadZipFile, ValueError, KeyError, RecursionError, UnpackError) as e:
        why = str(e) if isinstance(e, UnpackError) else f"{type(e).__name__}: no readable eval card"
        raise EndpointError(f"{what} is not a Workbench environment ({why})") from None
    problem = card_problem(card)
    if problem is not None:
        raise EndpointError(f"{what} has an unusable eval card: {problem}")
    return dict(card)


def fork_record(ref: discovery.EnvRef) -> Path | None:
    """Where a fork's origin is written: inside its package, or beside its single file."""
    if ref.path is None:
        return None
    return ref.path / FORKED_FROM if ref.path.is_dir() else ref.path.with_suffix(".fork.json")


def forked_from(ref: discovery.EnvRef) -> dict[str, Any] | None:
    """What ``ref`` was forked from (``hub fork``), or None."""
    path = fork_record(ref)
    if path is None or not path.is_file():
        return None
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def build_wheel(ref: discovery.EnvRef, contents: Contents, version: str, card: dict[str, Any]) -> tuple[str, bytes]:
    filename, entries = wheel_entries(ref.name, contents.kind, contents.files, contents.lock, contents.hash,
                                      version=version, description=markdown(card),
                                      dist_info={CARD_FILE: json.dumps(card, indent=1, sort_keys=True).encode()})
    return filename, zip_bytes(entries)


def upload(index: Index, filename: str, wheel: bytes) -> None:
    """The standard upload API, spoken by ``uv publish``; its refusal becomes one sentence."""
    from workbench.packaging.uv import uv_command

    if index.auth is None:
        raise ConfigError(f"pushing to index {index.name} needs credentials: run `workbench login index {index.name}` "
                          "or set WORKBENCH_INDEX_USERNAME and WORKBENCH_INDEX_PASSWORD")
    with tempfile.TemporaryDirectory(prefix="workbench-push-") as tmp:
        path = Path(tmp) / filename
        path.write_bytes(wheel)
        env = {**os.environ, "UV_PUBLISH_USERNAME": index.auth[0], "UV_PUBLISH_PASSWORD": index.auth[1],
               "UV_NO_CONFIG": "1", "NO_COLOR": "1"}
        cmd = [*uv_command(), "publish", "--publish-url", index.upload_url, "--no-attestations", "--no-progress",
               str(path)]
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=UPLOAD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise EndpointError(f"the upload to index {index.name} did not finish in {UPLOAD_TIMEOUT_S:.0f} s") from None
    if p.returncode != 0:
        raise EndpointError(f"index {index.name} refused the upload of {filename}: {_uv_reason(p.stderr)}")


def _uv_reason(stderr: str) -> str:
    lines = [ln.strip().removeprefix("error:").removeprefix("Caused by:").strip()
             for ln in stderr.splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln and not ln.startswith(("Publishing", "Uploading", "warning:"))]
    text = "; ".join(dict.fromkeys(useful[-3:])) or "uv publish failed"
    if "409" in text or "already exists" in text.lower():
        return f"that version exists and is never overwritten ({text})"
    if "401" in text or "403" in text:
        return f"wrong credentials ({text}); run `workbench login index NAME` again"
    return text


def push(env: str, store_conn: Any, *, index: str | None = None, version: str | None = None) -> Pushed:
    ref = discovery.resolve(env)
    idx = resolve_index(index, need_auth=True)
    client = IndexClient(idx)
    contents = bundle_contents(ref, index=idx)
    loaded = discovery.load_ref(ref)
    project = project_name(ref.name)
    try:
        existing = wheel_versions(client.files(project))
    except NotFoundError:
        existing = {}
    chosen = next_version(list(existing), version)
    if chosen in existing:
        raise ConfigError(f"{ref.name} {chosen} already exists on index {idx.name}; a published version is never "
                          "overwritten: push without --version for the next patch, or give a new one")
    same_as = None
    for v in reversed(sorted_versions(list(existing))):
        try:
            if read_card(client.download(existing[v])).get("hash") == contents.hash:
                same_as = v
        except EndpointError:
            pass
        break  # only the newest is compared: an older one with this content is still a different history
    card = build_card(loaded, name=ref.name, version=chosen, digest=contents.hash, env_version=contents.env_version,
                      conn=store_conn, forked_from=forked_from(ref))
    filename, wheel = build_wheel(ref, contents, chosen, card)
    upload(idx, filename, wheel)
    return Pushed(ref.name, chosen, contents.hash, idx.name, project, filename, same_as)


__all__ = ["FORKED_FROM", "Pushed", "build_wheel", "fork_record", "forked_from", "next_version", "project_name", "push", "read_card",
           "sorted_versions", "wheel_versions"]
