"""A client of a package index's simple API (PEP 503 HTML, PEP 691 JSON where offered): the projects it
holds, a project's files with their sha256, and downloads checked against it. Any index speaks it:
pypiserver, devpi, Artifactory, GitLab, CodeArtifact, PyPI. Failures are one sentence each: the index
cannot be reached, refused the credentials, or is not a package index."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

from workbench.errors import EndpointError, NotFoundError
from workbench.packaging.indexes import Index

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, text/html;q=0.5"
TIMEOUT_S = 30.0


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, slots=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None

    @property
    def version(self) -> str | None:
        """The version a wheel's file name carries (``name-VERSION-py3-none-any.whl``), else None."""
        if not self.filename.endswith(".whl"):
            return None
        parts = self.filename[:-4].split("-")
        return parts[1] if len(parts) >= 5 else None


def _sha256(value: object) -> str | None:
    """A sha256 as an index lists it, when it is one (64 hex digits; it names a cache file)."""
    return value.lower() if isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{64}", value) else None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


class IndexClient:
    def __init__(self, index: Index) -> None:
        self.index = index

    def _request(self, url: str, accept: str = ACCEPT) -> tuple[bytes, str]:
        req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "workbench-hub"})
        if self.index.auth and urlsplit(url).netloc == urlsplit(self.index.url).netloc:  # never to another host
            token = base64.b64encode(f"{self.index.auth[0]}:{self.index.auth[1]}".encode()).decode()
            req.add_unredirected_header("Authorization", f"Basic {token}")  # nor to where it redirects
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                return resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            if e.code in (401, 403):
                why = "needs credentials" if not self.index.auth else "refused the credentials"
                raise EndpointError(f"index {self.index.name} {why} (HTTP {e.code} for {url}): run `workbench login "
                                    f"index {self.index.name}` or set WORKBENCH_INDEX_USERNAME and "
                                    "WORKBENCH_INDEX_PASSWORD") from None
            if e.code == 404:
                raise NotFoundError(url) from None
            raise EndpointError(f"index {self.index.name} answered HTTP {e.code} for {url}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise EndpointError(f"cannot reach index {self.index.name} at {self.index.url} ({reason})") from None

    def _page(self, url: str) -> Any:
        """A simple-API page: the JSON object of PEP 691, or the links of a PEP 503 HTML page."""
        body, ctype = self._request(url)
        if ctype.split(";")[0].strip() == JSON_TYPE:
            try:
                return json.loads(body)
            except ValueError:
                raise EndpointError(f"{url} is not a package index: its JSON does not parse") from None
        if "html" not in ctype.lower() and not body.lstrip()[:15].lower().startswith((b"<!doctype", b"<html")):
            raise EndpointError(f"{self.index.url} is not a package index: {url} answered {ctype or 'no content type'}, "
                                "not a simple-API page (PEP 503/691)")
        parser = _Links()
        parser.feed(body.decode("utf-8", "replace"))
        return parser.links

    def projects(self) -> list[str]:
        """Every project's normalized name."""
        try:
            page = self._page(self.index.url)
        except NotFoundError:
            raise EndpointError(f"{self.index.url} is not a package index (no simple API there: HTTP 404)") from None
        if isinstance(page, dict):
            projects = page.get("projects")
            listed: list[Any] = projects if isinstance(projects, list) else []
            return sorted(normalize(str(p["name"])) for p in listed if isinstance(p, dict) and p.get("name"))
        return sorted({normalize(text) for _, text in page if text})

    def files(self, project: str) -> list[IndexFile]:
        """A project's files, oldest first as the index lists them; NotFoundError when it has none."""
        url = urljoin(self.index.url, normalize(project) + "/")
        try:
            page = self._page(url)
        except NotFoundError:
            raise NotFoundError(f"no project {normalize(project)} on index {self.index.name}") from None
        out = []
        if isinstance(page, dict):
            for f in page.get("files", []) if isinstance(page.get("files"), list) else []:
                if not isinstance(f, dict) or "filename" not in f or "url" not in f:
                    continue
                digests = f.get("hashes")
                hashes: dict[str, Any] = digests if isinstance(digests, dict) else {}
                out.append(IndexFile(str(f["filename"]), urljoin(url, str(f["url"])), _sha256(hashes.get("sha256"))))
        else:
            for href, text in page:
                link, _, frag = href.partition("#")
                sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
                out.append(IndexFile(text or urlsplit(link).path.rsplit("/", 1)[-1], urljoin(url, link), _sha256(sha)))
        return out

    def download(self, f: IndexFile) -> bytes:
        """The file's bytes; refused when they do not match the sha256 the index lists."""
        data, _ = self._request(f.url, accept="*/*")
        if f.sha256 and hashlib.sha256(data).hexdigest() != f.sha256.lower():
            raise EndpointError(f"{f.filename} from index {self.index.name} does not match the sha256 the index lists "
                                "for it; nothing was installed")
        return data


__all__ = ["IndexClient", "IndexFile", "normalize"]
