"""docs/cli_reference.md is generated from the click commands and kept current."""

from __future__ import annotations

import difflib
import subprocess
import sys
from pathlib import Path

import click

from tests.helpers import REPO
from workbench.cli import cli, reference

PAGE = REPO / reference.PAGE


def test_the_cli_reference_is_current() -> None:
    assert PAGE.exists(), f"{reference.PAGE} is missing; run `{reference.REGENERATE}`"
    written, now = PAGE.read_text(), reference.current()
    if written != now:
        diff = "".join(list(difflib.unified_diff(written.splitlines(True), now.splitlines(True),
                                                 "written", "from the commands"))[:60])
        raise AssertionError(f"{reference.PAGE} is out of date; run `{reference.REGENERATE}`\n{diff}")


def test_the_reference_names_every_command_and_option() -> None:
    page = PAGE.read_text()
    for path, command, ctx in reference.walk(cli, ("workbench",)):
        assert f"## `{' '.join(path)}`\n" in page, path
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.hidden and param is not command.get_help_option(ctx):
                assert any(f"`{opt}" in page or f", {opt}" in page for opt in param.opts), (path, param.opts)
    for nested in (("workbench", "hub", "push"), ("workbench", "models", "add"), ("workbench", "sandbox", "exec")):
        assert f"## `{' '.join(nested)}`\n" in page
    serve = page.split("## `workbench serve`\n", 1)[1].split("\n## ", 1)[0]  # the embedded server's own options
    for row in ("| `-m, --model MODEL` |", "| `--port PORT` | 0 picks a free port (see --ready-file). Default: `8000`. |",
                "| `--threads THREADS` | torch CPU threads. Default: worked out from this machine. |"):
        assert row in serve


def test_a_command_renders_with_its_usage_help_options_and_defaults() -> None:
    @click.group()
    def tool() -> None:
        """A tool."""

    @tool.command()
    @click.argument("env")
    @click.option("-n", "--tasks", default=5, show_default=True, help="How many tasks.")
    @click.option("--name", required=True, help="A | name.")
    @click.option("--fast/--slow", default=False, help="Speed.")
    @click.option("--tag", multiple=True, envvar="TOOL_TAG", help="Tags.")
    @click.option("--secret", hidden=True)
    def run(env: str, tasks: int, name: str, fast: bool, tag: tuple[str, ...], secret: str) -> None:
        """Run ENV.

        Second paragraph.
        """

    page = reference.render(tool, prog="tool")
    assert "## `tool run`\n\n```text\ntool run [OPTIONS] ENV\n```\n\nRun ENV.\n\nSecond paragraph.\n" in page
    assert "| `-n, --tasks INTEGER` | How many tasks. Default: `5`. |" in page
    assert "| `--name TEXT` | A \\| name. Required. |" in page
    assert "| `--fast / --slow` | Speed. Default: --slow. |" in page
    assert "| `--tag TEXT` | Tags. Environment: `TOOL_TAG`. May be repeated. |" in page
    assert "--secret" not in page and "| `--help" not in page
    assert "Commands: [`tool run`](#tool-run)." in page


def test_check_fails_with_the_command_to_run_when_the_page_differs(tmp_path: Path) -> None:
    stale = tmp_path / "cli_reference.md"
    stale.write_text(PAGE.read_text().replace("## `workbench eval`", "## `workbench evaluate`"))
    check = [sys.executable, "-m", "workbench.cli.reference", "--check", "--output", str(stale)]
    res = subprocess.run(check, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip() == f"{stale} is out of date; run `{reference.REGENERATE}`"
    write = [sys.executable, "-m", "workbench.cli.reference", "--output", str(stale)]
    subprocess.run(write, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=True)
    assert subprocess.run(check, capture_output=True, text=True, timeout=120, cwd=tmp_path).returncode == 0
    assert stale.read_text() == PAGE.read_text()
