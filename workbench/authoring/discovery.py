"""Find and load environments: bundled names, file paths, package directories, installed modules."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from workbench.authoring import env_adapters, env_formats
from workbench.authoring.env_files import SKIP_DIRS, content_hash, read_env_files
from workbench.authoring.environment import Environment
from workbench.config import paths
from workbench.errors import EnvLoadError, OptionError

ENTRY_POINT_GROUP = "workbench.environments"


#: The installed name of the bundled environments' folder (``envs/`` in the source tree; setup.py).
BUNDLED_PACKAGE = "workbench_envs"
#: Workbench's own installed packages, never an environment's module.
OWN_PACKAGES = frozenset({"workbench", "workbench_app", "workbench_local", "workbench_cloud", BUNDLED_PACKAGE})


def bundled_dir() -> Path:
    """Where the bundled environments are installed, found without importing them."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EnvLoadError(f"Workbench's bundled environments ({BUNDLED_PACKAGE}) are not installed; reinstall rl-workbench")
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(slots=True)
class EnvRef:
    """Where an environment lives, before it is loaded."""

    name: str
    origin: str  # bundled | user | hub | installed | path
    path: Path | None  # file or package directory
    module: str | None = None  # importable name, for installed modules
    #: the ``workbench.env_formats`` plugin that reads it, for an environment that is not a Python module
    format: str | None = None
    #: what that format claimed: a resolved path or a URL
    where: Path | str | None = None
    #: for an environment a format reads, the text that names it again (what the user typed, or its folder)
    spec: str | None = None

    def version(self) -> str:
        return env_version(self)


def parse_env_args(text: str | None, field: str = "EvalOptions.env_args") -> dict[str, Any]:
    """Parse JSON (``-a``) into keyword arguments for ``load_environment``; an :class:`OptionError` on
    ``field`` when it is not a JSON object."""
    if not text:
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise OptionError(field, text, template="{field} is not valid JSON ({why}); example: {field} {example}",
                          why=e, example="""'{"n": 50, "seed": 1}'""") from None
    if not isinstance(value, dict):
        raise OptionError(field, text, "a JSON object of keyword arguments", "{field} must be {allowed}, got {kind}; "
                          "example: {field} {example}", kind=type(value).__name__, example="""'{"n": 50}'""")
    return value


def _is_env_dir(p: Path) -> bool:
    return p.is_dir() and (p / "__init__.py").is_file()


def _scan_dir(d: Path, origin: str) -> list[EnvRef]:
    """The environments in folder ``d``: Python modules and packages, and (outside the bundled folder) what
    a registered format reads (a Harbor task folder, ...)."""
    refs: list[EnvRef] = []
    if not d.is_dir():
        return refs
    for child in sorted(d.iterdir()):
        if child.name.startswith(("_", ".")) or child.name in SKIP_DIRS:
            continue
        claimed = env_formats.claim(str(child)) if origin != "bundled" else None
        if claimed is not None:
            fmt, where = claimed
            refs.append(EnvRef(fmt.env_name(where), origin, where if isinstance(where, Path) else None,
                               format=fmt.name, where=where, spec=str(child)))
        elif _is_env_dir(child):
            refs.append(EnvRef(child.name, origin, child))
        elif child.suffix == ".py" and child.is_file():
            refs.append(EnvRef(child.stem, origin, child))
    return refs


#: A pulled environment's name: what its record file and its install folder are named after.
HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: Index credentials that a pulled environment's code never sees in its process's environment.
INDEX_CREDENTIAL_VARS = ("WORKBENCH_INDEX_USERNAME", "WORKBENCH_INDEX_PASSWORD")


def hub_records() -> dict[str, dict[str, Any]]:
    """The records ``hub pull`` wrote (``<data>/hub/records/NAME.json``), by name: only those whose name
    is a valid name equal to the file's and whose files lie inside the hub folder."""
    root = paths.hub_dir().resolve()
    d = root / "records"
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or rec.get("name") != f.stem or not HUB_NAME.fullmatch(f.stem):
            continue
        where = [rec.get("path"), *([rec["deps"]] if rec.get("deps") is not None else [])]
        if all(isinstance(w, str) and Path(w).resolve().is_relative_to(root) and Path(w).resolve() != root
               for w in where):
            out[f.stem] = rec
    return out


def discover() -> list[EnvRef]:
    """Every environment Workbench can name: bundled, user directories, pulled from a hub, installed entry points."""
    refs = _scan_dir(bundled_dir(), "bundled")
    seen = {r.name for r in refs}
    for d in paths.user_env_dirs():
        for r in _scan_dir(d, "user"):
            if r.name not in seen:
                refs.append(r)
                seen.add(r.name)
    for name, rec in hub_records().items():
        path = Path(rec["path"])
        if name not in seen and (path.is_file() or _is_env_dir(path)):
            # a pulled environment of another framework (verifiers) is run by its format, in its own interpreter
            claimed = env_formats.claim(str(path))
            fmt_name, where = (claimed[0].name, claimed[1]) if claimed is not None else (None, None)
            refs.append(EnvRef(name, "hub", path, format=fmt_name, where=where, spec=str(path) if claimed else None))
            seen.add(name)
    eps: Iterable[metadata.EntryPoint]
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # pragma: no cover - broken metadata
        eps = []
    for ep in eps:
        if ep.name not in seen:
            refs.append(EnvRef(ep.name, "installed", None, module=ep.value.split(":")[0]))
            seen.add(ep.name)
    return refs


def resolve(spec: str) -> EnvRef:
    """Turn what the user typed (name, path or module) into an EnvRef, or fail with suggestions."""
    claimed = env_formats.claim(spec)
    if claimed is not None:
        fmt, where = claimed
        return EnvRef(fmt.env_name(where), "path" if isinstance(where, Path) else "url",
                      where if isinstance(where, Path) else None, format=fmt.name, where=where,
                      spec=str(where) if isinstance(where, Path) else spec)
    p = Path(spec).expanduser()
    looks_like_path = spec.endswith(".py") or "/" in spec or spec.startswith(".")
    if p.exists() and (p.is_file() or _is_env_dir(p)):
        if p.is_file() and p.suffix != ".py":
            raise EnvLoadError(f"{spec} is not a Python file; an environment is a .py file or a package directory")
        name = p.stem if p.is_file() else p.name
        return EnvRef(name, "path", p.resolve())
    if p.is_dir():
        raise EnvLoadError(f"{spec} is a directory without __init__.py; an environment package needs one defining load_environment()")
    if looks_like_path:
        raise EnvLoadError(f"environment file {spec} does not exist")
    refs = discover()
    for r in refs:
        if r.name == spec:
            return r
    # An installed module (``pip install my-env``) that is not registered as an entry point.
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError):
        found = None
    if found is not None and spec.split(".")[0] not in OWN_PACKAGES:
        origin = found.origin
        path = Path(found.submodule_search_locations[0]) if found.submodule_search_locations else (
            Path(origin) if origin and origin not in ("built-in", "frozen") else None)
        return EnvRef(spec.rsplit(".", 1)[-1], "installed", path, module=spec)
    names = [r.name for r in refs]
    close = difflib.get_close_matches(spec, names, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; known environments: {', '.join(names) or 'none'}"
    raise EnvLoadError(f"unknown environment {spec!r}{hint} (or give a path to a .py file or package directory)")


def env_version(ref: EnvRef, data_files: tuple[Path, ...] = ()) -> str:
    """Content hash of the environment's files (see ``env_files``) and of the data files its tasks are read
    from outside its own folder (``TaskSet.data_files``), 12 hex digits."""
    outside = _outside(ref, data_files)
    if ref.path is not None:
        from workbench.authoring.overrides import BUNDLED_FILE

        own = [(rel, data) for rel, data in read_env_files(ref.path) if rel != BUNDLED_FILE]  # apply() marks it
        return content_hash(own + outside)[:12]
    h = hashlib.sha256(content_hash(outside).encode() if outside else b"")
    if ref.module:
        try:
            h.update(f"{ref.module}=={metadata.version(ref.module.split('.')[0])}".encode())
        except metadata.PackageNotFoundError:
            h.update(ref.module.encode())
    return h.hexdigest()[:12]


def _outside(ref: EnvRef, data_files: tuple[Path, ...]) -> list[tuple[str, bytes]]:
    """The data files not already among the environment's own, as (``data/NAME``, bytes), by name: the
    version does not depend on where on this machine they lie."""
    root = ref.path if ref.path and ref.path.is_dir() else None
    out = []
    for f in sorted(set(data_files)):
        if root is not None and f.is_relative_to(root.resolve()):
            continue
        try:
            out.append((f"data/{f.name}", f.read_bytes()))
        except OSError:
            continue
    return out


def _forget(modname: str) -> None:
    for key in [k for k in sys.modules if k == modname or k.startswith(modname + ".")]:
        del sys.modules[key]


class _FreshLoader(importlib.machinery.SourceFileLoader):
    """Always compiles the source: a cached .pyc is trusted by (mtime in whole seconds, size), which
    an edit saved within the same second that keeps the size would match, loading the old code."""

    def get_code(self, fullname: str) -> Any:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def _import(ref: EnvRef, reload: bool = False) -> ModuleType:
    if ref.origin in ("bundled", "installed"):
        modname = f"{BUNDLED_PACKAGE}.{ref.name}" if ref.origin == "bundled" else (ref.module or ref.name)
        if reload:  # an edited file must be read again, not served from the import cache
            importlib.invalidate_caches()
            _forget(modname)
        return _import_module(modname, ref)
    assert ref.path is not None
    if ref.origin == "hub":  # a pulled environment's dependencies are in its own folder, never the user's venv
        for var in INDEX_CREDENTIAL_VARS:  # its code never sees the index credentials
            os.environ.pop(var, None)
        deps_dir = (hub_records().get(ref.name) or {}).get("deps")
        deps = Path(deps_dir) if isinstance(deps_dir, str) else None
        if deps is not None and deps.is_dir() and str(deps) not in sys.path:
            sys.path.insert(0, str(deps))
    if ref.origin == "path":  # as `python file.py` would: the env's own folder is where its imports look first
        home = str(ref.path.parent)
        if home not in sys.path:
            sys.path.insert(0, home)
    digest = hashlib.sha1(str(ref.path).encode()).hexdigest()[:8]
    modname = f"_workbench_env_{ref.name.replace('-', '_')}_{digest}"
    if ref.path.is_dir():
        init = ref.path / "__init__.py"
        spec = importlib.util.spec_from_file_location(modname, init, loader=_FreshLoader(modname, str(init)),
                                                      submodule_search_locations=[str(ref.path)])
    else:
        spec = importlib.util.spec_from_file_location(modname, ref.path,
                                                      loader=_FreshLoader(modname, str(ref.path)))
    if spec is None or spec.loader is None:
        raise EnvLoadError(f"cannot import {ref.path}")
    module = importlib.util.module_from_spec(spec)
    _forget(modname)  # an earlier version (hot reload) and its submodules
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        del sys.modules[modname]
        raise EnvLoadError(f"{e.filename or ref.path}:{e.lineno}: syntax error: {e.msg}; fix the file and try again") from None
    except Exception as e:
        del sys.modules[modname]
        _raise_missing_extra(e, str(ref.path))
        raise EnvLoadError(f"importing {ref.path} failed: {_where(e)}") from None
    return module


def _import_module(modname: str, ref: EnvRef) -> ModuleType:
    try:
        return importlib.import_module(modname)
    except SyntaxError as e:
        raise EnvLoadError(f"{e.filename}:{e.lineno}: syntax error: {e.msg}; fix the file and try again") from None
    except Exception as e:
        _raise_missing_extra(e, f"environment {ref.name!r} ({modname})")
        raise EnvLoadError(f"importing environment {ref.name!r} ({modname}) failed: {_where(e)}") from None


def _raise_missing_extra(e: BaseException, where: str) -> None:
    """An environment written for another framework (verifiers, ...), imported where that framework is not
    installed: its adapter says which extra."""
    msg = env_adapters.missing_extra(e)
    if msg:
        raise EnvLoadError(f"{where} {msg}") from None


def _where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    loc = f" at {tb[-1].filename}:{tb[-1].lineno}" if tb else ""
    return f"{type(e).__name__}: {e}{loc}"


def load(spec: str, env_args: dict[str, Any] | None = None) -> Environment:
    """Load an environment by name, path or module and call its ``load_environment(**env_args)``."""
    ref = resolve(spec)
    return load_ref(ref, env_args)


def load_ref(ref: EnvRef, env_args: dict[str, Any] | None = None, reload: bool = False) -> Environment:
    """Build the environment ``ref`` names. ``reload`` re-reads its files (for hot reload)."""
    env_args = env_args or {}
    if ref.format is not None:
        return _load_format(ref, env_args)
    module = _import(ref, reload)
    fn = getattr(module, "load_environment", None)
    where = str(ref.path) if ref.path else ref.module
    if fn is None or not callable(fn):
        if (v1 := env_adapters.unsupported(module)) is not None:
            raise EnvLoadError(f"{where}: {v1}")
        raise EnvLoadError(f"{where} defines no load_environment(**kwargs) function; an environment module must define one")
    try:
        sig = inspect.signature(fn)
        sig.bind(**env_args)
    except TypeError as e:
        accepted = ", ".join(p for p in sig.parameters if p != "kwargs") or "none"
        raise OptionError("EvalOptions.env_args", env_args, template="load_environment of {env!r} does not accept these "
                          "{field} arguments ({why}); it accepts: {accepted}", env=ref.name, why=e,
                          accepted=accepted) from None
    handlers = _signal_handlers()
    try:
        env = fn(**env_args)
    except EnvLoadError:
        raise
    except Exception as e:
        msg = env_adapters.missing_extra(e) or env_adapters.download_error(e)
        if msg:
            raise EnvLoadError(f"environment {ref.name!r} {msg}") from None
        raise EnvLoadError(f"load_environment of {ref.name!r} raised {_where(e)}") from None
    if not isinstance(env, Environment):
        adopted = env_adapters.adopt(env, ref.name)
        if adopted is not None:
            _restore_signal_handlers(handlers)  # a verifiers Environment takes SIGINT and SIGTERM for itself
            env = adopted
    if not isinstance(env, Environment):
        if (v1 := env_adapters.unsupported(env)) is not None:
            raise EnvLoadError(f"load_environment of {ref.name!r} returned {type(env).__name__}: {v1}")
        raise EnvLoadError(f"load_environment of {ref.name!r} returned {type(env).__name__}, not a wb.Environment "
                           "(or a verifiers Environment)")
    env.source = str(ref.path) if ref.path else (ref.module or ref.name)
    declared = getattr(module, "DIALECT", None)
    if isinstance(declared, str) and declared and not env.adapter:
        env.dialect = declared
    env.version = env_version(ref, getattr(env.tasks, "data_files", ()))
    from workbench.authoring import overrides

    package_dir = Path(module.__file__).parent if getattr(module, "__path__", None) and module.__file__ else None
    overrides.apply(env, overrides.find(ref.name, package_dir))
    return env


def _load_format(ref: EnvRef, env_args: dict[str, Any]) -> Environment:
    assert ref.format is not None and ref.where is not None
    fmt = env_formats.find(ref.format)
    env = fmt.load(ref.where, env_args)
    if env.dialect == "workbench":  # a format that names its own dialect (``verifiers v1``) keeps it
        env.dialect = ref.format
    env.source = ref.spec or str(ref.where)  # what names it again: `rescore` and the app load it from this
    env.version = env_formats.version_of(fmt, ref.where, env) or (
        env_version(ref, getattr(env.tasks, "data_files", ())) if ref.path else _hash_text(str(ref.where)))
    return env


def _hash_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _signal_handlers() -> dict[int, Any]:
    """SIGINT's and SIGTERM's handlers before ``load_environment`` runs (a verifiers Environment installs its
    own). Off the main thread (the app loads in workers), where ``signal.signal`` raises, a call to it made
    while an environment loads is skipped instead, as it could not have taken effect."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        global _signal_shim
        if _signal_shim is None:
            original = signal.signal

            def only_on_main(sig: int, handler: Any) -> Any:
                if threading.current_thread() is threading.main_thread():
                    return original(sig, handler)
                return signal.getsignal(sig)

            _signal_shim = only_on_main
            signal.signal = only_on_main  # type: ignore[assignment]  # replaced on purpose; typeshed types the handler narrower
        return {}
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


_signal_shim: Any = None


def _restore_signal_handlers(handlers: dict[int, Any]) -> None:
    import signal

    for sig, handler in handlers.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
