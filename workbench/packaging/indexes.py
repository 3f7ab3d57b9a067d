"""Which package index a hub command or a bundle's lock talks to, and with what credentials.

Indexes are named in the settings file (``[hub.indexes.NAME] url = "..."``, ``[hub] default = "NAME"``);
``--index`` takes a name or a URL. The URL is the index's simple API (PEP 503/691: ``.../simple/``);
uploads go to its ``upload_url``, by default the simple URL's parent (pypiserver's and devpi's layout).
Credentials are never in the settings: ``workbench login index NAME`` keeps ``USERNAME:PASSWORD`` in the
keyring, and ``WORKBENCH_INDEX_USERNAME`` / ``WORKBENCH_INDEX_PASSWORD`` serve any index.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from workbench.config import credentials
from workbench.config.settings import load_settings
from workbench.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Index:
    name: str  # the settings' name, or the URL when given as one
    url: str  # the simple API, ending in "/"
    upload_url: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def auth(self) -> tuple[str, str] | None:
        return (self.username, self.password) if self.username is not None and self.password is not None else None


def _simple(url: str) -> str:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as e:
        raise ConfigError(f"{url!r} is not an index URL ({e}): give its simple API, e.g. https://host/simple/") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{url!r} is not an index URL: give its simple API, e.g. https://host/simple/")
    if "@" in parts.netloc:
        raise ConfigError("an index URL must not hold credentials: `workbench login index NAME` keeps them")
    return url if url.endswith("/") else url + "/"


def default_upload_url(simple_url: str) -> str:
    """Where the standard upload API listens, next to a simple index: its parent (``/simple/`` -> ``/``)."""
    parts = urlsplit(simple_url)
    path = parts.path.rstrip("/")
    if path.endswith(("/simple", "/+simple")):
        path = path.rsplit("/", 1)[0]
    return urlunsplit((parts.scheme, parts.netloc, path + "/", "", ""))


def configured() -> tuple[dict[str, tuple[str, str | None]], str | None]:
    """({name: (url, upload_url)}, the default name) from the settings."""
    hub = load_settings(strict=True).hub
    return {n: (i.url, i.upload_url) for n, i in hub.indexes.items()}, hub.default


def resolve_index(spec: str | None, *, need_auth: bool = False) -> Index:
    """The index a command uses: ``spec`` (a configured name or a URL), else the settings' default."""
    indexes, default = configured()
    if spec is None:
        spec = default or (next(iter(indexes)) if len(indexes) == 1 else None)
        if spec is None:
            raise ConfigError("no package index given: pass --index NAME|URL, or name one in the settings file "
                              "([hub.indexes.NAME] url = ..., [hub] default = NAME)" +
                              (f"; configured: {', '.join(indexes)}" if indexes else ""))
    if "://" in spec:
        name, url, upload = spec, _simple(spec), None
    elif spec in indexes:
        name, (url, upload) = spec, indexes[spec]
        url = _simple(url)
    else:
        close = difflib.get_close_matches(spec, list(indexes), n=2, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else \
            (f"; configured: {', '.join(indexes)}" if indexes else "; none is configured")
        raise ConfigError(f"unknown package index {spec!r}{hint}")
    token = credentials.get_token(f"index:{name}") if "://" not in name else credentials.get_token("index:*")
    user = password = None
    if token is not None:
        user, password = token.parts
    if need_auth and token is None:
        raise ConfigError(credentials.missing_message(f"index:{name}" if "://" not in name else "index:*"))
    return Index(name, url, upload or default_upload_url(url), user, password)


def lock_index() -> Index | None:
    """Where environments' dependencies are resolved when no index is named: the settings' default package
    index, or None (uv's own configuration)."""
    _, default = configured()
    return resolve_index(default) if default else None


__all__ = ["Index", "configured", "default_upload_url", "lock_index", "resolve_index"]
