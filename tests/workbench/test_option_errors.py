"""Errors as data: an option out of its range is an ``OptionError`` naming its field, the value and what is
allowed; each face names the field its own way. For each bad value: the domain error's data, the CLI's one
line naming the flag (``workbench eval`` in a real process), the MCP tool's error naming the argument
(``workbench mcp`` over stdio) and, where the app has the option, the quick eval's notification naming the
setting it comes from (Pilot)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.app.conftest import _isolated, env_dir, make_app, store_file  # noqa: F401  (the app's fixtures)
from tests.helpers import ADDER_ENV, CliResult, MockServer, assert_user_error
from workbench.errors import ConfigError, FieldError, OptionError
from workbench.runs.evaluate import EvalOptions


@dataclass(frozen=True)
class Bad:
    field: str  # the field of EvalOptions
    value: Any
    allowed: str  # what the error says is allowed
    flag: str | None  # how `workbench eval` names it (None: eval has no such flag)
    cli_args: tuple[str, ...]  # the flag given as a person types it
    argument: str | None  # how the run_eval tool names it (None: the tool has no such argument)


BAD = [
    Bad("n", 0, "at least 1", "-n/--num-tasks", ("-n", "0"), None),  # run_eval refuses n < 1 itself
    Bad("rollouts_per_task", 0, "at least 1", "-r/--rollouts", ("--rollouts", "0"), None),
    Bad("concurrency", 0, "at least 1", "-c/--concurrency", ("-c", "0"), "concurrency"),
    Bad("timeout_s", 0.0, "a positive number of seconds", "--timeout", ("--timeout", "0"), "timeout"),
    Bad("max_retries", -1, "0 or more", "--max-retries", ("--max-retries", "-1"), None),
    Bad("temperature", 9.0, "a number from 0 to 5", "-t/--temperature", ("-t", "9"), "temperature"),
    Bad("max_tokens", 0, "at least 1", "--max-tokens", ("--max-tokens", "0"), "max_tokens"),
    Bad("stall_timeout_s", -1.0, "a positive number of seconds", "--stall-timeout", ("--stall-timeout", "-1"), None),
    Bad("max_response_mb", 0.0, "a positive number", "--max-response-mb", ("--max-response-mb", "0"), None),
    Bad("pass_threshold", float("nan"), "a finite number", "--pass-threshold", ("--pass-threshold", "nan"), None),
    Bad("task_indices", [], "at least one task index, each 0 or more", None, (), None),
]
BAD_URL = "ftp://127.0.0.1/v1"  # the one option the app's quick eval takes from the user (its settings)


@pytest.mark.parametrize("bad", BAD, ids=[b.field for b in BAD])
def test_the_domain_error_carries_field_value_and_range(bad: Bad) -> None:
    with pytest.raises(OptionError) as caught:
        EvalOptions(env="x", **{bad.field: bad.value}).validate()
    e = caught.value
    assert isinstance(e, ConfigError), "caught where a ConfigError is"
    assert (e.field, e.allowed) == (f"EvalOptions.{bad.field}", bad.allowed)
    assert e.value == bad.value or (e.value != e.value and bad.value != bad.value)  # nan is not nan
    assert str(e).startswith(f"{bad.field} must be {bad.allowed}"), "the domain says the field's own name"
    assert "--" not in str(e), "no flag in the domain's words"
    again = pickle.loads(pickle.dumps(e))  # a worker's error crosses a process with its data
    assert (type(again), again.field, again.allowed, str(again)) == (OptionError, e.field, e.allowed, str(e))


def test_a_base_url_that_cannot_work_is_a_field_error() -> None:
    with pytest.raises(OptionError) as caught:
        EvalOptions(env="x", base_url=BAD_URL, model="m").validate()
    assert caught.value.field == "EvalOptions.base_url" and caught.value.value == BAD_URL
    assert str(caught.value).startswith(f"base_url {BAD_URL!r} cannot work")


def test_each_face_renders_the_field_its_own_way() -> None:
    e = OptionError("EvalOptions.temperature", 9.0, "a number from 0 to 5")
    assert e.render(lambda f: "-t/--temperature") == "-t/--temperature must be a number from 0 to 5, not 9.0"
    dup = OptionError("EvalOptions.model", "a", template="{field} {value} is given twice")
    assert dup.render(lambda f: "-m/--model", lambda f: "-m") == "-m a is given twice", "typed before its value"
    assert dup.render(lambda f: "model") == "model a is given twice"
    framed = OptionError("EvalOptions.n", 0, "at least 1").framed("-m {who}: ", "{kept}", who="a", kept="; b kept")
    assert framed.render(lambda f: "N") == "-m a: N must be at least 1, not 0; b kept" and isinstance(framed, FieldError)


def test_every_flag_is_read_from_the_eval_commands_click_parameters() -> None:
    """The CLI's names are derived from its click parameters, not written twice: every field that
    ``eval`` takes has its flag found."""
    from workbench.cli.eval_cmd import eval_command
    from workbench.cli.option_names import flag_of

    for bad in BAD:
        if bad.flag is not None:
            assert flag_of(eval_command, f"EvalOptions.{bad.field}") == bad.flag
    assert flag_of(eval_command, "EvalOptions.base_url") == "--base-url"
    assert flag_of(eval_command, "EvalOptions.model") == "-m/--model"


@pytest.mark.parametrize("bad", [b for b in BAD if b.flag], ids=[b.field for b in BAD if b.flag])
def test_the_cli_names_the_flag(bad: Bad, cli: Callable[..., CliResult], write_env: Callable[..., Path],
                                arith_server: MockServer) -> None:
    res = cli("eval", write_env(ADDER_ENV), "--base-url", arith_server.base_url, "-m", "mock-model", *bad.cli_args)
    line = assert_user_error(res, f"{bad.flag} must be {bad.allowed}")
    assert line.startswith(f"error: {bad.flag} must be"), "the flag, not the field's own name"


def test_the_cli_names_the_base_url_flag(cli: Callable[..., CliResult], write_env: Callable[..., Path]) -> None:
    res = cli("eval", write_env(ADDER_ENV), "--base-url", BAD_URL, "-m", "mock-model")
    assert_user_error(res, f"--base-url {BAD_URL!r} cannot work")


async def test_the_mcp_tool_names_its_argument(cli_env: dict[str, str], tmp_path: Path,
                                               arith_server: MockServer) -> None:
    from tests.workbench.test_mcp_server import eval_args, serve

    rows = [(b.argument, {b.argument: b.value}, f"{b.argument} must be {b.allowed}") for b in BAD if b.argument]
    rows.append(("base_url", {"base_url": BAD_URL}, f"base_url {BAD_URL!r} cannot work"))
    before = arith_server.requests()
    async with serve(cli_env, tmp_path) as s:
        for argument, given, said in rows:
            res = await s.call_tool("run_eval", {**eval_args(arith_server, n=1, r=1), **given})
            assert res.is_error, f"run_eval with {given} did not fail"
            text = res.content[0].text  # type: ignore[union-attr]
            assert text.startswith(said), f"{argument}: {text!r}"
            assert "--" not in text.split(";")[0], f"a flag in the tool's error: {text!r}"
        res = await s.call_tool("validate_environment", {"env": "arithmetic", "args": {"bogus": 1}})
        assert res.is_error and "does not accept these args arguments" in res.content[0].text  # type: ignore[union-attr]
    assert arith_server.requests() == before, "a refused run_eval called the model"


async def test_the_app_names_the_setting_of_its_quick_eval(make_app: Callable[..., Any]) -> None:  # noqa: F811
    from tests.app.conftest import SIZE, wait_until
    from tests.app.test_environments import _loaded, _notes
    from workbench.config.settings import settings_path
    from workbench.format import fpath

    app = make_app(base_url=BAD_URL, model="mock-model")
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot, app)
        await pilot.press("e")
        note = await wait_until(pilot, lambda: next((n for n in _notes(app) if n.title == "quick eval failed"), None),
                                timeout=60, what="the failure notification")
        assert f"base_url in {fpath(settings_path())} {BAD_URL!r} cannot work" in note.message
        assert "--base-url" not in note.message
