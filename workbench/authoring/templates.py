"""New environments from templates: ``workbench new NAME --template ...`` and the app's new-env dialog.

A template is a package under ``workbench/authoring/env_templates/`` — a complete, working environment
written against the public authoring API, with comments that teach. Creating an environment copies
it into a user environment directory (where discovery finds it, so ``workbench eval NAME`` works at
once) and writes the new name into it. The copy is made in a temporary folder next to the target
and renamed into place, so a failure leaves nothing behind and nothing existing is ever overwritten.
"""

from __future__ import annotations

import keyword
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from workbench.config import paths
from workbench.errors import ConfigError, OptionError
from workbench.fsutil import staged_folder

DIRECTORY = "create_env.directory"  # the field of the folder a new environment goes in (``--dir``)
PLACEHOLDER = "__env_name__"  # replaced by the new environment's name in every copied text file
NAME_MAX = 64
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_TEXT_SUFFIXES = {".py", ".md", ".txt", ".json", ".jsonl", ".toml"}
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")


@dataclass(frozen=True, slots=True)
class Template:
    name: str  # what --template takes
    package: str  # the folder under workbench/authoring/env_templates/
    summary: str  # one line, for --help and the dialog

    @property
    def source(self) -> Path:
        return templates_dir() / self.package


TEMPLATES: dict[str, Template] = {t.name: t for t in (
    Template("single-turn", "single_turn",
             "one prompt, one reply, an exact-answer reward, a metric and a group bonus (tasks in a JSONL file)"),
    Template("tools", "tools",
             "a ToolLoop over plain Python functions whose signatures become JSON schemas; tool-use metrics"),
    Template("multi-turn", "multi_turn",
             "a MultiTurn game: the environment answers every model turn until the episode ends"),
    Template("sandboxed", "sandboxed",
             "tools that run shell commands in the rollout's sandbox, seeded per task; a sandbox-reading metric"),
)}


def templates_dir() -> Path:
    return Path(__file__).with_name("env_templates")


def default_dir() -> Path:
    """Where new environments go: the first directory discovery searches for user environments."""
    return paths.user_env_dirs()[0]


def check_name(name: str) -> str:
    """An environment name is identifier-like (it becomes a folder, a module and a package name)."""
    name = name.strip()
    if not name:
        raise ConfigError("give the new environment a name, e.g. `workbench new my_env`")
    if len(name) > NAME_MAX:
        raise ConfigError(f"the name is {len(name)} characters long; keep it to {NAME_MAX}")
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{name!r} is not a valid environment name: use letters, digits and underscores, "
                          "starting with a letter (e.g. my_env)")
    if keyword.iskeyword(name):
        raise ConfigError(f"{name!r} is a Python keyword; pick another name")
    return name


def get_template(name: str) -> Template:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ConfigError(f"unknown template {name!r}; choose one of {', '.join(TEMPLATES)}") from None


def _check_free(name: str, target: Path, default_location: bool) -> None:
    """Refuse a name that exists there already, or that another environment answers to."""
    for existing in (target, target.with_suffix(".py")):
        if existing.exists() or existing.is_symlink():
            raise OptionError(DIRECTORY, existing, template="{value} already exists; nothing was written. Pick "
                              "another name or {field}")
    from workbench.authoring.discovery import discover

    for ref in discover():
        # A bundled name always wins name lookups; a user env elsewhere on the search path would
        # shadow (or be shadowed by) the new one. With --dir the new env is used by its path.
        if ref.name == name and (ref.origin == "bundled" or default_location):
            where = f" ({ref.path})" if ref.path else ""
            raise ConfigError(f"there is already a {ref.origin} environment named {name!r}{where}; "
                              "pick another name so `workbench eval NAME` stays unambiguous")


def _fill(folder: Path, name: str) -> None:
    for f in folder.rglob("*"):
        if f.is_file() and f.suffix in _TEXT_SUFFIXES:
            text = f.read_text(encoding="utf-8")
            if PLACEHOLDER in text:
                f.write_text(text.replace(PLACEHOLDER, name), encoding="utf-8")


def create_env(name: str, template: str, directory: str | Path | None = None) -> Path:
    """Copy ``template`` into ``directory`` (default :func:`default_dir`) as the package ``name``;
    returns the new environment's folder. Nothing is overwritten; on failure nothing is left."""
    name = check_name(name)
    tpl = get_template(template)
    parent = Path(directory).expanduser() if directory is not None else default_dir()
    if parent.exists() and not parent.is_dir():
        raise OptionError(DIRECTORY, parent, "a folder", "{value} is a file, not a directory: {field} must be {allowed}")
    target = parent / name
    _check_free(name, target, directory is None)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OptionError(DIRECTORY, parent, "writable", "cannot create {value} ({why}); {field} must be {allowed}",
                          why=e.strerror) from None
    try:
        with staged_folder(target, over_empty=False) as staging:
            shutil.copytree(tpl.source, staging, ignore=_SKIP, dirs_exist_ok=True)
            _fill(staging, name)
    except FileExistsError:
        raise ConfigError(f"{target} already exists; nothing was written") from None
    except OSError as e:
        raise ConfigError(f"cannot create {target} ({e.strerror or e}); nothing was written") from None
    return target
