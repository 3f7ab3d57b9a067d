"""Secrets in use are never written out: every API key a client of this process sends is registered
here, and every error message that may carry text from outside (a server's error body, an exception)
goes through :func:`redact` before it is printed, logged or stored.

URLs carry secrets too: a ``user:password@`` and query parameters named like keys (``key``, ``api_key``,
``token``, ``sig``, ...). :func:`url_credentials` names them (``models add`` and ``--base-url`` refuse such a
URL) and :func:`redact_url` masks them in every URL Workbench stores or prints; :func:`redact` masks them in
any URL inside a text."""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

_MIN_LEN = 8  # shorter values are not secrets worth the false positives
_lock = threading.Lock()
_secrets: set[str] = set()
MASK = "[redacted]"


def register(value: str | None) -> None:
    """A secret in use by this process (an API key a client sends)."""
    if value and len(value) >= _MIN_LEN:
        with _lock:
            _secrets.add(value)


#: Query parameters whose value is a credential: these names (compared without case, ``-`` or ``_``) and
#: any name ending in one of ``_SECRET_ENDINGS`` (``x-api-key``, ``access_token``, ``client_secret``...).
_SECRET_PARAMS = frozenset({"key", "sig", "signature", "auth", "authorization", "pass", "pwd", "passwd", "password",
                            "secret", "token", "jwt", "bearer", "credential", "credentials", "session", "sessionid"})
_SECRET_ENDINGS = ("key", "token", "secret", "password", "signature", "credential", "credentials", "sig")
_URL_TAIL = re.compile(r"[^\s'\"<>`]+")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")


def secret_param(name: str) -> bool:
    """Whether a query parameter called ``name`` carries a credential."""
    norm = re.sub(r"[^a-z0-9]", "", unquote(name).lower())
    return norm in _SECRET_PARAMS or norm.endswith(_SECRET_ENDINGS)


def _query_pairs(query: str) -> list[tuple[str, str | None]]:
    return [(k, v if sep else None) for k, sep, v in (part.partition("=") for part in query.split("&"))]


def _netloc_userinfo(url: str) -> tuple[int, int] | None:
    """(start, end) of the ``userinfo@`` in ``url``'s authority, if it has one."""
    start = url.find("//")
    if start < 0:
        return None
    start += 2
    end = len(url)
    for stop in "/?#":
        i = url.find(stop, start)
        if i >= 0:
            end = min(end, i)
    at = url.rfind("@", start, end)
    return (start, at + 1) if at >= 0 else None


def url_credentials(url: str) -> list[str]:
    """What in ``url`` is a credential: ``"user:password@"`` for userinfo, and each secret query
    parameter's name. Empty for a clean URL."""
    found = ["user:password@"] if _netloc_userinfo(url) else []
    query = url.split("#", 1)[0].partition("?")[2]
    found += [k for k, v in _query_pairs(query) if v and secret_param(k)] if query else []
    return found


def redact_url(url: str) -> str:
    """``url`` with its userinfo and the values of its secret query parameters replaced by ``[redacted]``;
    everything else exactly as it was."""
    if not url or ("@" not in url and "=" not in url):
        return url
    span = _netloc_userinfo(url)
    if span is not None:
        url = url[: span[0]] + MASK + "@" + url[span[1]:]
    head, q, rest = url.partition("?")
    if not q:
        return url
    query, h, fragment = rest.partition("#")
    pairs = [k if v is None else f"{k}={MASK if v and secret_param(k) else v}" for k, v in _query_pairs(query)]
    return head + "?" + "&".join(pairs) + h + fragment


def _redact_urls(text: str) -> str:
    """Every ``scheme://...`` in ``text`` through :func:`redact_url` (found from each ``://``: linear time)."""
    out: list[str] = []
    pos, i = 0, text.find("://")
    while i >= 0:
        start = i
        while start > pos and i - start < 32 and text[start - 1] in _SCHEME_CHARS:
            start -= 1
        while start < i and not text[start].isalpha():
            start += 1
        tail = _URL_TAIL.match(text, i + 3)
        end = tail.end() if tail else i + 3
        if start < i:
            out += [text[pos:start], redact_url(text[start:end])]
            pos = end
        i = text.find("://", end)
    out.append(text[pos:])
    return "".join(out)


def redact(text: str) -> str:
    """``text`` with every registered secret, and the credentials in any URL in it, replaced by ``[redacted]``."""
    if not text:
        return text
    if "://" in text:
        text = _redact_urls(text)
    if not _secrets:
        return text
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def check_url(url: str, what: str, fix: str) -> None:
    """Refuse ``url`` (named ``what`` in the message) when it holds a credential; ``fix`` says where the
    credential goes instead."""
    from workbench.errors import ConfigError

    said = credentials_said(url)
    if said:
        raise ConfigError(f"{what} {redact_url(url)!r} holds a credential ({said}); {fix}")


def credentials_said(url: str) -> str:
    """The credentials ``url`` holds, in words (``"the query parameter key"``); empty when it holds none."""
    return " and ".join(f"the query parameter {f}" if f != "user:password@" else "a user:password@"
                        for f in dict.fromkeys(url_credentials(url)))


__all__ = ["MASK", "check_url", "credentials_said", "redact", "redact_url", "register", "secret_param", "url_credentials"]
