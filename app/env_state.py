"""What the Environments screen knows about each environment, and the (blocking) calls that fill it in.

Everything here runs in worker threads and calls the same workbench functions as the CLI.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.authoring import discovery
from workbench.authoring.discovery import EnvRef
from workbench.config import paths
from workbench.errors import WorkbenchError
from workbench.runs.validate import ValidationReport

if TYPE_CHECKING:
    from workbench_app.workers import CancellableRun

    from workbench.analysis.rescore import RescoreResult
    from workbench.store import Store


@dataclass(slots=True)
class EnvState:
    ref: EnvRef
    version: str = ""
    status: str = "loading"  # loading | ok | error
    message: str = ""  # the load error, or a short description when it loaded
    tasks: int | None = None
    latest: dict[str, Any] | None = None  # the newest eval or train run of this env (a list_runs row)
    report: ValidationReport | None = None
    report_error: str = ""
    report_files: str = ""  # the hash of the files the report (or its error) is of: a reload of others drops it
    loaded_version: str = ""  # the version of the last successful load (a reload to another re-scores)
    framework: str = ""  # the framework it is written for, e.g. "verifiers 0.3.1" ("" for Workbench's own)
    dialect: str = ""  # the format it is written in (workbench, verifiers legacy, harbor, ...); "" until it loads
    rescore: RescoreResult | None = None  # the latest re-score of its stored rollouts
    rescoring: tuple[int, int] | None = None  # (done, total) while one runs

    @property
    def name(self) -> str:
        return self.ref.name


@dataclass(slots=True)
class LoadResult:
    name: str
    version: str
    status: str
    message: str
    tasks: int | None
    reloaded: bool = False  # a reload of an env already loaded (its files may have been edited)
    files: str = ""  # the hash of the files loaded (``EnvRef.version``; ``version`` may be the env's own)
    framework: str = ""  # e.g. "verifiers 0.3.1" for an environment written for verifiers
    dialect: str = ""  # the format it is written in; "" when it did not load


def env_spec(ref: EnvRef) -> str:
    """What to pass to ``discovery.load`` / ``evaluate`` / ``validate_env`` for this ref."""
    if ref.origin == "path" and ref.path is not None:
        return str(ref.path)
    if ref.origin == "installed" and ref.module:
        return ref.module
    if ref.format is not None and ref.spec:  # what a format read: the text that names it again (a URL)
        return ref.spec
    return ref.name


def source_file(ref: EnvRef) -> Path | None:
    """The file an editor should open: the module file, or a package's ``__init__.py``."""
    if ref.path is None:
        return None
    return ref.path / "__init__.py" if ref.path.is_dir() else ref.path


def safe_version(ref: EnvRef) -> str:
    try:
        return ref.version()
    except (OSError, WorkbenchError):  # unreadable, or a file linking outside its folder
        return "?"


def load_env(ref: EnvRef, *, reload: bool) -> LoadResult:
    """Import and build the environment (``workbench envs``'s :func:`~workbench.usecases.environments.describe`);
    never raises (a broken env is a result, not a crash). A pulled environment is described from its
    record, never imported here: its code runs when the user runs it."""
    from workbench.usecases.environments import describe

    listing = describe(ref, reload=reload, count_tasks=True, stdout_to_stderr=False)
    files = "?" if listing.files.startswith("unreadable") else listing.files
    if ref.origin == "hub" or listing.loaded:
        version = files if ref.origin == "hub" else listing.version
        return LoadResult(ref.name, version, "ok", listing.description, listing.tasks, reload, files,
                          listing.framework, listing.dialect)
    return LoadResult(ref.name, files, "error", listing.error_text, None, reload, files, dialect=listing.dialect)


def rescore_stored(ref: EnvRef, store: Store, runner: CancellableRun,
                   progress: Callable[[int, int], None]) -> RescoreResult | None:
    """``workbench rescore ENV``: the env as its files are now, over every stored rollout of it, each
    run with its own arguments. None when nothing of it is stored. Blocks: call it from a worker."""
    from workbench.analysis.rescore import rescore
    from workbench.store.rescores import count_stored

    env = discovery.load_ref(ref)
    if count_stored(store.conn, env.name) == 0:
        return None
    return runner.run(lambda: rescore(store, env, env_for_args=lambda args: discovery.load_ref(ref, args),
                                      progress=progress))


def _watchable(d: Path) -> Path | None:
    """``d`` if it exists; else ``d`` created (the first environment made there must hot reload too);
    else, where it cannot be created, its nearest existing ancestor below the home folder (the
    watch reports ``d`` when it appears). None when there is nothing sensible to watch."""
    if d.is_dir():
        return d.resolve()
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d.resolve()
    except OSError:
        pass
    home = Path.home().resolve()
    for parent in d.parents:
        if parent.is_dir():
            parent = parent.resolve()
            return parent if home in parent.parents else None
    return None


def watch_dirs(refs: list[EnvRef], user_dirs: list[Path] | None = None) -> list[Path]:
    """Directories to watch for hot reload: each env's folder plus the user env folders
    (``user_dirs``, default :func:`workbench.config.paths.user_env_dirs`), created if missing."""
    dirs: set[Path] = set()
    for r in refs:
        if r.path is None or r.origin == "installed":
            continue
        dirs.add((r.path if r.path.is_dir() else r.path.parent).resolve())
    for d in paths.user_env_dirs() if user_dirs is None else user_dirs:
        w = _watchable(d)
        if w is not None:
            dirs.add(w)
    # A recursive watch on a parent covers its children.
    return sorted(d for d in dirs if not any(p != d and p in d.parents for p in dirs))


def affected(refs: list[EnvRef], changed: list[Path]) -> set[str]:
    """Names of the environments whose files are among ``changed``."""
    names: set[str] = set()
    for p in changed:
        p = p.resolve()
        for r in refs:
            if r.path is None:
                continue
            root = r.path.resolve()
            if p == root or root in p.parents:
                names.add(r.name)
    return names
