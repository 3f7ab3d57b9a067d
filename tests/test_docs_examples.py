"""Every code example in README.md, ARCHITECTURE.md and docs/*.md runs as written, or says in the page why it cannot.

A fenced block runs by its language:

- ``python``: written to a file and run with this interpreter; a block that defines ``load_environment`` is
  an environment, so ``workbench validate FILE --json`` must pass on it too.
- ``bash``/``sh``/``console``: each ``workbench ...`` line runs through the CLI (``./scripts/workbench`` is
  the same CLI) with a private store and config, in a folder that is not the checkout: it holds ``my_env.py``
  and ``my_env/`` (the README's environment as a file and as a package), and nothing else (a run config
  such as ``cloud_runtime/configs/...`` is found among the installed package's). The embedded model is the
  session's fast build (``tiny_dir``) in the private cache, and the servers a block starts are stopped
  after it.
- ``toml``: parsed; a block of settings tables loads as the settings file, strictly.

An HTML comment on the line before the fence marks a block that does not run here:
``<!-- example: skip (why) -->`` (a model, a GPU, Modal, a key, a terminal, minutes of training) or
``<!-- example: synopsis -->`` (placeholders in capitals, ``[optional]`` parts, ``a | b`` alternatives). Both
are listed with their reason when the tests run; the command and flag names of every shell block, run or
not, must exist in the CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from tests.helpers import REPO, cli_environment, last_json, run_workbench, write_file
from workbench.cli import cli

PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARK = re.compile(r"^<!-- example: (skip|synopsis)(?: \((.+)\))? -->$")
SHELLS = {"bash", "sh", "console", "shell"}
NOT_CODE = {"", "text", "json", "jsonl"}
SYNOPSIS = ("a synopsis (placeholders in capitals, [optional] parts, a | b alternatives); "
            "its commands and flags are checked by test_every_shell_line_names_real_commands_and_flags")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    lang: str
    code: str
    mark: str | None = None
    reason: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        before = [ln.strip() for ln in text[:match.start()].splitlines() if ln.strip()]
        mark = MARK.match(before[-1]) if before else None
        found.append(Example(page, line, match.group(1).lower(), match.group(2),
                             mark.group(1) if mark else None, mark.group(2) if mark else None))
    return found


ALL = [ex for page in PAGES for ex in examples(page)]
CODE = [ex for ex in ALL if ex.lang not in NOT_CODE]


def command_lines(code: str) -> list[str]:
    """The ``workbench`` command lines of a shell block: continuations joined, ``$ `` prompts dropped."""
    lines, pending = [], ""
    for raw in code.splitlines():
        line = pending + raw.strip().removeprefix("$ ")
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def workbench_words(line: str) -> list[str] | None:
    """A line's words after ``workbench`` (comments dropped), or None when it runs something else."""
    words = shlex.split(line, comments=True)
    if not words or words[0] not in ("workbench", "./scripts/workbench"):
        return None
    return words[1:]


# -- the markers ----------------------------------------------------------------------------------
def test_the_pages_hold_examples_and_every_mark_says_why() -> None:
    assert len(CODE) >= 10, f"found only {len(CODE)} code blocks; is the fence pattern right?"
    for ex in CODE:
        assert ex.lang in {"python", "toml"} | SHELLS, f"{ex.where}: a ```{ex.lang} block this test cannot run"
        if ex.mark == "skip":
            assert ex.reason, f"{ex.where}: `<!-- example: skip (why) -->` needs its reason"


@pytest.mark.parametrize("ex", [ex for ex in CODE if ex.mark], ids=lambda ex: ex.where)
def test_marked_examples_are_listed_with_their_reason(ex: Example) -> None:
    pytest.skip(f"{ex.where}: {ex.reason or SYNOPSIS}")


# -- names ------------------------------------------------------------------------------------------
def _serve_flags() -> set[str]:
    from workbench_local.server.serve import build_parser

    return {opt for action in build_parser()._actions for opt in action.option_strings}


def _flags(command: click.Command) -> set[str]:
    return {opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


def _problems(words: list[str]) -> list[str]:
    """What in ``workbench WORDS`` (a command line, maybe a synopsis) names no command or flag of the CLI."""
    problems: list[str] = []
    segments: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            segments.append([])
        else:
            segments[-1].append(word)
    group: click.Group = cli
    command: click.Command = cli
    for i, segment in enumerate(segments):
        rest = list(segment)
        if rest and rest[0] in ("workbench", "./scripts/workbench"):  # ``runs RUN --follow | workbench stop RUN``
            group, rest = cli, rest[1:]
        if i == 0 or (rest and rest[0] in group.commands):  # an alternative subcommand: ``list | remove NAME``
            command = group
            while isinstance(command, click.Group) and rest and rest[0].strip("[]") in command.commands:
                group, command = command, command.commands[rest.pop(0).strip("[]")]
            if isinstance(command, click.Group) and rest and not rest[0].startswith(("-", "[")):
                name = "workbench" if command is cli else command.name
                problems.append(f"`{' '.join(words)}`: {rest[0]!r} is not a command of {name}")
        known = _serve_flags() if command.name == "serve" else _flags(command) | {"-h", "--help"}
        extra_keys = bool(command.context_settings.get("ignore_unknown_options"))
        for word in rest:
            flag = word.strip("[]").split("=", 1)[0]
            if not flag.startswith("-") or flag == "-":
                continue
            if flag not in known and not (extra_keys and "." in flag):  # train/launch take --section.key
                problems.append(f"`{' '.join(words)}`: {command.name} has no option {flag}")
    return problems


SHELL_LINES = [(ex, line) for ex in CODE if ex.lang in SHELLS for line in command_lines(ex.code)]


def test_every_shell_line_names_real_commands_and_flags() -> None:
    problems = []
    checked = 0
    for ex, line in SHELL_LINES:
        words = workbench_words(line)
        if words is not None:
            checked += 1
            problems += [f"{ex.where}: {p}" for p in _problems(words)]
    assert checked >= 40, f"only {checked} workbench lines found in the docs"
    assert not problems, "\n".join(problems)


def test_the_name_check_catches_a_wrong_command_or_flag() -> None:
    assert _problems(["eval", "arithmetic", "-n", "5", "[--json]"]) == []
    assert _problems(["hub", "search", "[TEXT]", "|", "versions", "NAME", "|", "show", "NAME[==V]"]) == []
    assert _problems(["train", "ENV", "--trainer.lr", "5e-3"]) == []
    assert _problems(["runs", "RUN", "--follow", "|", "workbench", "stop", "RUN"]) == []
    assert _problems(["evaluate", "ENV"]) == ["`evaluate ENV`: 'evaluate' is not a command of workbench"]
    assert _problems(["runs", "RUN", "|", "workbench", "stop", "--now"]) == ["`runs RUN | workbench stop --now`: "
                                                                            "stop has no option --now"]
    assert _problems(["eval", "arithmetic", "--tasks-count", "5"]) == ["`eval arithmetic --tasks-count 5`: eval has no "
                                                                      "option --tasks-count"]
    assert _problems(["hub", "publish", "ENV"]) == ["`hub publish ENV`: 'publish' is not a command of hub"]
    assert _problems(["serve", "--port", "8000", "--ports", "1"]) == ["`serve --port 8000 --ports 1`: serve has no "
                                                                      "option --ports"]


# -- running them ----------------------------------------------------------------------------------
README_ENV = next(ex.code for ex in examples(REPO / "README.md") if ex.lang == "python")


@pytest.fixture
def example_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    write_file(folder / "my_env.py", README_ENV)
    write_file(folder / "my_env" / "__init__.py", README_ENV)
    return folder


def with_embedded_model(home: Path, tiny_dir: Path) -> None:
    """The session's tiny build as the embedded model of the private cache (a build of the current recipe)."""
    from workbench_local.models.tiny_model import MODEL_ID

    models = home / "xdg-cache" / "workbench" / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / MODEL_ID).symlink_to(tiny_dir, target_is_directory=True)


def stop_embedded_servers(home: Path) -> None:
    """Stop each embedded server the block started (its state file names its process)."""
    import json
    import signal

    for state in (home / "xdg-data").glob("workbench/embedded/*.json"):
        try:
            pid = int(json.loads(state.read_text())["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)


RUNNABLE = [ex for ex in CODE if ex.mark is None]


@pytest.mark.slow
@pytest.mark.parametrize("ex", RUNNABLE, ids=lambda ex: ex.where)
def test_the_example_runs_as_written(ex: Example, example_dir: Path, tmp_path: Path,
                                    request: pytest.FixtureRequest) -> None:
    home = tmp_path / "home"
    env = cli_environment(home, tmp_path / "store.db")
    if ex.lang == "python":
        run_python(ex, example_dir, env)
    elif ex.lang == "toml":
        load_toml(ex, tmp_path)
    else:
        with_embedded_model(home, request.getfixturevalue("tiny_dir"))
        try:
            for line in command_lines(ex.code):
                words = workbench_words(line)
                assert words is not None, f"{ex.where}: {line!r} is not a workbench command; mark the block"
                res = run_workbench(words, env, cwd=example_dir)
                assert res.rc == 0, (f"{ex.where}: `{line}` exited {res.rc}\n{res.stdout[-2000:]}\n"
                                     f"{res.stderr[-2000:]}")
        finally:
            stop_embedded_servers(home)


def run_python(ex: Example, folder: Path, env: dict[str, str]) -> None:
    path = write_file(folder / "example.py", ex.code)
    p = subprocess.run([sys.executable, str(path)], cwd=folder, env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"{ex.where}: the example exited {p.returncode}\n{p.stderr[-3000:]}"
    if re.search(r"^def load_environment\(", ex.code, re.M):
        res = run_workbench(["validate", path, "--json"], env, cwd=folder)
        assert res.rc == 0, f"{ex.where}: validate exited {res.rc}\n{res.stdout[-3000:]}\n{res.stderr[-2000:]}"
        report = last_json(res.stdout)
        assert report["ok"] and not report["problems"], f"{ex.where}: {report['problems']}"


def load_toml(ex: Example, tmp_path: Path) -> None:
    from workbench.config.settings import Settings, load_settings

    data = tomllib.loads(ex.code)
    if set(data) <= set(Settings.model_fields):
        path = write_file(tmp_path / "settings.toml", ex.code)
        load_settings(path, strict=True)


def test_the_example_folder_holds_the_readme_environment(example_dir: Path) -> None:
    assert "def load_environment" in README_ENV
    assert sorted(os.listdir(example_dir)) == ["my_env", "my_env.py"]
    assert not (example_dir / "cloud_runtime").exists() and example_dir.resolve() != REPO.resolve()
