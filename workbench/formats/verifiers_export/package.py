"""Write a Workbench environment as a pip-installable verifiers 0.4 environment package.

The package (``pip install --no-deps --target``-able; it needs only what a verifiers 0.4 environment
has) holds::

    pyproject.toml          name, version, ``verifiers>=0.4,<0.5``
    README.md
    MODULE/__init__.py      ``__all__``: the Taskset, the Harness (what ``vf-eval MODULE`` plays) and the Env
    MODULE/_bridge.py       those three classes (vendored/bridge.py.txt)
    MODULE/_workbench/      the part of Workbench's authoring API the environment uses (vendored/compat/)
    MODULE/_env/source[.py] the environment's own files, unchanged
    MODULE/manifest.json    what was exported: environment, arguments, sampling, harness, tool schemas, rubric
    MODULE/tasks.jsonl      the tasks Workbench listed, in its order

Everything is written into a temporary sibling of the target folder and moved into place when complete,
so a refused or failed export leaves nothing behind.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from workbench.authoring.env_files import env_file_paths
from workbench.authoring.environment import Environment
from workbench.authoring.harness import MultiTurn, SingleTurn, ToolLoop
from workbench.formats.verifiers_export.refusals import ExportRefused, refusal, task_refusal
from workbench.fsutil import staged_folder

VERIFIERS_REQUIREMENT = "verifiers>=0.4.0,<0.5"
#: The modules of the stand-in for Workbench's authoring API (``vendored/compat/``).
COMPAT_MODULES = ("__init__", "tasks", "rubric", "harness")
#: Names verifiers resolves to its own built-in tasksets first (``verifiers.v1.tasksets.<name>``).
VERIFIERS_BUILTIN_TASKSETS = frozenset({"harbor", "nemo_gym", "openenv", "textarena"})
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")


@dataclass(frozen=True, slots=True)
class Exported:
    env: str
    path: Path
    package: str
    module: str
    tasks: int
    harness: str
    requires: tuple[str, ...] = (VERIFIERS_REQUIREMENT,)

    def as_dict(self) -> dict[str, Any]:
        return {"env": self.env, "format": "verifiers", "path": str(self.path), "package": self.package,
                "module": self.module, "tasks": self.tasks, "harness": self.harness,
                "requires": list(self.requires)}


def package_name(env_name: str, given: str | None) -> str:
    """The distribution name: ``given``, else the environment's name in lower case with dashes."""
    name = given if given is not None else re.sub(r"[^a-z0-9]+", "-", env_name.lower()).strip("-")
    if not _NAME.match(name):
        raise ExportRefused(f"package name {name!r} is not usable: lower-case letters, digits and single dashes, "
                            "starting with a letter (pass --name)")
    if name.replace("-", "_") in VERIFIERS_BUILTIN_TASKSETS:
        raise ExportRefused(f"package name {name!r} is a verifiers built-in taskset's name, which verifiers would "
                            "load instead; pass --name")
    return name


def check_target(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportRefused(f"{out} is not an empty folder; export into a new one")


def _harness_manifest(env: Environment) -> dict[str, Any]:
    h = env.harness
    kind = "ToolLoop" if isinstance(h, ToolLoop) else "MultiTurn" if isinstance(h, MultiTurn) else "SingleTurn"
    out: dict[str, Any] = {"kind": kind, "class": type(h).__name__, "system_prompt": h.system_prompt,
                           "max_turns": h.max_turns}
    if isinstance(h, ToolLoop):
        out["tools"] = h.schemas
    assert isinstance(h, SingleTurn | ToolLoop | MultiTurn)
    return out


def _task_rows(env: Environment) -> list[bytes]:
    rows: list[bytes] = []
    for task in env.tasks:
        why = task_refusal(env.name, task.id, task.sandbox is not None)
        if why:
            raise ExportRefused(why)
        row = {"id": task.id, "prompt": task.prompt, "answer": task.answer, "info": task.info}
        try:
            rows.append(orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS))
        except TypeError as e:
            raise ExportRefused(f"{env.name}'s task {task.id} holds a value that is not JSON ({e})") from None
    if not rows:
        raise ExportRefused(f"{env.name} has no tasks to export")
    return rows


def _copy_source(src: Path, dest_env: Path) -> str:
    """Copy the environment's files under ``dest_env``; the module name they import as (``source``)."""
    dest_env.mkdir(parents=True)
    (dest_env / "__init__.py").write_text('"""The exported environment\'s own files."""\n', encoding="utf-8")
    if src.is_file():
        shutil.copyfile(src, dest_env / "source.py")
        return "source"
    root = dest_env / "source"
    for rel, real in env_file_paths(src):
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real, target)
    if not (root / "__init__.py").is_file():
        raise ExportRefused(f"{src} is a folder without __init__.py: not a package to carry")
    return "source"


def _check_secrets(env: Environment, src: Path, rows: list[bytes], manifest: bytes) -> None:
    """Refuse (one line naming the file and line) what is shaped like a secret in anything the package
    would hold: the environment's files, its tasks, its arguments. A package is made to be published."""
    from workbench.bundles.secrets_scan import check_files, workbench_secrets

    files = [(f"{src.name}/{rel}" if src.is_dir() else rel, real.read_bytes()) for rel, real in env_file_paths(src)]
    files += [("tasks.jsonl", b"\n".join(rows)), ("manifest.json", manifest)]
    check_files(files, f"export {env.name!r}", workbench_secrets())


def _vendored(name: str) -> str:
    files = resources.files("workbench.formats.verifiers_export").joinpath("vendored", *name.split("/"))
    return files.read_text(encoding="utf-8")


def _init_text(env: Environment, package: str) -> str:
    return (f'"""{env.name}: a Workbench environment exported for verifiers 0.4 (`vf-eval {package}`).\n\n'
            "The Harness is the environment's own (Workbench's "
            f"{type(env.harness).__name__}); --env.group-size N plays N attempts per episode,\n"
            'the group its group rewards see."""\n\n'
            "from ._bridge import WorkbenchEnv, WorkbenchHarness, WorkbenchTaskset\n\n"
            '__all__ = ["WorkbenchEnv", "WorkbenchHarness", "WorkbenchTaskset"]\n')


def _pyproject(package: str, module: str, env: Environment, requires: list[str]) -> str:
    description = (env.description or f"The Workbench environment {env.name}").splitlines()[0][:200]
    return (
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{package}"\nversion = "0.1.0"\ndescription = {json.dumps(description)}\n'
        f'requires-python = ">=3.11"\ndependencies = {json.dumps(requires)}\n\n'
        f'[tool.setuptools.packages.find]\ninclude = ["{module}", "{module}.*"]\n\n'
        f'[tool.setuptools.package-data]\n"{module}" = ["**/*"]\n'
    )


def _readme(env: Environment, package: str, module: str) -> str:
    return (f"# {env.name}\n\n{env.description}\n\nExported from Workbench (`workbench export-env {env.name} --format "
            f"verifiers`).\n\n```\npip install .\nvf-eval {package} -m MODEL -n 10 -r 1 --env.group-size 4\n```\n\n"
            f"The tasks are `{module}/tasks.jsonl`; the rewards are the environment's own rubric "
            f"(`{module}/_env/`), run against `{module}/_workbench/`.\n")


def write_package(env: Environment, out: Path, env_args: dict[str, Any], package: str,
                  requires: list[str] | None = None) -> Exported:
    """Write ``env`` as a verifiers package at ``out`` (a new or empty folder), or raise ExportRefused."""
    why = refusal(env)
    if why:
        raise ExportRefused(why)
    check_target(out)
    module = package.replace("-", "_")
    requires = list(requires or [VERIFIERS_REQUIREMENT])
    rows = _task_rows(env)
    manifest = {
        "workbench_export": 1, "env": env.name, "env_version": env.version, "env_args": env_args,
        "sampling": env.sampling.to_params(), "harness": _harness_manifest(env),
        "rubric": [{"name": f.name, "kind": f.kind, "weight": f.weight} for f in env.rubric.functions],
        "source": {"module": "source"},
    }
    try:
        orjson.dumps(manifest)
    except TypeError as e:
        raise ExportRefused(f"{env.name}'s arguments or settings are not JSON ({e})") from None
    manifest_bytes = orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n"
    _check_secrets(env, Path(env.source), rows, manifest_bytes)
    with staged_folder(out) as tmp:
        pkg = tmp / module
        pkg.mkdir()
        _copy_source(Path(env.source), pkg / "_env")
        (pkg / "manifest.json").write_bytes(manifest_bytes)
        (pkg / "tasks.jsonl").write_bytes(b"\n".join(rows) + b"\n")
        (pkg / "_workbench").mkdir()
        for part in COMPAT_MODULES:
            (pkg / "_workbench" / f"{part}.py").write_text(_vendored(f"compat/{part}.py.txt"), encoding="utf-8")
        (pkg / "_bridge.py").write_text(_vendored("bridge.py.txt"), encoding="utf-8")
        (pkg / "__init__.py").write_text(_init_text(env, package), encoding="utf-8")
        (tmp / "pyproject.toml").write_text(_pyproject(package, module, env, requires), encoding="utf-8")
        (tmp / "README.md").write_text(_readme(env, package, module), encoding="utf-8")
    return Exported(env.name, out, package, module, len(rows), type(env.harness).__name__, tuple(requires))
