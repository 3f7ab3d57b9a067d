"""Refuse to ship secrets: find things shaped like API keys, tokens and private keys in a bundle.

A finding names the file and line and what the thing looks like, never the secret itself. Three
kinds of check run over every file of an environment before it is packaged (and again on the cloud
side before a bundle runs) — text in UTF-8 or, by its byte-order mark, UTF-16/32; the members of gzip,
bz2, xz, zip and tar files (one that cannot be opened is refused, with the reason); the bytes of other
binary files:

- known token shapes: OpenAI / Anthropic (``sk-...``), AWS access keys (``AKIA...``), GitHub
  (``ghp_...``, ``github_pat_...``), Hugging Face (``hf_...``), Slack (``xox?-...``), Modal
  (``ak-...`` / ``as-...``), PEM private keys (``-----BEGIN ... PRIVATE KEY-----``);
- assignments of a long, random-looking string literal to a name such as ``api_key``, ``token``,
  ``secret`` or ``password`` (``api_key = "..."``, ``"token": "..."``);
- the literal value of every secret Workbench holds on this machine (:func:`workbench_secrets`): provider
  and index logins from the keyring and their env vars, the key variable of every registered model
  (``models add --api-key-env``), and every ``WORKBENCH_*`` variable that holds a credential.

``.env`` files (``.env``, ``.env.local``, ...) are refused whole. A false positive is silenced by
writing ``workbench: allow-secret`` on the same line (a comment in any syntax); a known token's value
is refused even then.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from workbench.errors import WorkbenchError

ALLOW_MARKER = "workbench: allow-secret"

#: (what it looks like, pattern). Ordered: the first match on a line names the finding.
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("a PEM private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})")),
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("a Slack token", re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}")),
    ("a Modal token", re.compile(r"\ba[ks]-[A-Za-z0-9]{20,}")),
]

#: ``api_key = "..."``, ``"secret": '...'``, ``TOKEN := "..."``: a secret-ish name given a string literal.
_ASSIGNMENT = re.compile(
    r"""(?ix)
    (?<![A-Za-z0-9_.\-])
    (?P<name>[A-Za-z0-9_.\-]*?(?:api[_\-]?key|apikey|secret|token|passw(?:or)?d|access[_\-]?key|credentials?)
        (?:[_.\-][A-Za-z0-9_.\-]*)?)
    ["']?\s*(?::=|=|:)\s*
    (?:[rbuRBU]{0,2})(?P<q>["'])(?P<value>[^"'\s]{16,})(?P=q)
    """
)

_PLACEHOLDER = re.compile(r"(?i)(your|example|placeholder|changeme|dummy|redacted|xxxx|\.\.\.|<|>|\$\{|\{\{|%\()")

#: A ``WORKBENCH_*`` variable with such a name holds a credential (WORKBENCH_API_KEY, WORKBENCH_INDEX_PASSWORD...).
#: Keyring entries Workbench keeps besides the providers' and the indexes' (``workbench mcp --http``'s token).
_KEYRING_ENTRIES = ("mcp",)
_CREDENTIAL_VAR = re.compile(r"(?i)(key|token|secret|passw(?:or)?d|username|credentials?|auth)(_|$)")


def workbench_secrets() -> list[tuple[str, str]]:
    """(label, value) of every secret Workbench holds on this machine, for the scan's known tokens: the
    providers' and indexes' logins from every source, the keyring included
    (:func:`workbench.config.credentials.known_tokens`); the value of the variable every registered model
    names (``models add --api-key-env``); every ``WORKBENCH_*`` variable that holds a credential. Never raises."""
    from workbench.config.credentials import known_tokens

    out = list(known_tokens())
    try:
        from workbench.config.models import load_models

        models = load_models()
    except Exception:  # an unreadable models file: the other secrets are still looked for
        models = {}
    for name, model in models.items():
        var = model.api_key_env
        value = os.environ.get(var, "").strip() if var else ""
        if value:
            out.append((f"key of model {name!r} (env:{var})", value))
    for user in _KEYRING_ENTRIES:
        try:
            import keyring

            value = keyring.get_password("workbench", user) or ""
        except Exception:  # no backend, a locked keyring: nothing to look for
            value = ""
        if value.strip():
            out.append((f"Workbench {user} token (keyring)", value.strip()))
    for var, value in sorted(os.environ.items()):
        if var.startswith("WORKBENCH_") and _CREDENTIAL_VAR.search(var.removeprefix("WORKBENCH_")) and value.strip():
            out.append((f"Workbench credential (env:{var})", value.strip()))
    return out


#: Known token values shorter than this (``EMPTY``, ``x``: placeholders for local servers) are not looked for.
MIN_KNOWN = 12

#: Only text files are read; anything with a NUL byte in its first 8 KB is treated as binary.
_BINARY_PROBE = 8192


@dataclass(frozen=True, slots=True)
class SecretFinding:
    path: str  # as given to the scanner (relative to the environment)
    line: int  # 1-based
    kind: str  # what it looks like, e.g. "an OpenAI-style API key"

    def __str__(self) -> str:
        return f"{self.path}:{self.line} looks like {self.kind}"


class SecretInBundleError(WorkbenchError):
    """An environment (or bundle) holds something shaped like a secret; it is not packaged or run."""

    def __init__(self, what: str, findings: list[SecretFinding]) -> None:
        self.findings = findings
        first = findings[0]
        rest = [f"{PurePosixPath(f.path).name}:{f.line}" for f in findings[1:4]]
        more = f" (also {', '.join(rest)}{', ...' if len(findings) > 4 else ''})" if rest else ""
        super().__init__(
            f"refusing to {what}: {first}{more}; remove it and let the run read it from keyring "
            "(`workbench login PROVIDER`) or the environment, or, if it is not a secret, add the comment "
            f"`{ALLOW_MARKER}` on that line")


def is_env_file(path: str) -> bool:
    """``.env`` and ``.env.local`` style files, which hold secrets by convention (templates excepted)."""
    name = PurePosixPath(path).name
    if name != ".env" and not name.startswith(".env."):
        return False
    return not name.endswith((".example", ".sample", ".template", ".dist"))


def _entropy(s: str) -> float:
    counts: dict[str, int] = {}
    for ch in s:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / len(s) * math.log2(c / len(s)) for c in counts.values())


def looks_random(value: str) -> bool:
    """A long literal with letters and digits and high character entropy (not a word, path or URL)."""
    if len(value) < 16 or _PLACEHOLDER.search(value):
        return False
    if any(c in value for c in "/:\\") or value.startswith(("os.", "env.")):
        return False
    has_alpha = any(c.isalpha() for c in value)
    has_digit = any(c.isdigit() for c in value)
    return has_alpha and has_digit and _entropy(value) >= 3.5


def scan_text(path: str, text: str, known: Iterable[tuple[str, str]] = ()) -> list[SecretFinding]:
    """Findings in one file's text. ``known`` holds (label, value) pairs of real tokens to look for."""
    known = [(label, value) for label, value in known if len(value) >= MIN_KNOWN]
    findings: list[SecretFinding] = []
    if is_env_file(path):
        lines = text.splitlines()
        first = next((i for i, ln in enumerate(lines, 1) if ln.strip() and not ln.lstrip().startswith("#")), 1)
        return [SecretFinding(path, first, "a .env file (which holds secrets by convention)")]
    for lineno, line in enumerate(text.splitlines(), 1):
        kind = next((f"your {label}" for label, value in known if value in line), None)  # never allowed
        if kind is None and ALLOW_MARKER in line:
            continue
        if kind is None:
            kind = next((k for k, pat in PATTERNS if pat.search(line)), None)
        if kind is None:
            m = next((m for m in _ASSIGNMENT.finditer(line) if looks_random(m.group("value"))), None)
            if m is not None:
                kind = f"a secret assigned to {m.group('name')!r}"
        if kind is not None:
            findings.append(SecretFinding(path, lineno, kind))
    return findings


#: Byte-order marks, longest first: a text file in one of these encodings is decoded and scanned as text.
_BOMS = [(b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xef\xbb\xbf", "utf-8-sig"),
         (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")]
#: Archives and compressed files are opened and their members scanned, up to this depth and size.
MAX_DEPTH = 4
MAX_EXPANDED = 256 << 20


def _decode_bom(data: bytes) -> str | None:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom):].decode(codec.removesuffix("-sig"), "replace")
    return None


def _members(path: str, data: bytes) -> list[tuple[str, bytes]] | None:
    """The members of a gzip, bz2, xz, zip or tar file (None when ``data`` is none of these)."""
    import bz2
    import gzip
    import io
    import lzma
    import tarfile
    import zipfile

    inner = f"{path}!{PurePosixPath(path.rsplit('!', 1)[-1]).stem}"  # data.txt.gz holds data.txt
    if data[:2] == b"\x1f\x8b":
        return [(inner, _bounded(gzip.GzipFile(fileobj=io.BytesIO(data))))]
    if data[:3] == b"BZh":
        return [(inner, _bounded(bz2.BZ2File(io.BytesIO(data))))]
    if data[:6] == b"\xfd7zXZ\x00":
        return [(inner, _bounded(lzma.LZMAFile(io.BytesIO(data))))]
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            out = []
            for info in z.infolist():
                if info.is_dir():
                    continue
                if info.flag_bits & 0x1:
                    raise ValueError(f"its member {info.filename} is encrypted")
                with z.open(info) as f:
                    out.append((f"{path}!{info.filename}", _bounded(f)))
            return out
    if len(data) > 262 and data[257:262] == b"ustar":
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            out = []
            for m in t.getmembers():
                if m.isfile():
                    member = t.extractfile(m)
                    if member is not None:
                        out.append((f"{path}!{m.name}", _bounded(member)))
            return out
    return None


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def _bounded(f: _Readable) -> bytes:
    data = f.read(MAX_EXPANDED + 1)
    if len(data) > MAX_EXPANDED:
        raise ValueError(f"it expands past {MAX_EXPANDED >> 20} MB")
    return data


def scan_bytes(path: str, data: bytes, known: Iterable[tuple[str, str]] = (), depth: int = 0) -> list[SecretFinding]:
    """Findings in one file's bytes. Archives and compressed files are opened and their members scanned
    (one it cannot open is itself a finding, with the reason); UTF-16/32 text is decoded by its BOM;
    other binary files are searched for known tokens and token shapes."""
    if is_env_file(path) and b"\x00" in data[:_BINARY_PROBE]:
        return [SecretFinding(path, 1, "a .env file (which holds secrets by convention)")]
    try:
        members = _members(path, data)
    except Exception as e:  # corrupt, encrypted, too big: it cannot be shown to hold no secret
        return [SecretFinding(path, 1, f"an archive it cannot read ({e}); leave it out of the environment")]
    if members is not None:
        if depth >= MAX_DEPTH:
            return [SecretFinding(path, 1, f"an archive nested more than {MAX_DEPTH} deep")]
        out: list[SecretFinding] = []
        for member, content in members:
            out += scan_bytes(member, content, known, depth + 1)
        return out
    text = _decode_bom(data)
    if text is not None:
        return scan_text(path, text, known)
    if b"\x00" in data[:_BINARY_PROBE]:
        for label, value in known:
            if len(value) >= MIN_KNOWN and value.encode() in data:
                return [SecretFinding(path, data[: data.index(value.encode())].count(b"\n") + 1, f"your {label}")]
        raw = data.decode("latin-1")  # token shapes are ASCII: found in binary data as they are in text
        for kind, pat in PATTERNS:
            m = pat.search(raw)
            if m is not None:
                return [SecretFinding(path, raw.count("\n", 0, m.start()) + 1, kind)]
        return []
    return scan_text(path, data.decode("utf-8", "replace"), known)


def scan_files(files: Iterable[tuple[str, bytes]], known: Iterable[tuple[str, str]] = ()) -> list[SecretFinding]:
    """Findings over (relative path, bytes) pairs, in the order given."""
    known = list(known)
    out: list[SecretFinding] = []
    for path, data in files:
        out.extend(scan_bytes(path, data, known))
    return out


def check_files(files: Iterable[tuple[str, bytes]], what: str, known: Iterable[tuple[str, str]] = ()) -> None:
    """Raise :class:`SecretInBundleError` (file and line of the first finding) when anything is found."""
    findings = scan_files(files, known)
    if findings:
        raise SecretInBundleError(what, findings)
