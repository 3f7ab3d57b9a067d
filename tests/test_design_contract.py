"""docs/design.md is the contract: every name it promises exists in the code, and every public name is in it.

Table-driven against the public API (``workbench.__all__``), the click commands, the embedded server's
flags and ``workbench mcp``'s tools. A row names a command and the flags (and choices) the contract gives
it; each row is also looked for in the page, so the table cannot drift from what the page says.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Callable
from types import SimpleNamespace

import click
import pytest

import workbench
from tests.helpers import REPO
from workbench.cli import cli

DESIGN = REPO / "docs" / "design.md"
TEXT = DESIGN.read_text()

#: (command path, flags the contract names for it).
COMMANDS: list[tuple[str, tuple[str, ...]]] = [
    ("", ("--db",)),
    ("serve", ("--model", "--port")),
    ("eval", ("-a", "-n", "-r", "-c", "-m", "--model", "--base-url", "--harness", "--runtime", "--json")),
    ("debug", ("-m", "--model", "--base-url", "--harness", "--runtime")),
    ("validate", ("-m", "--model", "--base-url", "--no-probe", "--json")),
    ("probe", ("-a", "-n", "--json", "-m", "--model", "--base-url")),
    ("play", ("--task", "--json", "-m", "--model", "--base-url")),
    ("models add", ("--base-url", "--model-id", "--provider", "--api-key-env")),
    ("compare", ("--baseline", "--json")),
    ("optimize", ()),
    ("distill", ()),
    ("import", ("--format", "--env", "--json")),
    ("hub push", ("--index", "--version", "--json")),
    ("hub pull", ()), ("hub search", ()), ("hub versions", ()), ("hub show", ()), ("hub fork", ()), ("hub remove", ()),
    ("mcp", ("--http",)),
    ("train", ("--json",)),
    ("launch", ("--backend", "--nodes", "--json")),
    ("export-env", ("--format", "-o", "--name", "--json")),
    ("import-eval", ("--run", "--data", "-o", "--judge", "--json")),
]

def _click_choices(path: str, option: str) -> set[str]:
    param = next(p for p in command_at(path).params if isinstance(p, click.Option) and option in p.opts)
    assert isinstance(param.type, click.Choice), f"{option} of `{path}` takes any value, not a choice"
    return {str(choice) for choice in param.type.choices}


def _providers() -> set[str]:
    from workbench.config.models import PROVIDERS  # `models add --provider` is checked where models are

    return set(PROVIDERS)


#: (command path, option, the choices the contract names, what the code accepts).
CHOICES: list[tuple[str, str, tuple[str, ...], Callable[[], set[str]]]] = [
    ("models add", "--provider", ("openai", "anthropic"), _providers),
    ("import", "--format", ("openai-jsonl", "verifiers", "inspect"), lambda: _click_choices("import", "--format")),
    ("export-env", "--format", ("verifiers",), lambda: _click_choices("export-env", "--format")),
]

MCP_TOOLS = {"list_environments", "validate_environment", "run_eval", "list_runs", "show_rollout", "search_rollouts",
             "diff_rollouts", "rescore", "plan_launch"}

#: Named in the page as reserved for open work, not built yet; listed so that one being built is noticed.
RESERVED: list[str] = []


def command_at(path: str) -> click.Command:
    command: click.Command = cli
    for word in path.split():
        assert isinstance(command, click.Group) and word in command.commands, f"`workbench {path}` does not exist"
        command = command.commands[word]
    return command


def flags_of(path: str) -> set[str]:
    if path == "serve":  # its options are the embedded server's own (local_runtime/server/serve.py)
        from workbench_local.server.serve import build_parser

        return {opt for action in build_parser()._actions for opt in action.option_strings}
    command = command_at(path)
    return {opt for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize(("path", "flags"), COMMANDS, ids=lambda v: v if isinstance(v, str) else None)
def test_every_command_and_flag_of_the_contract_exists(path: str, flags: tuple[str, ...]) -> None:
    if path:  # `hub push ENV`, or one of `hub pull|search|versions`
        *parent, word = path.split()
        named = rf"`(workbench )?{re.escape(' '.join([*parent, '']))}[^`]*\b{re.escape(word)}\b"
        assert re.search(named, TEXT), f"`{path}` is not named in docs/design.md"
    missing = set(flags) - flags_of(path)
    assert not missing, f"`workbench {path}` has no {sorted(missing)}, which docs/design.md promises"
    for flag in flags:
        assert re.search(rf"{re.escape(flag)}\b", TEXT), f"{flag} of `{path}` is not named in docs/design.md"


@pytest.mark.parametrize(("path", "option", "choices", "accepted"), CHOICES,
                         ids=lambda v: v if isinstance(v, str) else None)
def test_the_choices_the_contract_names_are_accepted(path: str, option: str, choices: tuple[str, ...],
                                                     accepted: Callable[[], set[str]]) -> None:
    missing = set(choices) - accepted()
    assert not missing, f"{option} of `{path}` does not accept {sorted(missing)}, which docs/design.md promises"
    assert f"{option} {'|'.join(choices)}" in TEXT


def test_the_runtimes_the_contract_names_are_registered() -> None:
    from workbench import plugins

    assert {"local", "docker", "modal"} <= set(plugins.names("runtimes"))
    assert "--runtime local|docker[:IMAGE]|modal" in TEXT


def test_every_wb_name_in_the_contract_is_public_and_every_public_name_is_in_it() -> None:
    named = set(re.findall(r"\bwb\.(\w+)", TEXT))
    assert named, "docs/design.md names no wb. attribute"
    public = set(workbench.__all__)
    unknown = {name for name in named if name not in public and not hasattr(workbench, name)}
    assert not unknown, f"docs/design.md names wb.{sorted(unknown)}, which workbench does not export"
    undocumented = public - named
    assert not undocumented, f"workbench exports {sorted(undocumented)}, which docs/design.md does not name"


#: (wb function, the keyword arguments the contract names for it).
PYTHON_JOBS = [("eval", ("model", "base_url", "n", "rollouts", "env_args", "db")), ("compare", ("baseline", "db"))]


@pytest.mark.parametrize(("name", "keywords"), PYTHON_JOBS, ids=[name for name, _ in PYTHON_JOBS])
def test_the_python_jobs_take_the_arguments_the_contract_names(name: str, keywords: tuple[str, ...]) -> None:
    job = getattr(workbench, name)
    missing = set(keywords) - set(inspect.signature(job).parameters)
    assert not missing, f"wb.{name} takes no {sorted(missing)}, which docs/design.md promises"
    assert f"`wb.{name}(" in TEXT and all(f"{k}=" in TEXT for k in keywords)


def test_the_mcp_server_has_the_tools_the_contract_names() -> None:
    from workbench.cli.mcp_server import build_server

    tools = {tool.name for tool in asyncio.run(build_server(lambda read_only_ok: None).list_tools())}
    assert tools >= MCP_TOOLS, f"workbench mcp lacks {sorted(MCP_TOOLS - tools)}"
    for tool in MCP_TOOLS:
        assert f"`{tool}`" in TEXT


def test_the_reserved_names_are_named_in_the_contract_and_not_yet_commands() -> None:
    """When one of these is built, move it from the page's reserved list to the contract and to COMMANDS (the
    list goes from the page once nothing is reserved)."""
    if "Names reserved for open work" not in TEXT:
        assert not RESERVED, "docs/design.md lists no reserved names, yet RESERVED has some"
        return
    section = TEXT.split("Names reserved for open work", 1)[1].split("\n## ", 1)[0]
    for name in RESERVED:
        assert f"`{name}" in section, f"{name} is not in docs/design.md's reserved names"
        assert name not in cli.commands, f"`workbench {name}` exists now: move it out of the reserved names"


def test_the_proxy_url_the_contract_gives_is_the_one_the_proxy_builds() -> None:
    from workbench.rollouts.proxy import InterceptionProxy

    assert "`http://127.0.0.1:PORT/r/<rollout>~<secret>/v1`" in TEXT
    listening = SimpleNamespace(host="127.0.0.1", port=8123, _secret=lambda rollout_id: "5ecret")
    assert InterceptionProxy.url_for(listening, "run-1.0.0") == "http://127.0.0.1:8123/r/run-1.0.0~5ecret/v1"
