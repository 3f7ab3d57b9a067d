"""The spellings that name an OpenEnv environment, and what each names.

- ``openenv+http://HOST:PORT`` (or ``openenv+https://...``): a server that is already running.
- ``openenv:DIR``: an environment's source folder (``openenv init``'s layout: ``openenv.yaml``, ``server/app.py``),
  served from that folder by openenv-core in the OpenEnv framework environment.
- ``openenv:REQUIREMENT``: an environment package (``openenv-echo-env``, ``openenv-echo-env==0.2.1``, a wheel
  file), installed into a framework environment of its own and served from there.
- ``openenv+docker:IMAGE``: an environment's image, run as a container whose port 8000 is published on
  127.0.0.1 only.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from workbench.errors import EnvLoadError

#: The openenv-core every environment is served with (the protocol this format speaks).
OPENENV_CORE = "openenv-core==0.3.0"
URL_PREFIXES = ("openenv+http://", "openenv+https://")
DOCKER_PREFIX = "openenv+docker:"
PACKAGE_PREFIX = "openenv:"
_APP_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
_WHEEL = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.]*)-[^-]+-.*\.whl")


def claims(spec: str) -> Path | str | None:
    """What ``spec`` names if it is an OpenEnv spelling: a source folder's resolved path, else the spec
    itself (a URL, a package, an image); None when it is not one."""
    if spec.startswith(URL_PREFIXES):
        url = spec.removeprefix("openenv+")
        parts = urlsplit(url)
        if not parts.hostname:
            raise EnvLoadError(f"{spec} names no host; example: openenv+http://127.0.0.1:8000")
        return url.rstrip("/")
    if spec.startswith(DOCKER_PREFIX):
        image = spec.removeprefix(DOCKER_PREFIX)
        if not _IMAGE.fullmatch(image):
            raise EnvLoadError(f"{spec} names no Docker image; example: openenv+docker:echo-env:latest")
        return spec
    if spec.startswith(PACKAGE_PREFIX):
        what = spec.removeprefix(PACKAGE_PREFIX)
        if not what:
            raise EnvLoadError("openenv: names nothing; give a folder (openenv:./my_env) or a package "
                               "(openenv:openenv-echo-env)")
        p = Path(what).expanduser()
        if p.is_dir():
            return source_folder(p)
        if _looks_like_path(what) and not p.exists():
            raise EnvLoadError(f"{spec}: no such folder or file {what}")
        return spec
    return None


def _looks_like_path(text: str) -> bool:
    return "/" in text or text.startswith((".", "~")) or text.endswith(".whl")


def source_folder(p: Path) -> Path:
    root = p.resolve()
    if not ((root / "openenv.yaml").is_file() or (root / "server" / "app.py").is_file()):
        raise EnvLoadError(f"{p} is not an OpenEnv environment folder: it has neither openenv.yaml nor server/app.py")
    return root


@dataclass(frozen=True, slots=True)
class Folder:
    """An environment's source folder: its name, the app to serve and what it needs besides openenv-core."""

    root: Path
    name: str
    app: str
    requirements: tuple[str, ...]


def read_folder(root: Path) -> Folder:
    name, app = root.name, "server.app:app"
    manifest = root / "openenv.yaml"
    if manifest.is_file():
        for line in manifest.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            value = value.strip().strip("'\"")
            if key.strip() == "name" and value:
                name = value
            elif key.strip() == "app" and value:
                app = value
    if not _APP_REF.fullmatch(app):
        raise EnvLoadError(f"{manifest}: app {app!r} is not a module:attribute reference like server.app:app")
    if not (root / (app.split(":")[0].replace(".", "/") + ".py")).is_file():
        raise EnvLoadError(f"{root}: the app {app} names no file {app.split(':')[0].replace('.', '/')}.py")
    return Folder(root, name, app, _folder_requirements(root))


def _folder_requirements(root: Path) -> tuple[str, ...]:
    """The folder's declared dependencies but openenv-core (served with :data:`OPENENV_CORE`)."""
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        return ()
    try:
        deps = tomllib.loads(pyproject.read_text()).get("project", {}).get("dependencies") or []
    except (tomllib.TOMLDecodeError, OSError) as e:
        raise EnvLoadError(f"{pyproject} cannot be read: {e}") from None
    out = []
    for dep in deps:
        try:
            req = Requirement(str(dep))
        except InvalidRequirement as e:
            raise EnvLoadError(f"{pyproject}: dependency {dep!r} is not a requirement ({_first_line(e)})") from None
        if canonicalize_name(req.name) != "openenv-core":
            out.append(str(req))
    return tuple(sorted(out))


def package_requirement(spec: str) -> tuple[str, str]:
    """(what to install, the distribution's name) for ``openenv:REQUIREMENT``."""
    what = spec.removeprefix(PACKAGE_PREFIX)
    p = Path(what).expanduser()
    if p.is_file():
        m = _WHEEL.fullmatch(p.name)
        if not m:
            raise EnvLoadError(f"{spec}: {p.name} is not a wheel (NAME-VERSION-...whl)")
        return str(p.resolve()), m.group(1)
    try:
        req = Requirement(what)
    except InvalidRequirement as e:
        raise EnvLoadError(f"{spec} is neither an environment folder nor a package requirement "
                           f"({_first_line(e)})") from None
    return str(req), req.name


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def env_name(where: Path | str) -> str:
    if isinstance(where, Path):
        return where.name
    if where.startswith(DOCKER_PREFIX):
        image = where.removeprefix(DOCKER_PREFIX).split("@")[0]
        last = image.rsplit("/", 1)[-1]
        return last.split(":")[0] or "openenv"
    if where.startswith(PACKAGE_PREFIX):
        what = where.removeprefix(PACKAGE_PREFIX)
        m = _WHEEL.fullmatch(Path(what).name)
        name = m.group(1) if m else re.split(r"[\s\[<>=!~;@]", what, maxsplit=1)[0]
        return canonicalize_name(name) or "openenv"
    parts = urlsplit(where)
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"openenv-{parts.hostname}-{parts.port or parts.scheme}")
