"""Gateway keys: what a product sends the gateway instead of a provider's key (``workbench gateway keys``).

A key is ``wbg_<id>_<secret>``, printed once when it is made and never again: the file
(``~/.config/workbench/gateway_keys.json``, written atomically, mode 0600) holds each key's app, its public id,
the SHA-256 of the whole key, when it was made and when it was revoked. A request's key is found by its id and
compared by hash in constant time; a revoked key, an unknown one or a malformed one is refused alike.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from workbench.config import paths
from workbench.errors import ConfigError
from workbench.fsutil import atomic_write

KEYS_FILE = "gateway_keys.json"
PREFIX = "wbg_"
_APP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_KEY = re.compile(r"^wbg_([0-9a-f]{8})_([A-Za-z0-9_-]{32,64})$")


@dataclass(slots=True)
class GatewayKey:
    """One key as the file keeps it (never the key itself)."""

    app: str
    id: str
    sha256: str
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def public(self) -> dict[str, Any]:
        """What listings show: everything but the hash."""
        return {"app": self.app, "id": self.id, "created_at": self.created_at, "revoked_at": self.revoked_at,
                "active": self.active}


def keys_path() -> Path:
    return paths.config_dir() / KEYS_FILE


def check_app(app: str) -> str:
    if not isinstance(app, str) or not _APP.match(app):
        raise ConfigError(f"app name {app!r}: use letters, digits and . _ - (at most 64 characters), starting with a "
                          "letter or digit")
    return app


def load_keys(path: Path | None = None) -> list[GatewayKey]:
    """Every key made here ([] when none was); a broken file is one :class:`ConfigError` naming it."""
    p = path or keys_path()
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ConfigError(f"{p}: cannot read the gateway keys ({e.strerror or e})") from None
    try:
        data = orjson.loads(raw)
        return [GatewayKey(**row) for row in data["keys"]]
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{p}: not a gateway keys file ({e}); remove it to start over (every key is lost)") from None


def _save(keys: list[GatewayKey], path: Path | None = None) -> None:
    atomic_write(path or keys_path(), orjson.dumps({"keys": [asdict(k) for k in keys]}, option=orjson.OPT_INDENT_2),
                 mode=0o600, mkdirs=True)


def _digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def add_key(app: str, path: Path | None = None) -> tuple[str, GatewayKey]:
    """A new key for ``app``: the key (shown once) and its record."""
    check_app(app)
    keys = load_keys(path)
    taken = {k.id for k in keys}
    kid = secrets.token_hex(4)
    while kid in taken:
        kid = secrets.token_hex(4)
    key = f"{PREFIX}{kid}_{secrets.token_urlsafe(32)}"
    record = GatewayKey(app=app, id=kid, sha256=_digest(key), created_at=time.time())
    _save([*keys, record], path)
    return key, record


def revoke(name: str, path: Path | None = None) -> list[GatewayKey]:
    """Revoke the key with id ``name``, or every active key of the app ``name``; the keys revoked. A name that
    matches no active key is one :class:`ConfigError`."""
    keys = load_keys(path)
    hit = [k for k in keys if k.active and (k.id == name or k.app == name)]
    if not hit:
        known = sorted({k.app for k in keys if k.active})
        raise ConfigError(f"no active gateway key has the id or app {name!r}; active apps: "
                          f"{', '.join(known) or 'none'}")
    now = time.time()
    for k in hit:
        k.revoked_at = now
    _save(keys, path)
    return hit


class KeyRing:
    """The keys a running gateway accepts, read again when the file changes (a key added or revoked while it
    serves takes effect at its next request)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or keys_path()
        self._stamp: tuple[int, int] | None = None
        self._by_id: dict[str, GatewayKey] = {}

    def _fresh(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = (0, 0)
        if stamp != self._stamp:
            self._by_id = {k.id: k for k in load_keys(self.path)} if stamp != (0, 0) else {}
            self._stamp = stamp

    def app_of(self, key: str | None) -> str | None:
        """The app an active key belongs to, else None (unknown, revoked, malformed)."""
        m = _KEY.match(key or "")
        if m is None:
            return None
        self._fresh()
        record = self._by_id.get(m.group(1))
        if record is None or not record.active:
            return None
        return record.app if hmac.compare_digest(record.sha256, _digest(key or "")) else None


__all__ = ["GatewayKey", "KeyRing", "add_key", "check_app", "keys_path", "load_keys", "revoke"]
